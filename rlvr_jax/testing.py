"""Test doubles shared across the repo: tiny models, toy tokenizers, tiny HF checkpoints,
a parity verifier (and parity tool episodes) for random policies, score contexts for signal tests.

Everything here is small enough for a unit test on CPU (milliseconds to compile
and run). `make_hf_checkpoint` needs the test-only dependencies torch and
transformers and imports them lazily. This module sits above every package
(it builds their objects); the library never imports it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import pyfile, tasks
from rlvr_jax.models import init_model
from rlvr_jax.models.config import ModelConfig
from rlvr_jax.models.tiny import bench_config, tiny_config
from rlvr_jax.rl.signals import ScoreContext, Scorer
from rlvr_jax.rl.update import make_scorer
from rlvr_jax.rollout.score import Verdicts
from rlvr_jax.tasks import tools
from rlvr_jax.tasks.base import CORRECT, WRONG_ANSWER
from rlvr_jax.tokenizers import CharTokenizer

__all__ = [
    "bench_config",
    "launch_processes",
    "multihost_pulse",
    "make_hf_checkpoint",
    "parity_score_rows",
    "parity_vote",
    "parity_tool_episodes",
    "score_context",
    "tiny_config",
    "toy_tokenizer",
]


def toy_tokenizer(vocab_size: int | None = None):
    """A character-level tokenizer (pad 0, bos 1, eos 2, <|im_start|> 3, <|im_end|> 4)."""
    return CharTokenizer(vocab_size=vocab_size)


def make_hf_checkpoint(path, config: ModelConfig, *, seed: int = 0, noise: float = 0.05):
    """Creates a random transformers model of `config`'s architecture and saves it to `path`.

    transformers' own init leaves norms at exactly 1 and biases at 0, which would
    hide bugs in those parameters, so every parameter gets Gaussian noise.

    Returns:
      The torch model (eval mode), as the parity oracle.
    """
    import torch  # lazy: a test-only dependency
    import transformers  # lazy: a test-only dependency

    torch.manual_seed(seed)
    hf_config = transformers.AutoConfig.for_model(**config.to_hf_dict())
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * noise)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    return model


def parity_score_rows(task, tokenizer, problems_R, sampled_R, stop_ids):
    """`rollout.score.score_rows` for random policies: reward = parity of the token sum.

    A random model never solves a task, so every group would be all-wrong and no
    update would run; with this verifier (monkeypatch it over
    `rlvr_jax.rollout.score.score_rows`) groups differ and every stage really runs.
    Correct = reward 1; the reason is "parity".
    """
    rewards = np.array([sum(ids) % 2 for ids in sampled_R], np.float64)
    texts = [tokenizer.decode(list(ids)) for ids in sampled_R]
    return Verdicts(rewards, rewards > 0, ["parity"] * len(rewards), texts)


def parity_vote(text, num_players=None):
    """`tasks.spy.parse_vote` for random policies: the vote = codepoint sum of the text mod N.

    A random model never writes "Vote: k", so every game would end with no votes
    (the spy always survives, every role's rewards constant); monkeypatch this over
    `rlvr_jax.rollout.self_play.parse_vote` and games have outcomes that differ.
    """
    return sum(map(ord, text)) % (num_players or 1)


def parity_tool_episodes(monkeypatch) -> None:
    """Patches `tasks.tools.ToolEnv.step` for random policies: parity rewards on episodes.

    A random model never answers a tool_lookup episode, so every episode would
    fail; with this patch an episode, when the environment ends it, gets reward 1
    (reason CORRECT) when its turns wrote an even number of characters in all,
    else 0 (reason WRONG_ANSWER). Observations are unchanged, so a replayed
    episode still sees the same environment.

    Args:
      monkeypatch: pytest's fixture (the patch is undone with it).
    """
    step = tools.ToolEnv.step
    chars = weakref.WeakKeyDictionary()  # characters written, per environment

    def parity_step(env, turn_text):
        if env.final is not None:
            return step(env, turn_text)
        chars[env] = chars.get(env, 0) + len(turn_text)
        out = step(env, turn_text)
        if out.done:
            ok = chars.pop(env) % 2 == 0
            info = {**out.info, "reason": CORRECT if ok else WRONG_ANSWER}
            out = env.final = dataclasses.replace(out, reward=float(ok), info=info)
        return out

    monkeypatch.setattr(tools.ToolEnv, "step", parity_step)


def score_context(model=None, tokenizer=None, task=None, *, chunk: int = 8, reference=False):
    """A `rl.signals.ScoreContext` over a tiny model, for score-signal tests.

    Args:
      model: the policy (default: a tiny random Qwen3 over `tokenizer`'s vocabulary).
      tokenizer: default `toy_tokenizer()`.
      task: the run's task (default: arithmetic with its defaults).
      chunk: rows per forward pass.
      reference: also a reference scorer (a copy of the policy's weights).
    Returns:
      The ScoreContext (its `policy.fn` is the jitted trainer scorer, unsharded).
    """
    tokenizer = tokenizer or toy_tokenizer()
    if model is None:
        model = init_model(tiny_config(vocab_size=tokenizer.vocab_size), seed=0)
    task = task or tasks.get("arithmetic")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    policy = Scorer(make_scorer(graphdef), graphdef, params, rest, model.config, chunk)
    ref = None
    if reference:
        ref = Scorer(policy.fn, graphdef, jax.tree.map(jnp.copy, params), rest, model.config, chunk)
    return ScoreContext(tokenizer, task, policy, ref)


def multihost_pulse(experiment: str, *, steps: int = 2, variant: str = "pulse"):
    """`experiments/<experiment>`'s `:pulse` config set up for a multi-process test.

    The mesh spans every device of every process on fsdp, one minibatch per step
    (the update then sums over every row, whatever the split of rows into
    per-process minibatches), no evaluation at the start and no final export.
    """
    file = Path(__file__).resolve().parents[1] / "experiments" / experiment
    c = pyfile.load(file).get_config(variant)
    c.mesh.shape = (1, -1, 1)
    c.eval.at_start = False
    c.checkpoint.export_final = False
    c.train.steps = steps
    c.train.num_minibatches = 1
    return c


def finish_child(trainer, out: str | Path | None = None, record=None) -> None:
    """The end of a `launch_processes` child that trains: runs `trainer` to its last step,
    closes its files, writes `record` as JSON to `out` (when given) and prints the
    "DONE <process id>" line `launch_processes` waits for."""
    try:
        trainer.run()
    finally:
        trainer.io.close()
    if out is not None:
        Path(out).write_text(json.dumps(record))
    print("DONE", jax.process_index())


def launch_processes(
    script: Path,
    args_of: Callable[[int], list[str]] = lambda i: [],
    *,
    nproc: int = 2,
    devices_per_process: int = 2,
    timeout: float = 1200,
) -> list[str]:
    """Runs `script` as `nproc` JAX CPU processes that join one distributed job.

    Each process gets `python script <port> <process id> *args_of(id)` (the
    coordinator port is a free local one), `devices_per_process` CPU devices,
    and the repository root as working directory. Fails (AssertionError with
    the end of its stderr) unless every process exits 0 and prints
    "DONE <process id>"; a process still running after `timeout` is killed.

    Returns:
      each process's stdout.
    """
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(port), str(i), *args_of(i)],
            cwd=Path(__file__).resolve().parents[1],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(nproc)
    ]
    try:
        logs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for i, (p, (out, err)) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"process {i}:\n{err[-4000:]}"
        assert f"DONE {i}" in out, f"process {i} did not finish:\n{out[-2000:]}"
    return [out for out, _ in logs]
