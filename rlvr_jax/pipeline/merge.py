"""Model merging: combine specialists fine-tuned from one base into one HF checkpoint.

Fusion's "Merge" paradigm: specialists θ_1..θ_n trained from a common base θ_0
(e.g. one RL run per domain) are combined without further training. A merge
method is registered in `MERGES` and works on flat dicts {HF tensor name:
np.ndarray} (the names and layouts of `model.safetensors`; 2-D "*.weight"
entries are the weight matrices):

  @MERGES.register("my_method", alpha=0.5)
  def fn(base, specialists, lambdas, *, alpha) -> merged

`base` is θ_0, `specialists` a list of such dicts, `lambdas` one weight λ_d
per specialist; hparams are the method's registered defaults (they become the
merge stage's `config.<method>.*`). The result must have base's names, shapes
and dtypes; every output tensor must depend only on the same-named input
tensors (both methods here are), because `merge_checkpoints` merges one tensor
at a time: it reads that tensor of θ_0 and of each specialist from their
safetensors files (as float32, the dtype the merge always ran in), merges and
writes it, so host memory holds one tensor of each model at a time, never whole
models. For task arithmetic that is (n + 1) float32 inputs plus two float64
buffers (the sum and one term): 28 bytes per element with n = 2, peaking on the
largest tensor (Qwen3-8B's 151936 x 4096 embedding: ~17 GiB); ISO-Merger adds
its SVD's work on one matrix.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any

import ml_collections
import numpy as np
from flax import nnx

from rlvr_jax import distributed
from rlvr_jax.models import load_config
from rlvr_jax.models.checkpoint import WeightSource, hf_name, hf_specs, save_tensors
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.optim import HF_INCLUDE, iso_merge
from rlvr_jax.pipeline.stage_kind import StageContext
from rlvr_jax.registry import Registry
from rlvr_jax.train.warmstart import load_model_tokenizer, save_tokenizer

MERGES = Registry("merge method")


@MERGES.register("task_arithmetic")
def task_arithmetic(base, specialists, lambdas):
    """Task arithmetic: θ = θ_0 + Σ_d λ_d·(θ_d − θ_0) (Ilharco et al., 2023).

    Computed in float64 as Σ_d λ_d·θ_d + (1 − Σ_d λ_d)·θ_0 (the same value) with
    zero-weight terms left out, so a one-hot λ returns that specialist bitwise
    and λ = 0 returns the base bitwise.
    """
    weights = [(float(lam), spec) for lam, spec in zip(lambdas, specialists, strict=True)]
    weights.append((1.0 - float(sum(lambdas)), base))
    out = {}
    for name, b in base.items():
        total = np.zeros(b.shape)  # float64; in place: one term buffer besides the sum
        for i, (lam, t) in enumerate((lam, t) for lam, t in weights if lam != 0.0):
            term = np.multiply(t[name], lam, dtype=np.float64)
            total = term if i == 0 else np.add(total, term, out=total)
        out[name] = total.astype(b.dtype)
    return out


@MERGES.register("iso", retraction="polar")
def iso(base, specialists, lambdas, *, retraction):
    """ISO-Merger (`rlvr_jax.optim.iso_merge`): the base's spectrum, the frame changes merged.

    Every attention / MLP projection keeps the base's singular values and merges
    the specialists' frames (U, V) with λ, then retracts them ("polar" or "qr");
    the other tensors are merged as task vectors.
    """
    merged = iso_merge(base, specialists, lambdas, include=HF_INCLUDE, retraction=retraction)
    return {k: np.asarray(v, base[k].dtype) for k, v in merged.items()}


def model_tensors(model: Transformer) -> dict[str, np.ndarray]:
    """{HF tensor name: NumPy array in the HF layout} of a model's parameters."""
    out = {}
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        name, transpose = hf_name(path)
        arr = np.asarray(var[...])
        out[name] = arr.T if transpose else arr
    return out


def merge_tensors(
    base: dict[str, np.ndarray],
    specialists: Sequence[dict[str, np.ndarray]],
    lambdas: Sequence[float],
    *,
    method: str = "task_arithmetic",
    hparams: dict | None = None,
) -> dict[str, np.ndarray]:
    """Runs merge `method` and checks its result against the base.

    Args:
      base: θ_0 as {name: array}.
      specialists: θ_1..θ_n, each with base's names and shapes.
      lambdas: λ_1..λ_n.
      method: a name in MERGES.
      hparams: the method's hyperparameters (default: its registered defaults).
    Returns:
      The merged {name: array}, with base's names, shapes and dtypes.
    """
    entry = MERGES.get(method)
    if len(lambdas) != len(specialists) or not specialists:
        raise ValueError(
            f"merge: {len(lambdas)} lambdas for {len(specialists)} specialists; need one "
            "λ per specialist (at least one)"
        )
    for i, spec in enumerate(specialists):
        bad = sorted(set(base) ^ set(spec)) + [
            n for n in base if n in spec and spec[n].shape != base[n].shape
        ]
        if bad:
            raise ValueError(
                f"merge: specialist {i} does not match the base's tensors ({bad[:4]}): "
                "specialists must be fine-tunes of the same architecture"
            )
    hparams = dict(entry.defaults) if hparams is None else hparams
    merged = entry.fn(base, list(specialists), tuple(float(x) for x in lambdas), **hparams)
    for name, b in base.items():
        m = merged.get(name)
        if m is None or m.shape != b.shape or m.dtype != b.dtype:
            raise ValueError(f"merge method {method!r} returned a bad tensor {name!r}")
    return merged


def merge_checkpoints(
    base_dir,
    specialist_dirs: Sequence,
    lambdas: Sequence[float],
    out_dir,
    *,
    method: str = "task_arithmetic",
    hparams: dict | None = None,
) -> None:
    """Merges HF checkpoint directories into `out_dir` (the base's config and tokenizer),
    one tensor at a time (module docstring).

    Args:
      base_dir: θ_0's directory (config.json, safetensors, tokenizer file).
      specialist_dirs: the specialists' directories (same architecture).
      lambdas: one λ per specialist.
      out_dir: written under a temporary name, then renamed (replacing it); None
        only checks that the specialists match the base (a multi-process run's
        other processes).
      method, hparams: see `merge_tensors`.
    """
    config = load_config(base_dir)  # float32 params: the merge's dtype
    specs = hf_specs(config)
    base = WeightSource(os.fspath(base_dir))
    sources = [WeightSource(os.fspath(d)) for d in specialist_dirs]
    for i, src in enumerate([base, *sources]):
        bad = [
            n for n, (_, shape) in specs.items() if n not in src.names() or src.shape(n) != shape
        ]
        if bad:
            who = "the base" if i == 0 else f"specialist {i - 1}"
            raise ValueError(
                f"merge: {who} does not match the base's config ({bad[:4]}): "
                "specialists must be fine-tunes of the same architecture"
            )
    if out_dir is None:
        return

    def produce(name):
        dtype = specs[name][0]
        one = lambda src: {name: np.asarray(src.get(name), dtype)}  # noqa: E731
        merged = merge_tensors(
            one(base), [one(s) for s in sources], lambdas, method=method, hparams=hparams
        )
        return merged[name]

    out = os.fspath(out_dir)
    tmp = out.rstrip("/") + f".tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_tensors(config, specs, produce, tmp)
    save_tokenizer(load_model_tokenizer(base_dir), tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


# --------------------------------------------------------------- the merge stage kind
def merge_defaults() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.method = "task_arithmetic"  # a name in pipeline.merge.MERGES
    c.specialists = ""  # earlier stage names, comma-separated: θ_1..θ_n (θ_0 = the init)
    c.lambdas = ""  # λ_1..λ_n, comma-separated ("" = 1/n each)
    for name in MERGES.names():
        c[name] = ml_collections.ConfigDict(dict(MERGES.get(name).defaults))
    c.lock()
    return c


def _names(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def merge_lambdas(run) -> tuple[float, ...]:
    """λ per specialist (1/n each when `lambdas` is empty)."""
    specs = _names(run.specialists)
    if not run.lambdas:
        return tuple(1.0 / len(specs) for _ in specs)
    return tuple(float(x) for x in _names(run.lambdas))


def check_merge(run, *, where: str, earlier) -> None:
    if run.method not in MERGES:
        raise ValueError(f"{where}.method = {run.method!r}; valid: {', '.join(MERGES.names())}")
    specs = _names(run.specialists)
    bad = [s for s in specs if s not in earlier]
    if not specs or bad:
        raise ValueError(
            f"{where}.specialists = {run.specialists!r}: name earlier stages "
            f"({', '.join(earlier) or 'none'})"
        )
    try:
        lambdas = merge_lambdas(run)
    except ValueError:
        raise ValueError(f"{where}.lambdas = {run.lambdas!r} is not a list of numbers") from None
    if len(lambdas) != len(specs):
        raise ValueError(f"{where}.lambdas = {run.lambdas!r}: one λ per specialist ({len(specs)})")


def run_merge(ctx: StageContext) -> dict[str, Any]:
    c = ctx.config
    specs = _names(c.specialists)
    lambdas = merge_lambdas(c)
    # Process 0 merges on the host, one tensor at a time, and writes it; the others
    # check the specialists against the base.
    write = distributed.is_logging_process()
    if write:
        ctx.workdir.mkdir(parents=True, exist_ok=True)
        (ctx.workdir / "config.json").write_text(c.to_json(indent=2, sort_keys=True))
    merge_checkpoints(
        ctx.init_dir,
        [ctx.exports[s] for s in specs],
        lambdas,
        ctx.export_dir if write else None,
        method=c.method,
        hparams=c[c.method].to_dict(),
    )
    return {"method": c.method, "specialists": ",".join(specs), "lambdas": str(list(lambdas))}
