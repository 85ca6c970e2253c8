"""The policies an analysis compares: a run's final export, its starting policy, a saved step.

load_policy(path)                 a Hugging Face directory or a run workdir (its export/)
initial_policy(run_dir)           the policy the run started from (its config's model)
step_params(run_dir, step, like)  the policy params of an orbax checkpoint step
resolve_early(run_dir, spec, ...) "" (the initial policy), "step:N", or a model path
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import ml_collections
from flax import nnx

from rlvr_jax.models import load_pretrained
from rlvr_jax.optim.iso import flatten, unflatten_like
from rlvr_jax.rl.build import build_policy
from rlvr_jax.train.eval_checkpoint import resolve_model_dir
from rlvr_jax.train.warmstart import load_model_tokenizer


def run_config(run_dir) -> ml_collections.ConfigDict:
    """The run's config (its workdir's config.json); FileNotFoundError naming the path."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {run_dir} is not an RL run workdir")
    return ml_collections.ConfigDict(json.loads(path.read_text()))


def load_policy(path):
    """(model, tokenizer) of a Hugging Face model directory or a run workdir's export/."""
    model_dir = resolve_model_dir(path)
    model, _ = load_pretrained(model_dir)
    return model, load_model_tokenizer(model_dir)


def initial_policy(run_dir):
    """(model, tokenizer) the run in `run_dir` started from (`rl.build.build_policy`)."""
    return build_policy(run_config(run_dir))


def step_params(run_dir, step: int, like):
    """The policy params saved at checkpoint `step` of `run_dir`, in the structure of `like`.

    Args:
      run_dir: the run workdir (checkpoints/<step>/state holds the RL state).
      step: a saved step.
      like: the params (nnx.State) whose structure and dtypes the result takes.
    Returns:
      nnx.State of `like`'s structure. FileNotFoundError names the missing step.
    """
    import orbax.checkpoint as ocp  # lazy: heavy, only to read checkpoints

    path = Path(run_dir).resolve() / "checkpoints" / str(step) / "state"
    if not path.is_dir():
        have = sorted(p.name for p in (Path(run_dir) / "checkpoints").glob("[0-9]*"))
        raise FileNotFoundError(f"no checkpoint step {step} under {run_dir}; saved: {have}")
    saved = flatten(ocp.StandardCheckpointer().restore(path)["params"])
    want = flatten(like)
    missing = sorted(set(want) - set(saved))
    if missing:
        raise ValueError(f"checkpoint {path} lacks policy params {missing[:4]}")
    return unflatten_like(like, {k: jax.numpy.asarray(saved[k], want[k].dtype) for k in want})


def resolve_early(run_dir, spec: str, rl_model):
    """The early checkpoint's params in `rl_model`'s structure.

    Args:
      run_dir: the RL run.
      spec: "" = the run's initial policy; "step:N" = its checkpoint N; else a
        model directory or run workdir (export/).
      rl_model: the RL policy (gives the structure).
    Returns:
      (params, description).
    """
    like = nnx.state(rl_model, nnx.Param)
    if not spec:
        model, _ = initial_policy(run_dir)
        return nnx.state(model, nnx.Param), "initial policy"
    if spec.startswith("step:"):
        step = int(spec.split(":", 1)[1])
        return step_params(run_dir, step, like), f"checkpoint step {step}"
    model, _ = load_policy(spec)
    return nnx.state(model, nnx.Param), str(resolve_model_dir(spec))
