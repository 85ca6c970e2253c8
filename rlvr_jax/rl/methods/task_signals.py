"""Score-stage signals read off the decoded responses and the task (no model forward).

  signal         fields                                         consumer
  first_mistake  first_mistake_B                                cliff (core.cliff); its
                                                                locators are in `locators`
  cue            cue_B                                          cue_grpo (core.cue)
  answers        answer_id_B, answer_start_B, answer_end_B      om_grpo, answer_mask
  majority_vote  rewards_B (replaces the verifier's)            TTRL baseline (grpo)
  pair_compare   pair_wins_BxB, pair_compared_BxB               om_grpo_contrast
  branches       branch_member_KxB, branch_pos_K, branch_start_B,  cbpo (core.cbpo)
                 branch_offset_B, branch_shared_BxB

A row's text is the verifier's: the decoded response tokens before the first
stop id (`rollout.score.score_rows`). Token indices count the row's response
tokens from 0 (`core.cliff`'s convention): token i of the text is response
token i, and the stop token (when sampled) is response token len(text tokens).
Character spans map to tokens through per-token character offsets
(`token_offsets`, = `core.cliff.prefix_offsets`). Invalid rows get −1 / no
membership. Ids (cues, answers) are numbered per batch in order of first
appearance; the kernels only compare them within a group. Every signal has the
`rl.signals` signature fn(ctx, groups, batch, **options) -> {field: array}.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from rlvr_jax.core import om_grpo
from rlvr_jax.core.cliff import first_mistake_index, prefix_offsets
from rlvr_jax.rl import signals
from rlvr_jax.tasks import arithmetic, countdown, multilingual
from rlvr_jax.tasks.base import MAX_RESPONSE_CHARS, Problem
from rlvr_jax.tokenizers import cut_at_stop

JUDGES = ("consensus", "verifier")
_CACHE_KEY = "task_signals.rows"


@dataclasses.dataclass
class _Row:
    """One valid row: its problem, response ids before the stop id, and the decoded text."""

    problem: Problem
    ids: list[int]
    text: str
    decode: Callable[[list[int]], str]
    pieces: dict[int, str]  # single-token decodes, shared by the rows of a step

    @functools.cached_property
    def offsets(self) -> list[tuple[int, int]]:
        return token_offsets(self.decode, self.ids, self.text, self.pieces)


def token_offsets(decode, ids, text=None, pieces=None) -> list[tuple[int, int]]:
    """`core.cliff.prefix_offsets`, in O(n) decodes when the tokenizer concatenates.

    When the single-token decodes join to the full text (character and most
    subword tokenizers) they give the offsets; otherwise (a stripped leading
    space, bytes split across tokens) the exact O(n²) prefix decodes do.

    Args:
      decode: ids -> text; ids: the response ids; text: decode(ids) if known.
      pieces: optional dict id -> decode([id]) to reuse (filled here).
    Returns:
      [(start, end)] per token.
    """
    pieces = {} if pieces is None else pieces
    own = [pieces[i] if i in pieces else pieces.setdefault(i, decode([i])) for i in ids]
    if "".join(own) != (decode(list(ids)) if text is None else text):
        return prefix_offsets(decode, ids)
    ends = np.cumsum([len(p) for p in own], dtype=int).tolist()
    return list(zip([0, *ends], ends, strict=False))


def step_rows(ctx, groups) -> list[_Row | None]:
    """The step's decoded rows (None for invalid ones), shared by the signals of one step."""
    cached = ctx.step_cache.get(_CACHE_KEY)
    if cached is not None and cached[0] is groups:
        return cached[1]
    rows = decode_rows(
        ctx.tokenizer,
        [groups.problems[int(g)] for g in groups.group],
        groups.tokens,
        groups.response_mask,
        groups.valid,
    )
    ctx.step_cache[_CACHE_KEY] = (groups, rows)
    return rows


def decode_rows(tokenizer, problems_R, tokens_RxL, response_mask_RxL, valid_R) -> list[_Row | None]:
    """Each valid row's problem, response ids cut at the first stop id, and decoded text.

    Args:
      tokenizer: decodes and gives the stop ids.
      problems_R: the problem of each row.
      tokens_RxL, response_mask_RxL: the rows and their sampled-response columns.
      valid_R: rows to decode (the others are None).
    """
    rows: list[_Row | None] = []
    pieces: dict[int, str] = {}
    for r, problem in enumerate(problems_R):
        if not valid_R[r]:
            rows.append(None)
            continue
        ids = cut_at_stop(tokens_RxL[r][response_mask_RxL[r]].tolist(), tokenizer.stop_ids)
        rows.append(_Row(problem, ids, tokenizer.decode(ids), tokenizer.decode, pieces))
    return rows


def step_locator(task) -> Callable | None:
    """The task's exact first-wrong-step locator `(problem, text) -> StepCheck`, or None."""
    return getattr(task, "first_wrong_step", None)  # the step-verifier interface


def first_mistake_indices(locate, rows, wrong_R) -> np.ndarray:
    """[R] int32 first mistaken response-token index of each wrong row (−1 elsewhere).

    Args:
      locate: `(problem, text) -> StepCheck` (`step_locator`).
      rows: `decode_rows`' rows (None = invalid).
      wrong_R: bool, the rows to locate (wrong verdicts).
    """
    out = np.full(len(rows), -1, np.int32)
    for i, row in enumerate(rows):
        if row is not None and wrong_R[i]:
            out[i] = first_mistake_index(locate(row.problem, row.text).char_span, row.offsets)
    return out


def intern_ids(keys) -> np.ndarray:
    """Hashable keys (None = missing) -> int32 ids, equal keys equal ids, −1 for None."""
    table: dict = {}
    return np.array([-1 if k is None else table.setdefault(k, len(table)) for k in keys], np.int32)


# ------------------------------------------------------------------ first mistake
# -------------------------------------------------------------------------- cue
def _cue_reader(task):
    if isinstance(task, countdown.Countdown):
        # The entrance family (first operand, operator) of the response's first step.
        return lambda problem, text: " ".join(countdown.trace_family(text) or ()) or None
    if isinstance(task, arithmetic.ArithmeticTask | multilingual.MultilingualArithmetic):
        return task.response_cue  # order of operations, e.g. "1,0,2"
    raise ValueError(
        f"config.score.signals: 'cue' has no strategy cue for task {task.name!r}; "
        "valid tasks: arithmetic, multilingual_arithmetic, countdown"
    )


@signals.register("cue", provides=("cue_B",))
def cue(ctx, groups, batch):
    """Strategy cue cluster ids: arithmetic's order of operations, countdown's entrance family.

    cue_B[i] = id of the row's cue string (`task.response_cue` or
    `countdown.trace_family`), −1 without a readable cue or for invalid rows.
    """
    read = _cue_reader(ctx.task)
    rows = step_rows(ctx, groups)
    return {"cue_B": intern_ids(None if r is None else read(r.problem, r.text) for r in rows)}


# ---------------------------------------------------------------------- answers
_ANSWER_RE = re.compile(r"answer\s*[:=]\s*([^\n]{0,200})", re.IGNORECASE)  # as tasks.base
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]{1,40}(?:\.[0-9]{1,40})?|[0-9]{1,40}/[0-9]{1,40})")


def _stripped(text: str, start: int, end: int) -> tuple[int, int] | None:
    raw = text[start:end]
    lead, n = len(raw) - len(raw.lstrip()), len(raw.strip())
    return (start + lead, start + lead + n) if n else None


def answer_span(text: str) -> tuple[int, int] | None:
    """Character span of `tasks.base.extract_answer(text)` in `text` (None: no answer).

    The last balanced `\\boxed{...}` content, else the rest of the last "Answer:"
    line, stripped, within the last MAX_RESPONSE_CHARS characters. An empty
    answer counts as none.
    """
    off = max(0, len(text) - MAX_RESPONSE_CHARS)
    tail = text[off:]
    start = tail.rfind("\\boxed{")
    if start >= 0:
        depth, i = 0, start + len("\\boxed")
        for j in range(i, len(tail)):
            depth += {"{": 1, "}": -1}.get(tail[j], 0)
            if depth == 0:
                return _stripped(text, off + i + 1, off + j)
    m = list(_ANSWER_RE.finditer(tail))
    return _stripped(text, off + m[-1].start(1), off + m[-1].end(1)) if m else None


def localized_answer_span(text: str, language: str) -> tuple[int, int] | None:
    """Span of `multilingual.extract_localized_answer(text, language)` in `text`."""
    off = max(0, len(text) - MAX_RESPONSE_CHARS)
    marker = multilingual.trace_format(language, language).answer_marker
    m = list(marker.finditer(text[off:]))
    if not m:
        return None
    s = off + m[-1].end()
    e = text.find("\n", s)
    return _stripped(text, s, min(len(text) if e < 0 else e, s + 200))


def canonical_text(answer: str) -> str:
    """Default canonical answer: the exact rational value of a number, else collapsed spaces."""
    a = answer.strip().rstrip(".")
    if _NUMBER_RE.fullmatch(a):
        return str(Fraction(a))
    return " ".join(answer.split())


def _countdown_canonical(answer: str) -> str | None:
    if len(answer) > countdown.MAX_EXPR_CHARS:
        return None
    try:
        return countdown.canonical(answer)  # commutativity/associativity merged
    except ValueError:
        return None


def _answer_reader(task):
    """(text -> char span or None, answer text -> canonical key or None) of a task."""
    if isinstance(task, multilingual.MultilingualArithmetic):
        lang = task.answer_lang
        return (
            lambda t: localized_answer_span(t, lang),
            lambda a: multilingual.parse_number(a, lang),
        )
    if isinstance(task, arithmetic.ArithmeticTask):
        return answer_span, arithmetic.parse_integer
    if isinstance(task, countdown.Countdown):
        return answer_span, _countdown_canonical
    return answer_span, canonical_text


@signals.register("answers", provides=("answer_id_B", "answer_start_B", "answer_end_B"))
def answers(ctx, groups, batch):
    """Final answers: a canonical id per row and the answer's response-token span.

    The answer is the one the task's verifier reads (`extract_answer`, or the
    localized marker of multilingual_arithmetic). Canonical forms: the parsed
    integer (arithmetic tasks), `countdown.canonical` (countdown), else the
    rational value of a number or the whitespace-collapsed text. answer_id_B:
    −1 without an answer or when it does not parse. [answer_start_B,
    answer_end_B): tokens overlapping the answer text (`arithmetic.token_span`),
    −1/−1 without one (an unparsable answer keeps its span).
    """
    find, canon = _answer_reader(ctx.task)
    rows = step_rows(ctx, groups)
    keys, start, end = [], np.full(len(rows), -1, np.int32), np.full(len(rows), -1, np.int32)
    for i, row in enumerate(rows):
        span = None if row is None else find(row.text)
        keys.append(None if span is None else canon(row.text[span[0] : span[1]]))
        if span is not None:
            start[i], end[i] = arithmetic.token_span(span, row.offsets)
    return {"answer_id_B": intern_ids(keys), "answer_start_B": start, "answer_end_B": end}


# ---------------------------------------------------------------- majority vote
# Label-free: the vote replaces the verifier's reward (TTRL may train on test prompts).
@signals.register(
    "majority_vote", provides=("rewards_B",), requires=("answer_id_B",), label_free=True
)
def majority_vote(ctx, groups, batch):
    """TTRL's label-free reward, replacing the verifier's: 1 for the group's majority answer.

    rewards_B[i] = 1 when row i's canonical answer (`answers`) is the most common
    one of its group (`core.om_grpo.majority_vote_rewards`: ties to the first
    seen; rows without an answer 0). The verifier's verdicts stay in correct_B
    for reporting only. Logs "ttrl/label_accuracy" (share of groups with a
    majority whose majority answer the verifier accepts) and
    "ttrl/reward_accuracy" (share of valid rows whose reward equals the verdict).
    """
    valid = np.asarray(batch["valid_B"], bool)
    rewards, majority = om_grpo.majority_vote_rewards(
        batch["answer_id_B"], batch["group_B"], valid_B=valid
    )
    rewards, majority = np.asarray(rewards, np.float32), np.asarray(majority)
    correct = np.asarray(batch["correct_B"], bool)
    answer = np.asarray(batch["answer_id_B"])
    group = np.asarray(batch["group_B"])
    right, labelled = 0, 0
    for g in np.unique(group[valid]):
        rows = valid & (group == g)
        top = majority[rows][0]
        if top >= 0:
            labelled += 1
            right += bool((correct & rows & (answer == top)).any())
    ctx.metrics["ttrl/label_accuracy"] = right / max(labelled, 1)
    agree = ((rewards > 0) == correct)[valid]
    ctx.metrics["ttrl/reward_accuracy"] = float(agree.mean()) if agree.size else 0.0
    return {"rewards_B": rewards}


# ----------------------------------------------------------------- pair compare
def pairwise_wins(score_B, answer_B, group_B, valid_B):
    """Pairwise judgements within groups: the higher score wins, pairs of equal answers skipped.

    Args:
      score_B: [B] the judge's score of each row.
      answer_B: [B] int answer ids (−1 = none; two rows without an answer are equal).
      group_B: [B] int group ids.
      valid_B: [B] bool real rows.
    Returns:
      (wins_BxB, compared_BxB): float32 P(i beats j) ∈ {0, .5, 1} (.5 on equal
      scores, 0 off compared pairs) and bool pairs compared: same group, both
      valid, different answers.
    """
    s = np.asarray(score_B, np.float64)
    a, g, v = np.asarray(answer_B), np.asarray(group_B), np.asarray(valid_B, bool)
    compared = (g[:, None] == g[None, :]) & v[:, None] & v[None, :] & (a[:, None] != a[None, :])
    wins = np.where(s[:, None] > s[None, :], 1.0, np.where(s[:, None] == s[None, :], 0.5, 0.0))
    return np.where(compared, wins, 0.0).astype(np.float32), compared


def consensus_shares(answer_B, group_B, valid_B) -> np.ndarray:
    """n_{a_i} / n_g over the valid rows of i's group (0 without an answer or invalid); [B]."""
    a, g, v = np.asarray(answer_B), np.asarray(group_B), np.asarray(valid_B, bool)
    same = (g[:, None] == g[None, :]) & v[:, None] & v[None, :]
    share = (same & (a[:, None] == a[None, :])).sum(-1) / np.maximum(same.sum(-1), 1)
    return np.where(v & (a >= 0), share, 0.0)


@signals.register(
    "pair_compare",
    provides=("pair_wins_BxB", "pair_compared_BxB"),
    requires=("answer_id_B",),
    judge="consensus",
)
def pair_compare(ctx, groups, batch, *, judge):
    """Pairwise comparisons of a group's existing rollouts for OM-GRPO's contrast reward.

    Ours (the abstract fixes only "pairwise comparisons over existing
    trajectories"). Rollouts i, j of one group with different answers are
    compared; i beats j when its judge score is higher, ties are .5. Judges:
      "consensus" (default, label-free like OM-GRPO): the share of the group
        giving i's answer (`consensus_shares`; no answer scores 0);
      "verifier": the sequence reward `rewards_B` (uses labels: an ablation).
    """
    if judge not in JUDGES:
        raise ValueError(f"config.score.pair_compare.judge = {judge!r}; valid: {', '.join(JUDGES)}")
    a, g, v = batch["answer_id_B"], batch["group_B"], batch["valid_B"]
    score = consensus_shares(a, g, v) if judge == "consensus" else batch["rewards_B"]
    wins, compared = pairwise_wins(score, a, g, v)
    return {"pair_wins_BxB": wins, "pair_compared_BxB": compared}


# --------------------------------------------------------------------- branches
def branch_layout(seqs, group_B, *, max_nodes, min_prefix=1, dedupe_prefix=True):
    """CBPO branch nodes of independently sampled groups: the branching nodes of each trie.

    A node is a response-token prefix p (len(p) ≥ min_prefix) shared by ≥ 2 rows
    of a group that do not all continue alike (a different next token, or one
    row ends there). Its members are every row of the group starting with p;
    its position is len(p), the first token after the shared prefix.

    Args:
      seqs: B token sequences (the rows' response tokens; empty = not a member).
      group_B: [B] int group ids.
      max_nodes: K, the static number of node slots; when there are more nodes,
        those with the most members (then the shallowest) are kept.
      min_prefix: shortest shared prefix that makes a node (1: the prompt
        itself, the whole group, is not a node).
      dedupe_prefix: branch_start_B = the longest common prefix with any earlier
        row of the group, so each shared token is credited by one row only (the
        CBPO layout); False: 0 (every row trains all its tokens).
    Returns:
      (member_KxB bool, pos_K int32 (−1 = padding slot), start_B int32).
    """
    seqs = [list(map(int, s)) for s in seqs]
    group_B = np.asarray(group_B)
    b = len(seqs)
    nodes: list[tuple[int, list[int]]] = []

    def split(rows: list[int], depth: int) -> None:
        # rows share seqs[r][:depth]; walk down while they agree (None = the row ended).
        while True:
            nxt = [seqs[r][depth] if depth < len(seqs[r]) else None for r in rows]
            if len(set(nxt)) > 1:
                break
            if nxt[0] is None:
                return  # identical rows: no branching below
            depth += 1
        if depth >= min_prefix:
            nodes.append((depth, rows))
        children: dict[int, list[int]] = {}
        for r, t in zip(rows, nxt, strict=True):
            if t is not None:
                children.setdefault(t, []).append(r)
        for child in children.values():
            if len(child) > 1:
                split(child, depth + 1)

    for g in dict.fromkeys(group_B.tolist()):
        rows = [r for r in range(b) if group_B[r] == g and seqs[r]]
        if len(rows) > 1:
            split(rows, 0)
    keep = sorted(range(len(nodes)), key=lambda k: (-len(nodes[k][1]), nodes[k][0], k))
    keep = sorted(keep[:max_nodes])
    member = np.zeros((max_nodes, b), bool)
    pos = np.full(max_nodes, -1, np.int32)
    for slot, k in enumerate(keep):
        pos[slot] = nodes[k][0]
        member[slot, nodes[k][1]] = True
    start = np.zeros(b, np.int32)
    for r, q in itertools.combinations(range(b), 2) if dedupe_prefix else ():
        if group_B[q] == group_B[r] and seqs[q] and seqs[r]:  # r is the earlier row
            start[q] = max(start[q], _common_prefix(seqs[r], seqs[q]))
    return member, pos, start


def _common_prefix(x: list[int], y: list[int]) -> int:
    n = min(len(x), len(y))
    diff = np.flatnonzero(np.asarray(x[:n]) != np.asarray(y[:n]))
    return int(diff[0]) if diff.size else n


@signals.register(
    "branches",
    provides=(
        "branch_member_KxB",
        "branch_pos_K",
        "branch_start_B",
        "branch_offset_B",
        "branch_shared_BxB",
    ),
    max_nodes=0,
    min_prefix=1,
    dedupe_prefix=True,
)
def branches(ctx, groups, batch, *, max_nodes, min_prefix, dedupe_prefix):
    """CBPO's branch layout from the exact shared response prefixes within each group.

    Plain sampling gives no explicit branches; the nodes are those of each
    group's trie of response tokens (`branch_layout`, over the loss-masked
    tokens mask_BxT). max_nodes = 0 uses K = B, an upper bound on the nodes of
    any batch (a group of n rows has at most n − 1), so nothing is dropped. With
    dedupe_prefix, a shared prefix is held by the first row (in batch order) that
    has it and credited with the mean row advantage of every row that shares it
    (branch_shared_BxB = common prefix lengths within a group), so its credit
    does not depend on the row order; without, every row trains all its tokens
    with its own advantage (branch_shared_BxB = 0). Offsets are 0 (no copies).
    """
    tokens, mask = np.asarray(batch["tokens_BxT"]), np.asarray(batch["mask_BxT"], bool)
    seqs = [t[m] for t, m in zip(tokens, mask, strict=True)]
    k = int(max_nodes) or len(seqs)
    member, pos, start = branch_layout(
        seqs, batch["group_B"], max_nodes=k, min_prefix=min_prefix, dedupe_prefix=dedupe_prefix
    )
    shared = np.zeros((len(seqs), len(seqs)), np.int32)
    group_B = np.asarray(batch["group_B"])
    for r, q in itertools.combinations(range(len(seqs)), 2) if dedupe_prefix else ():
        if group_B[q] == group_B[r]:
            shared[r, q] = shared[q, r] = _common_prefix(seqs[r].tolist(), seqs[q].tolist())
    return {
        "branch_member_KxB": member,
        "branch_pos_K": pos,
        "branch_start_B": start,
        "branch_offset_B": np.zeros(len(seqs), np.int32),
        "branch_shared_BxB": shared,
    }
