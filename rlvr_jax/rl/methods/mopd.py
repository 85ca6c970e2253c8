"""MOPD: multi-teacher on-policy distillation, each prompt routed to its domain's teacher.

Consolidating RLVR across domains (Fusion) distils domain experts into one
student on-policy: the student samples on the pooled prompts, and every
response is scored by the expert of its prompt's domain. This signal provides
that ℓ^T:

  mopd    teacher_logps_BxT    log-probs of the sampled tokens under the teacher
                               of each row's domain (0 outside mask_BxT)

so every OPD-family transform (plain OPD: opdvr with gate "none"; opd_additive;
...) trains on it unchanged. A row's domain is its problem's
`metadata[domain_key]` (the mixture task sets "domain"). Teachers are loaded
once per run and may differ in size; each must share the policy's tokenizer.
Only the routed teacher runs on a row: the rows of a domain are scored together
in chunks by that domain's teacher alone. Multi-process: each process routes its
own rows; a teacher runs on every process when any routes rows to it, each with
its own row count padded to the largest (`signals.Scorer.logps`).

Paper-fixed (abstract): routing by domain to the domain's expert teacher.
Ours: the per-token reward is sampled-token OPD's ℓ^T − ℓ^S (set by the credit
transform the config picks), teachers = any warm-start / pretrained models.
"""

from __future__ import annotations

import json

import numpy as np

from rlvr_jax import distributed
from rlvr_jax.core import opsa
from rlvr_jax.rl import signals
from rlvr_jax.rl.methods.model_signals import load_teacher, teacher_diagnostics

_TEACHER_FIELDS = ("source", "domain", "role", "path")


def parse_teachers(teachers: str) -> dict[str, dict[str, str]]:
    """{domain: {source, domain, role, path}} of the `teachers` option (a JSON object).

    Each value names a teacher like the `teacher` signal's options: source
    "warm_start" (domain default: the routed domain, role default "teacher") or
    "pretrained" (path).
    """
    try:
        spec = json.loads(teachers) if teachers else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"config.score.mopd.teachers is not JSON: {e}") from None
    if not isinstance(spec, dict) or not spec:
        raise ValueError(
            "config.score.mopd.teachers must be a JSON object {domain: {source, domain, role, "
            f"path}}, got {teachers!r}"
        )
    out = {}
    for domain, t in spec.items():
        if not isinstance(t, dict) or set(t) - set(_TEACHER_FIELDS):
            raise ValueError(
                f"config.score.mopd.teachers[{domain!r}] = {t!r}; fields: {_TEACHER_FIELDS}"
            )
        source = t.get("source", "pretrained" if t.get("path") else "warm_start")
        out[domain] = dict(
            source=source,
            domain=t.get("domain", domain if source == "warm_start" else ""),
            role=t.get("role", "teacher"),
            path=t.get("path", ""),
        )
    return out


def row_domains(groups, domain_key: str) -> np.ndarray:
    """[R] the domain of each row's problem."""
    doms = []
    for g in groups.group:
        meta = groups.problems[int(g)].metadata
        if domain_key not in meta:
            raise ValueError(
                f"config.score.mopd: problem {groups.problems[int(g)].id} has no "
                f"metadata[{domain_key!r}]; MOPD routes by domain (use the 'mixture' task)"
            )
        doms.append(str(meta[domain_key]))
    return np.array(doms)


@signals.register(
    "mopd",
    provides=("teacher_logps_BxT",),
    teachers="",
    domain_key="domain",
    diagnostics=True,
)
def mopd(ctx, groups, batch, *, teachers, domain_key, diagnostics):
    """ℓ^T of every row under its domain's teacher (only that teacher runs on it).

    Options:
      teachers: JSON object {domain: {"source", "domain", "role", "path"}}.
      domain_key: the problem metadata key naming a row's domain.
      diagnostics: log `teacher_diagnostics` of the routed ℓ^T as "mopd/*", and
        OPSA's noise fractions per domain as "mopd/<domain>/noise_frac*" (each
        expert's own noise on its rows).
    """
    spec = parse_teachers(teachers)
    domains = row_domains(groups, domain_key)
    valid = np.asarray(batch["valid_B"], bool)
    missing = sorted(str(d) for d in set(domains[valid]) - set(spec))
    if missing:
        raise ValueError(
            f"config.score.mopd.teachers has no teacher for domain(s) {missing}; "
            f"it has {sorted(spec)}"
        )
    tokens, attn = batch["tokens_BxT"], batch["attention_mask_BxT"]
    out = np.zeros(tokens.shape, np.float32)
    # A teacher's scorer is a collective: it runs on every process that any process routes
    # rows to, each with its own row count (0 included; `Scorer.logps` pads to one shape).
    names = sorted(spec)
    counts = np.array([np.sum(valid & (domains == d)) for d in names], np.int64)
    for domain, total in zip(names, distributed.sum_over_processes(counts), strict=True):
        if total:
            rows = np.flatnonzero(valid & (domains == domain))
            out[rows] = load_teacher(ctx, **spec[domain]).logps(tokens[rows], attn[rows])
    out = np.where(batch["mask_BxT"], out, 0.0).astype(np.float32)
    if diagnostics:
        teacher_diagnostics(ctx, groups, batch, out, prefix="mopd")
        correct, m = np.asarray(batch["correct_B"], bool), np.asarray(batch["mask_BxT"], bool)
        for domain in sorted(set(domains[valid])):
            rows = valid & (domains == domain)
            stats = opsa.teacher_noise_stats(
                out, batch["old_logps_BxT"], correct, m & rows[:, None]
            )
            ctx.metrics.update({f"mopd/{domain}/{k}": float(v) for k, v in stats.items()})
    return {"teacher_logps_BxT": out}
