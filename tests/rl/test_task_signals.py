"""Task-read score signals: first mistakes, cues, answers, pairwise judgements, branch layouts."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import string

import numpy as np
import pytest

import rlvr_jax.rl.methods  # noqa: F401  (registers the signals)
from rlvr_jax import tasks
from rlvr_jax.core import cbpo, cliff, om_grpo
from rlvr_jax.rl import batch as batch_lib
from rlvr_jax.rl import config, signals
from rlvr_jax.rl.methods import task_signals as ts
from rlvr_jax.rollout import Groups
from rlvr_jax.tasks import CORRECT, arithmetic, countdown, extract_answer, multilingual
from rlvr_jax.testing import score_context
from rlvr_jax.tokenizers import CharTokenizer
from rlvr_jax.train.warmstart import default_tokenizer

CHARS = CharTokenizer(string.printable.replace("\x0b", "").replace("\x0c", "") + "áéíóúñèàç")
PROMPT = 3  # prompt columns (left-padded) before each response


def _problem(expression, language=None):
    tree = arithmetic.parse_expression(expression)
    if language:
        return multilingual.build_problem(f"m/{expression}", tree, language)
    return arithmetic.build_problem(f"a/{expression}", tree)


def _groups(tok, task, problems, responses, group, valid=None):
    """Groups in the sampler layout: [pad | prompt | response + eos | pad] per row."""
    ids = [tok.encode(r) + [tok.eos_id] for r in responses]
    width = PROMPT + 2 + max(map(len, ids))
    r = len(ids)
    tokens = np.zeros((r, width), np.int32)
    prompt = np.zeros((r, width), bool)
    resp = np.zeros((r, width), bool)
    for i, x in enumerate(ids):
        tokens[i, 1 : 1 + PROMPT] = 7  # any prompt ids
        prompt[i, 1 : 1 + PROMPT] = True
        tokens[i, 1 + PROMPT : 1 + PROMPT + len(x)] = x
        resp[i, 1 + PROMPT : 1 + PROMPT + len(x)] = True
    group = np.asarray(group, np.int32)
    verdicts = [task.verify(problems[g], t) for g, t in zip(group, responses, strict=True)]
    correct = np.array([v.reason == CORRECT for v in verdicts])
    valid = np.ones(r, bool) if valid is None else np.asarray(valid, bool)
    zeros = np.zeros((r, width), np.float32)
    return Groups(
        tokens=tokens,
        attention_mask=prompt | resp,
        prompt_mask=prompt,
        response_mask=resp,
        behaviour_logps=zeros,
        entropy=zeros,
        group=group,
        valid=valid,
        rewards=correct.astype(np.float32),
        correct=correct,
        stopped=np.ones(r, bool),
        reasons=[v.reason for v in verdicts],
        problems=list(problems),
    )


def _compute(names, task, tok, g, **options):
    """signals.compute with a default config listing `names` (options: "signal.field")."""
    c = config.default_config()
    c.score.signals = names
    for key, value in options.items():
        name, field = key.split("__")
        c.score[name][field] = value
    ctx = dataclasses.replace(_context(), tokenizer=tok, task=task)
    names = signals.signal_names(c)
    options = {n: c.score[n].to_dict() for n in names}
    return signals.compute(ctx, g, batch_lib.from_groups(g), names, options)


@functools.cache
def _context():
    return score_context()


P1 = "(7 + 5) * 3 - 4"
GOOD1 = "7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32\nAnswer: 32"


# ---------------------------------------------------------------- first mistake
def test_first_mistake_exact_token_index_char_tokenizer():
    task = arithmetic.ArithmeticTask()
    problems = [_problem(P1), _problem("2 * 3 + 4")]
    responses = [
        GOOD1,  # correct: −1
        "7 + 5 = 12\n12 * 3 = 35\nAnswer: 31",  # arithmetic error on line 2: char 11
        "7 + 5 = 13\n13 * 3 = 39\nAnswer: 35",  # line 1: char 0
        "7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32",  # no answer line: the stop token, 34
        "Hello\n7 + 5 = 12\n12 + 3 = 15\nAnswer: 11",  # prose skipped; invalid step at 17
        "2 * 3 = 6\n6 + 4 = 10\nAnswer: 10",  # group 1, correct
        "2 * 3 = 6\n6 + 4 = 11\nAnswer: 11",  # group 1, line 2 at char 10
        "7 + 5 = 13",  # invalid row: −1
    ]
    g = _groups(CHARS, task, problems, responses, [0, 0, 0, 0, 0, 1, 1, 1], valid=[1] * 7 + [0])
    out = _compute("first_mistake", task, CHARS, g)["first_mistake_B"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [-1, 11, 0, 34, 17, -1, 10, -1])
    assert responses[3][:34] == responses[3] and len(CHARS.encode(responses[3])) == 34


def test_first_mistake_subword_tokenizer_points_at_the_wrong_line():
    tok = default_tokenizer()
    task = arithmetic.ArithmeticTask()
    good, bad = "7 + 5 = 12\n", "12 * 3 = 35\nAnswer: 31"
    g = _groups(tok, task, [_problem(P1)], [good + bad, GOOD1], [0, 0])
    k = int(_compute("first_mistake", task, tok, g)["first_mistake_B"][0])
    ids = tok.encode(good + bad)
    assert ids[: len(tok.encode(good))] == tok.encode(good)  # the line break splits tokens
    assert k == len(tok.encode(good))
    assert tok.decode(ids[k:]).startswith("12 * 3 = 35")


def _first_mistake_ctx(task, tok, g, **options):
    """A fresh context (own caches and metrics) and the signal's options."""
    c = config.default_config()
    for key, value in options.items():
        c.score.first_mistake[key] = value
    ctx = dataclasses.replace(
        _context(), tokenizer=tok, task=task, cache={}, step_cache={}, metrics={}
    )
    return ctx, {"first_mistake": c.score.first_mistake.to_dict()}


def _locate(ctx, g, options):
    return signals.compute(ctx, g, batch_lib.from_groups(g), ["first_mistake"], options)[
        "first_mistake_B"
    ]


def test_first_mistake_judge_locator_maps_named_lines(monkeypatch):
    from rlvr_jax.train import judge

    task = arithmetic.ArithmeticTask()
    responses = [
        GOOD1,  # correct: never judged
        "7 + 5 = 12\n12 * 3 = 35\nAnswer: 31",  # judge says line 2 (char 11), as the exact one
        "7 + 5 = 13\n13 * 3 = 39\nAnswer: 35",  # judge says line 3 (char 23; exact: line 1)
        "7 + 5 = 12\n12 * 3 = 36\n36 - 4 = 32",  # judge says line 9: past the end, the stop token
        "7 + 5 = 12\n12 + 3 = 15\nAnswer: 11",  # "None": nothing located
        "7 + 5 = 11",  # unparsable answer: nothing located
    ]
    g = _groups(CHARS, task, [_problem(P1)], responses, [0] * 6)
    answers = {1: "Line 2", 2: "line 3", 3: "Line 9", 4: "None", 5: "it is wrong"}
    seen = []

    def fake_judge_lines(sampler, tokenizer, problems, texts, key, *, max_new_tokens):
        seen.append((list(texts), max_new_tokens))
        raw = [answers[responses.index(t)] for t in texts]
        return [judge.parse_judgement(r) for r in raw], raw

    monkeypatch.setattr(judge, "judge_lines", fake_judge_lines)
    ctx, opts = _first_mistake_ctx(task, CHARS, g, locator="judge", judge_domain="arithmetic")
    ctx.cache[("judge", "arithmetic", "judge")] = (None, CHARS)  # no model: the fake judges
    out = _locate(ctx, g, opts)
    np.testing.assert_array_equal(out, [-1, 11, 23, len(responses[3]), -1, -1])
    assert seen == [(responses[1:], 8)]  # wrong rows only, in order
    m = ctx.metrics
    assert m["first_mistake/judge_unparsed"] == pytest.approx(1 / 5)
    assert m["first_mistake/judge_agree_exact"] == pytest.approx(2 / 5)  # rows 1 and 3
    assert m["first_mistake/located_frac"] == pytest.approx(3 / 5)


def test_first_mistake_noisy_locator_and_bad_options():
    task = arithmetic.ArithmeticTask()
    wrong = ["7 + 5 = 12\n12 * 3 = 35\nAnswer: 31", "7 + 5 = 13\n13 * 3 = 39\nAnswer: 35"]
    g = _groups(CHARS, task, [_problem(P1)], wrong * 20, [0] * 40)
    exact = _compute("first_mistake", task, CHARS, g)["first_mistake_B"]
    for rate, moved in ((0.0, 0.0), (1.0, 1.0)):
        ctx, opts = _first_mistake_ctx(task, CHARS, g, locator="noisy", error_rate=rate)
        out = _locate(ctx, g, opts)
        assert np.mean(out != exact) == moved
        assert ctx.metrics["first_mistake/moved_frac"] == moved
        assert (out >= 0).all() and (out <= len(wrong[0])).all()
    again = _locate(ctx, g, opts)
    np.testing.assert_array_equal(again, out)  # seeded by (noise_seed, the step's rows)
    ctx, opts = _first_mistake_ctx(task, CHARS, g, locator="noisy", error_rate=0.5)
    half = _locate(ctx, g, opts)
    opts["first_mistake"]["noise_seed"] = 1
    assert (_locate(ctx, g, opts) != half).any()  # another seed, other moves
    for options, match in (
        (dict(locator="oracle"), "valid: exact"),
        (dict(locator="noisy", error_rate=2.0), "0, 1"),
    ):
        ctx, opts = _first_mistake_ctx(task, CHARS, g, **options)
        with pytest.raises(ValueError, match=match):
            _locate(ctx, g, opts)


def test_first_mistake_multilingual_and_no_step_verifier():
    task = multilingual.MultilingualArithmetic(language="es")
    p = _problem(P1, "es")
    good = "7 más 5 es 12\n12 por 3 es 36\n36 menos 4 es 32\nRespuesta: 32"
    bad = "7 más 5 es 12\n12 por 3 es 35\nRespuesta: 31"
    g = _groups(CHARS, task, [p], [good, bad], [0, 0])
    assert list(g.correct) == [True, False]
    out = _compute("first_mistake", task, CHARS, g)["first_mistake_B"]
    np.testing.assert_array_equal(out, [-1, len("7 más 5 es 12\n")])
    cd = countdown.Countdown()
    g = _groups(CHARS, cd, [cd.problem(0)], ["Answer: 1"], [0])
    with pytest.raises(ValueError, match="step verifier.*countdown"):
        _compute("first_mistake", cd, CHARS, g)


@pytest.mark.parametrize("tok", [CHARS, default_tokenizer()], ids=["char", "sentencepiece"])
def test_token_offsets_equal_prefix_offsets(tok):
    texts = [GOOD1, "Hello\n 7 +  5 = 12 \\boxed{84}", "Respuesta: más", ""]
    stripped = lambda ids: tok.decode(ids).lstrip()  # noqa: E731  (not concatenative)
    for text in texts:
        ids = tok.encode(text)
        for decode in (tok.decode, stripped):
            assert ts.token_offsets(decode, ids) == cliff.prefix_offsets(decode, ids)
    assert ts.token_offsets(CHARS.decode, CHARS.encode("ab c")) == [(0, 1), (1, 2), (2, 3), (3, 4)]


# -------------------------------------------------------------------------- cues
def test_cue_ids_follow_the_order_of_operations():
    task = arithmetic.ArithmeticTask()
    p = _problem("(7 + 5) * (3 + 4)")  # operators: + (0), * (1), + (2)
    left = "7 + 5 = 12\n3 + 4 = 7\n12 * 7 = 84\nAnswer: 84"
    right = "3 + 4 = 7\n7 + 5 = 12\n12 * 7 = 84\nAnswer: 84"
    g = _groups(CHARS, task, [p, p], [left, right, left, "hi", right, left], [0, 0, 0, 0, 1, 1])
    assert [task.response_cue(p, t) for t in (left, right)] == ["0,2,1", "2,0,1"]
    np.testing.assert_array_equal(_compute("cue", task, CHARS, g)["cue_B"], [0, 1, 0, -1, 1, 0])


def test_cue_countdown_entrance_family_and_unsupported_task():
    cd = countdown.Countdown()
    p = cd.problem(0)
    rs = ["20 + 15 = 35\n35 + 5 = 40\n40 - 13 = 27", "15 + 20 = 35", "20 + 7 = 27", "no steps"]
    g = _groups(CHARS, cd, [p], rs, [0] * 4)
    np.testing.assert_array_equal(_compute("cue", cd, CHARS, g)["cue_B"], [0, 1, 0, -1])
    ctx = dataclasses.replace(_context(), task=tasks.get("knights_knaves"))
    with pytest.raises(ValueError, match="knights_knaves.*valid tasks: arithmetic"):
        signals.SIGNALS.get("cue").fn(ctx, g, {})


# ----------------------------------------------------------------------- answers
@pytest.mark.parametrize("tok", [CHARS, default_tokenizer()], ids=["char", "sentencepiece"])
def test_answer_ids_and_spans_decode_to_the_answer(tok):
    task = arithmetic.ArithmeticTask()
    p = _problem("(7 + 5) * (3 + 4)")
    rs = [
        "12 * 7 = 84\nAnswer: 84",
        "so \\boxed{ 084 } done",  # same integer, boxed
        "Answer: 85\nthanks",
        "nothing here",
        "Answer: eighty four",  # unparsable: no id, span kept
        "Answer: 84",  # group 1: id shared with row 0 (only compared within a group anyway)
    ]
    g = _groups(tok, task, [p, p], rs, [0, 0, 0, 0, 0, 1])
    out = _compute("answers", task, tok, g)
    np.testing.assert_array_equal(out["answer_id_B"], [0, 0, 1, -1, -1, 0])
    assert out["answer_start_B"][3] == out["answer_end_B"][3] == -1
    for i, text in enumerate(rs):
        if i == 3:
            continue
        s, e = int(out["answer_start_B"][i]), int(out["answer_end_B"][i])
        ids = tok.encode(text)
        assert 0 <= s < e <= len(ids)
        assert tok.decode(ids[s:e]).strip() == extract_answer(text)
        if tok is CHARS:  # one token per character: the span is exact
            want = extract_answer(text)
            assert (s, e) == (text.rindex(want), text.rindex(want) + len(want))
    # The span is what OM-GRPO's mask removes: [start, end) of the response tokens.
    m = om_grpo.answer_span_mask(g.response_mask, out["answer_start_B"], out["answer_end_B"])
    removed = g.response_mask & ~np.asarray(m)
    assert tok.decode(g.tokens[0][removed[0]].tolist()).strip() == "84"
    assert tok.decode(g.tokens[2][removed[2]].tolist()).strip() == "85"
    assert not removed[3].any()


def test_answer_canonical_forms_countdown_and_multilingual():
    cd = countdown.Countdown()
    p = cd.problem(0)
    rs = ["Answer: 20+15+5-13", "Answer: 15 + 20 - 13 + 5", "Answer: 20*15", "Answer: 20/(5-5)"]
    g = _groups(CHARS, cd, [p], rs, [0] * 4)
    np.testing.assert_array_equal(_compute("answers", cd, CHARS, g)["answer_id_B"], [0, 0, 1, -1])
    task = multilingual.MultilingualArithmetic(language="es")
    rs = ["Respuesta: 32", "bien\nrespuesta:  32 \n", "Answer: 32", "Respuesta: 31"]
    g = _groups(CHARS, task, [_problem(P1, "es")], rs, [0] * 4)
    out = _compute("answers", task, CHARS, g)
    np.testing.assert_array_equal(out["answer_id_B"], [0, 0, -1, 1])
    np.testing.assert_array_equal(out["answer_start_B"], [11, 17, -1, 11])
    np.testing.assert_array_equal(out["answer_end_B"], [13, 19, -1, 13])


TRICKY = [
    "Answer: 5",
    "answer = 7 \n more",
    "Answer: 1\nAnswer: 2",
    "\\boxed{3} then Answer: 4",
    "Answer: 4 then \\boxed{\\frac{1}{2}}",
    "\\boxed{unbalanced Answer: 9",
    "\\boxed{ }",
    "Answer:   ",
    "x" * 9000 + "Answer: 12",
    "Answer: 3" + "y" * 9000,
    "ANSWER:\t-3.",
    "no answer",
    "",
]


@pytest.mark.parametrize("text", TRICKY)
def test_answer_span_matches_the_extractors(text):
    want = extract_answer(text)
    span = ts.answer_span(text)
    assert (text[span[0] : span[1]] if span else None) == (want or None)
    loc = text.replace("Answer", "Respuesta").replace("ANSWER", "RESPUESTA").replace("=", ":")
    want = multilingual.extract_localized_answer(loc, "es")
    span = ts.localized_answer_span(loc, "es")
    assert (loc[span[0] : span[1]] if span else None) == want


def test_canonical_text_merges_numbers_only():
    assert ts.canonical_text(" 0.50 ") == ts.canonical_text("1/2") == "1/2"
    assert ts.canonical_text("3.") == "3"
    assert ts.canonical_text("Ann = knight,  Bob") == "Ann = knight, Bob"


# ------------------------------------------------------------------ pair compare
def test_pair_compare_consensus_and_verifier_judges():
    answer = np.array([3, 3, 1, -1, 2, 2, 2, 5], np.int32)
    group = np.repeat(np.arange(2), 4).astype(np.int32)
    valid = np.array([1, 1, 1, 1, 1, 1, 1, 0], bool)
    np.testing.assert_allclose(
        ts.consensus_shares(answer, group, valid), [0.5, 0.5, 0.25, 0, 1, 1, 1, 0]
    )
    wins, compared = ts.pairwise_wins(
        ts.consensus_shares(answer, group, valid), answer, group, valid
    )
    want_c = np.zeros((8, 8), bool)
    for i, j in itertools.permutations(range(4), 2):
        want_c[i, j] = answer[i] != answer[j]
    np.testing.assert_array_equal(compared, want_c)  # group 1: one answer, nothing compared
    want_w = np.zeros((8, 8), np.float32)
    want_w[0, 2] = want_w[0, 3] = want_w[1, 2] = want_w[1, 3] = want_w[2, 3] = 1.0
    np.testing.assert_array_equal(wins, want_w)
    r, win = om_grpo.contrast_augmented_rewards(np.zeros(8), wins, compared, group, lam=1.0)
    np.testing.assert_allclose(win, [1, 1, 1 / 3, 0, 0, 0, 0, 0], rtol=1e-6)

    rewards = np.array([0, 1, 1, 0, 1, 0, 1, 1], np.float32)
    wins, compared = ts.pairwise_wins(rewards, answer, group, valid)
    assert wins[2, 0] == 1 and wins[0, 2] == 0 and wins[2, 1] == 0.5 and wins[0, 3] == 0.5

    task = arithmetic.ArithmeticTask()
    p = _problem(P1)
    g = _groups(CHARS, task, [p], ["Answer: 32", "Answer: 32", "Answer: 1", ""], [0] * 4)
    for judge in ts.JUDGES:
        out = _compute("answers,pair_compare", task, CHARS, g, pair_compare__judge=judge)
        np.testing.assert_array_equal(out["answer_id_B"], [0, 0, 1, -1])
        assert out["pair_wins_BxB"][0, 2] == 1.0 and out["pair_wins_BxB"][2, 0] == 0.0
        assert out["pair_wins_BxB"][2, 3] == (1.0 if judge == "consensus" else 0.5)
        assert not out["pair_compared_BxB"][0, 1]
    with pytest.raises(ValueError, match="judge = 'llm'; valid: consensus, verifier"):
        _compute("answers,pair_compare", task, CHARS, g, pair_compare__judge="llm")


# ---------------------------------------------------------------------- branches
def _brute_layout(seqs, group, min_prefix):
    """Nodes from pairwise common prefixes; start = longest prefix shared with an earlier row."""
    nodes = set()
    for a, b in itertools.combinations(range(len(seqs)), 2):
        if group[a] != group[b] or not seqs[a] or not seqs[b] or seqs[a] == seqs[b]:
            continue
        p = next(
            (t for t, (x, y) in enumerate(zip(seqs[a], seqs[b], strict=False)) if x != y), None
        )
        p = min(len(seqs[a]), len(seqs[b])) if p is None else p
        if p >= min_prefix:
            members = frozenset(
                r for r in range(len(seqs)) if group[r] == group[a] and seqs[r][:p] == seqs[a][:p]
                and len(seqs[r]) >= p
            )  # fmt: skip
            nodes.add((p, members))
    start = [
        max([ts._common_prefix(seqs[q], seqs[r]) for q in range(r) if group[q] == group[r]
             and seqs[q] and seqs[r]] or [0])
        for r in range(len(seqs))
    ]  # fmt: skip
    return nodes, start


def _as_set(member, pos):
    return {
        (int(p), frozenset(np.flatnonzero(m).tolist()))
        for m, p in zip(member, pos, strict=True)
        if p >= 0
    }


def test_branch_layout_on_a_constructed_batch():
    seqs = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [7], [1, 2], [1, 2, 3], [1, 2]]
    group = [0, 0, 0, 0, 1, 1, 1]
    member, pos, start = ts.branch_layout(seqs, group, max_nodes=4)
    np.testing.assert_array_equal(pos, [2, 3, 2, -1])
    np.testing.assert_array_equal(
        member.astype(int),
        [[1, 1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1], [0] * 7],
    )
    np.testing.assert_array_equal(start, [0, 3, 2, 0, 0, 2, 2])
    member, pos, _ = ts.branch_layout(seqs, group, max_nodes=2)  # keeps the 3-member nodes
    assert _as_set(member, pos) == {(2, frozenset({0, 1, 2})), (2, frozenset({4, 5, 6}))}
    _, _, start = ts.branch_layout(seqs, group, max_nodes=2, dedupe_prefix=False)
    assert not start.any()
    member, pos, _ = ts.branch_layout(seqs, group, max_nodes=4, min_prefix=3)
    assert _as_set(member, pos) == {(3, frozenset({0, 1}))}


@pytest.mark.parametrize("seed", range(6))
def test_branch_layout_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(3), 5)
    seqs = [
        rng.integers(1, 3 + seed % 2, rng.integers(0 if seed else 1, 7)).tolist() for _ in group
    ]
    for min_prefix in (1, 2):
        member, pos, start = ts.branch_layout(
            seqs, group, max_nodes=len(seqs), min_prefix=min_prefix
        )
        nodes, want_start = _brute_layout(seqs, group, min_prefix)
        assert _as_set(member, pos) == nodes
        assert len(nodes) <= len(seqs) - 3
        np.testing.assert_array_equal(start, want_start)
        # Every distinct (group, prefix) is credited by exactly one row.
        owners = {}
        for r, s in enumerate(seqs):
            for t in range(len(s)):
                key = (group[r], tuple(s[: t + 1]))
                owners[key] = owners.get(key, 0) + (t >= start[r])
        assert set(owners.values()) == {1} or not owners


def test_branches_signal_reads_the_masked_response_tokens():
    tok = CHARS
    task = arithmetic.ArithmeticTask()
    p = _problem(P1)
    rs = ["12 + 1", "12 - 1", "13", "12 + 1"]  # eos ends every row; rows 0 and 3 identical
    g = _groups(tok, task, [p], rs, [0] * 4)
    out = _compute("branches", task, tok, g)
    assert out["branch_member_KxB"].shape == (4, 4)  # max_nodes = 0: K = B
    assert _as_set(out["branch_member_KxB"], out["branch_pos_K"]) == {
        (1, frozenset({0, 1, 2, 3})),  # "1" then "2" / "3"
        (3, frozenset({0, 1, 3})),  # "12 " then "+" / "-"
    }
    np.testing.assert_array_equal(out["branch_start_B"], [0, 3, 1, 7])  # row 3: all copies


@pytest.mark.slow  # compiles the CBPO kernel (~10 s on a busy 2-core CPU)
def test_branch_layout_drives_the_cbpo_kernel():
    seqs = [[5, 6, 7, 2], [5, 6, 8, 2], [9, 2], [5, 6, 7, 2]]
    member, pos, start = ts.branch_layout(seqs, [0] * 4, max_nodes=4)
    mask = np.ones((4, 4), bool)
    mask[2, 2:] = False
    adv = np.where(mask, np.array([1.0, -1.0, -1.0, 1.0])[:, None], 0.0)
    got, _ = cbpo.cbpo_advantages(
        adv, mask, np.array([1.0, 0, 0, 1]), member, pos, start, valid_K=pos >= 0
    )
    got = np.asarray(got)
    assert (got[3] == 0).all()  # a duplicate of row 0: every token credited there
    assert (got[1, :2] == 0).all() and (got[1, 2:] < 0).all()  # shared "5 6" is row 0's
    assert (got[0] > 0).all() and (got[2, :2] < 0).all()


# -------------------------------------------------------------------- end to end
@pytest.mark.slow  # a 2-step run of the tiny random model (~30 s on this CPU)
def test_cliff_with_first_mistake_has_a_pulse(tmp_path, monkeypatch):
    from rlvr_jax.rl import trainer as trainer_lib
    from rlvr_jax.rollout import score
    from rlvr_jax.testing import parity_score_rows
    from rlvr_jax.tokenizers import cut_at_stop

    c = config.apply_variant(config.default_config(), "pulse")  # arithmetic, random model
    c.credit.transforms = "cliff"
    c.score.signals = "first_mistake"
    c.eval.at_start = False
    seen = []
    original_compute, original_credit = signals.compute, trainer_lib.Trainer.credit

    def compute(ctx, groups, batch, names, options):
        out = original_compute(ctx, groups, batch, names, options)
        seen.append([ctx.tokenizer, groups, out["first_mistake_B"]])
        return out

    def credit_fn(self, batch, step, num_groups):
        b = original_credit(self, batch, step, num_groups)
        seen[-1].append(b)
        return b

    # Parity rewards: mixed groups from a random model.
    monkeypatch.setattr(score, "score_rows", parity_score_rows)
    monkeypatch.setattr(signals, "compute", compute)
    monkeypatch.setattr(trainer_lib.Trainer, "credit", credit_fn)
    result = trainer_lib.train(c, tmp_path)
    assert 0 <= result["pass@1"] <= 1 and len(seen) == 2
    located = 0
    for tok, g, k_B, b in seen:
        for r in range(len(g.tokens)):
            ids = cut_at_stop(g.tokens[r][g.response_mask[r]].tolist(), tok.stop_ids)
            if g.correct[r]:
                assert k_B[r] == -1
                continue
            text = tok.decode(ids)
            span = arithmetic.first_wrong_step(g.problems[g.group[r]], text).char_span
            k = int(k_B[r])
            # k is the token whose text holds the span's first character (or the stop token).
            assert 0 <= k <= len(ids)
            assert len(tok.decode(ids[:k])) <= span[0]
            assert k == len(ids) or len(tok.decode(ids[: k + 1])) > span[0]
            pos = np.cumsum(b["mask_BxT"][r]) - 1
            a = b["adv_BxT"][r][b["mask_BxT"][r]]
            k_eff = min(k, len(a) - 1)
            assert (a[pos[b["mask_BxT"][r]] < k_eff] >= 0).all() and (a[k_eff:] <= 0).all()
            located += int(np.abs(a).sum() > 0)
        assert np.isfinite(b["adv_BxT"]).all()
    assert located > 0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert sum('"split": "train"' in x for x in lines) == 2
