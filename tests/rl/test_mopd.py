"""MOPD's signal: each row is scored by exactly its domain's teacher, teachers of any size."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rlvr_jax import tasks
from rlvr_jax.models import init_model, load_pretrained, save_pretrained
from rlvr_jax.rl.methods import model_signals, mopd
from rlvr_jax.testing import tiny_config
from rlvr_jax.train import warmstart

from .test_model_signals import _context, _groups, _scored

DOMAINS = ("arithmetic", "knights_knaves")


def _teacher(path, tokenizer, **size):
    cfg = tiny_config("qwen3", vocab_size=tokenizer.vocab_size, **size)
    save_pretrained(init_model(cfg, seed=len(size)), cfg, path)
    warmstart.save_tokenizer(tokenizer, path)
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("mopd")
    tokenizer = warmstart.default_tokenizer()
    task = tasks.get(
        "mixture", domains=DOMAINS, domain_options={d: warmstart.TASK_OPTIONS[d] for d in DOMAINS}
    )
    ctx = _context(tokenizer, task, chunk=3)
    g = _groups(tokenizer, task, np.random.default_rng(1), prompts=6, g=2)
    assert {task.domain_of(p) for p in g.problems} == set(DOMAINS)
    mask = g.response_mask & g.valid[:, None]
    b = dict(
        tokens_BxT=g.tokens, attention_mask_BxT=g.attention_mask, mask_BxT=mask, valid_B=g.valid
    )
    # Two teachers of different sizes (the student is tiny_config's default size).
    paths = {
        "arithmetic": _teacher(root / "t_arith", tokenizer, hidden_size=32, num_layers=1),
        "knights_knaves": _teacher(root / "t_kk", tokenizer, intermediate_size=256, num_layers=3),
    }
    teachers = json.dumps({d: {"path": p} for d, p in paths.items()})
    return ctx, g, b, paths, teachers


def test_each_row_is_scored_by_its_domains_teacher_only(setup, monkeypatch):
    ctx, g, b, paths, teachers = setup
    seen = {d: [] for d in DOMAINS}
    original = model_signals.load_teacher

    def counting_load_teacher(ctx_, **spec):
        scorer = original(ctx_, **spec)
        domain = next(d for d, p in paths.items() if p == spec["path"])

        def fn(params_, rest_, tokens, attn):
            seen[domain].extend(tuple(row) for row in np.asarray(tokens))
            return scorer.fn(params_, rest_, tokens, attn)

        return dataclasses.replace(scorer, fn=fn)

    monkeypatch.setattr(mopd, "load_teacher", counting_load_teacher)
    out = mopd.mopd(ctx, g, b, teachers=teachers, domain_key="domain", diagnostics=False)[
        "teacher_logps_BxT"
    ]

    domains = mopd.row_domains(g, "domain")
    want = np.zeros_like(out)
    for d, path in paths.items():
        rows = np.flatnonzero((domains == d) & g.valid)
        # Only this domain's valid rows went to this teacher (chunk filler repeats one of them).
        assert {tuple(r) for r in g.tokens[rows]} == set(seen[d])
        model, _ = load_pretrained(path)
        want[rows] = _scored(model, g.tokens[rows], g.attention_mask[rows])
    want = np.where(b["mask_BxT"], want, 0.0)
    np.testing.assert_allclose(out, want, atol=2e-5)
    # The two teachers really differ, so a swapped route would fail the comparison.
    a = mopd.mopd(
        ctx,
        g,
        b,
        teachers=json.dumps({d: {"path": paths["arithmetic"]} for d in DOMAINS}),
        domain_key="domain",
        diagnostics=False,
    )["teacher_logps_BxT"]
    kk = (domains == "knights_knaves") & g.valid
    assert np.abs(a[kk] - out[kk]).max() > 1e-2
    assert out[~g.valid].sum() == 0


def test_missing_teacher_or_domain_is_named(setup):
    ctx, g, b, paths, _ = setup
    one = json.dumps({"arithmetic": {"path": paths["arithmetic"]}})
    with pytest.raises(ValueError, match=r"no teacher for domain\(s\) \['knights_knaves'\]"):
        mopd.mopd(ctx, g, b, teachers=one, domain_key="domain", diagnostics=False)
    with pytest.raises(ValueError, match="has no metadata\\['lang'\\]"):
        mopd.mopd(ctx, g, b, teachers=one, domain_key="lang", diagnostics=False)
    with pytest.raises(ValueError, match="must be a JSON object"):
        mopd.parse_teachers("[]")
    spec = mopd.parse_teachers('{"countdown": {}}')
    want = dict(source="warm_start", domain="countdown", role="teacher", path="")
    assert spec["countdown"] == want


def test_noise_statistics_are_logged_overall_and_per_domain(setup):
    """Per-domain noise fractions are each expert's own; token-weighted they give the overall."""
    ctx, g, b, paths, teachers = setup
    ctx = dataclasses.replace(ctx, metrics={})
    rng = np.random.default_rng(0)
    b = dict(
        b,
        old_logps_BxT=np.where(b["mask_BxT"], -rng.uniform(0.1, 4.0, g.tokens.shape), 0.0),
        correct_B=rng.random(len(g.tokens)) < 0.5,
    )
    out = mopd.mopd(ctx, g, b, teachers=teachers, domain_key="domain", diagnostics=True)
    t = out["teacher_logps_BxT"]
    domains = mopd.row_domains(g, "domain")
    m = np.asarray(b["mask_BxT"], bool)
    total, noisy_tokens = 0, 0.0
    for d in DOMAINS:
        rows = (domains == d) & g.valid
        n = int(m[rows].sum())
        frac = ctx.metrics[f"mopd/{d}/noise_frac"]
        # Recomputed on the domain's rows alone: the statistic is that expert's, not the mix's.
        sub = model_signals.opsa.teacher_noise_stats(
            t[rows], b["old_logps_BxT"][rows], b["correct_B"][rows], m[rows]
        )
        assert frac == pytest.approx(float(sub["noise_frac"]), abs=1e-6)
        total, noisy_tokens = total + n, noisy_tokens + frac * n
    assert 0.0 < ctx.metrics["mopd/noise_frac"] < 1.0
    assert ctx.metrics["mopd/noise_frac"] == pytest.approx(noisy_tokens / total, abs=1e-6)
    assert {"mopd/r_mean_correct", "mopd/r_mean_wrong"} <= set(ctx.metrics)
