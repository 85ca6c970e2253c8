"""Supervised fine-tuning: masked next-token loss, padded batches and a jitted AdamW loop.

The pieces, from pure to stateful:
  * `sft_loss(model, tokens_BxT, attention_mask_BxT, loss_mask_BxT) -> (sum, count)`:
    masked next-token cross-entropy, aligned like `scoring.token_logps` (entry t
    is the loss of token t given tokens < t).
  * `encode_example` / `pad_batch`: a (prompt, completion) pair becomes
    `[chat prompt | completion | end-of-turn]`, right-padded; the loss mask
    covers the completion and the closing end-of-turn token.
  * `TrainState`, `make_optimizer`, `make_train_step`: one pytree (params,
    optimizer state, step) stepped by one jitted function with donated buffers.
  * `train_sft(model, tokenizer, examples, ...)`: the host loop; logs loss and
    tokens/s, raises on NaN, is deterministic for a seed, and updates `model`
    in place. With `checkpoint_dir` it checkpoints every `checkpoint_every`
    steps and at the end, and a rerun resumes from there (bitwise the same
    result: the batch order is a function of (seed, step)).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct

from rlvr_jax import sharding
from rlvr_jax.models.scoring import token_logps
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.tokenizers import Tokenizer, encode_prompt, end_of_turn_id
from rlvr_jax.train.sft_checkpoint import SFTCheckpointer

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- loss
def sft_loss(model: Transformer, tokens_BxT, attention_mask_BxT, loss_mask_BxT):
    """Masked next-token cross-entropy, as a sum and its token count.

    Args:
      model: the policy.
      tokens_BxT: int token ids (prompt and completion in one row, any padding).
      attention_mask_BxT: 1 at real tokens.
      loss_mask_BxT: 1 at tokens to predict; entry t is the loss of token t given
        tokens < t (so column 0, which has no context, contributes nothing).
        Entries outside the attention mask are ignored.
    Returns:
      (loss_sum, count): float32 scalars, the summed negative log-likelihood of
      the masked tokens and how many were masked. Divide by a global count
      (summed over micro-batches or data shards) for the mean.
    """
    logps_BxT = token_logps(model, tokens_BxT, attention_mask_BxT)
    mask_BxT = jnp.asarray(loss_mask_BxT, bool) & jnp.asarray(attention_mask_BxT, bool)
    mask_BxT = mask_BxT.at[:, 0].set(False).astype(jnp.float32)
    return -jnp.sum(logps_BxT * mask_BxT), jnp.sum(mask_BxT)


# --------------------------------------------------------------------------- batches
def encode_example(tokenizer: Tokenizer, prompt: str, completion: str):
    """Token ids of one SFT example and its loss mask.

    Args:
      tokenizer: the tokenizer (its chat template renders the prompt).
      prompt: the user message.
      completion: the target assistant reply (without the end-of-turn token).
    Returns:
      (ids_T, loss_mask_T): int32 and bool NumPy arrays; the mask is True on the
      completion tokens and the closing end-of-turn token.
    """
    prompt_ids = encode_prompt(tokenizer, prompt)
    target_ids = tokenizer.encode(completion) + [end_of_turn_id(tokenizer)]
    ids = np.asarray(prompt_ids + target_ids, np.int32)
    loss_mask = np.zeros(len(ids), bool)
    loss_mask[len(prompt_ids) :] = True
    return ids, loss_mask


def pad_batch(encoded: Sequence[tuple[np.ndarray, np.ndarray]], length: int, pad_id: int):
    """Right-pads encoded examples to one [B, T] batch.

    Args:
      encoded: (ids_T, loss_mask_T) pairs from `encode_example`.
      length: T; every example must fit.
      pad_id: id written at padding positions (masked out everywhere).
    Returns:
      dict with tokens_BxT int32, attention_mask_BxT bool, loss_mask_BxT bool.
    """
    b = len(encoded)
    tokens = np.full((b, length), pad_id, np.int32)
    attn = np.zeros((b, length), bool)
    loss = np.zeros((b, length), bool)
    for i, (ids, mask) in enumerate(encoded):
        if len(ids) > length:
            raise ValueError(f"example {i} has {len(ids)} tokens; the batch length is {length}")
        tokens[i, : len(ids)] = ids
        attn[i, : len(ids)] = True
        loss[i, : len(ids)] = mask
    return dict(tokens_BxT=tokens, attention_mask_BxT=attn, loss_mask_BxT=loss)


# ------------------------------------------------------------------ optimizer & step
@struct.dataclass
class TrainState:
    """Everything the train step reads and writes, as one pytree."""

    params: Any  # nnx.State of the trainable nnx.Param variables
    opt_state: Any
    step: jax.Array  # int32 scalar


def make_optimizer(
    lr: float,
    steps: int,
    *,
    warmup_steps: int | None = None,
    end_lr_fraction: float = 0.1,
    weight_decay: float = 0.01,
    clip_norm: float = 1.0,
    b2: float = 0.98,
) -> optax.GradientTransformation:
    """AdamW with linear warmup then cosine decay, after global-norm gradient clipping.

    Args:
      lr: peak learning rate.
      steps: total steps (the cosine reaches `end_lr_fraction * lr` there).
      warmup_steps: default 5% of `steps` (at least 1).
      end_lr_fraction: final learning rate as a fraction of `lr`.
      weight_decay: decoupled decay, applied to matrices only (not norms).
      clip_norm: maximum global gradient norm.
      b2: Adam's second-moment decay.
    Returns:
      The optax transformation.
    """
    warmup = max(1, steps // 20) if warmup_steps is None else warmup_steps
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, lr, warmup, max(steps, warmup + 1), end_value=lr * end_lr_fraction
    )
    return optax.chain(
        optax.clip_by_global_norm(clip_norm),
        optax.adamw(
            schedule,
            b1=0.9,
            b2=b2,
            weight_decay=weight_decay,
            mask=lambda params: jax.tree.map(lambda p: p.ndim >= 2, params),
        ),
    )


def make_train_step(graphdef, optimizer: optax.GradientTransformation, *, mesh=None, rules=None):
    """One jitted SFT step `(state, rest, batch) -> (state, metrics)`; `state` is donated.

    Args:
      graphdef: from `nnx.split(model, nnx.Param, ...)`.
      optimizer: from `make_optimizer`.
      mesh, rules: trace under `sharding.activate(mesh, rules)` (activations pinned
        to the rules; None = unconstrained).
    Returns:
      The jitted step; `rest` is the model's non-trainable state (the third
      output of that split). Metrics: loss (mean over masked tokens), loss_sum,
      num_target_tokens, num_tokens, grad_norm.
    """

    def loss_fn(params, rest, batch):
        model = nnx.merge(graphdef, params, rest)
        loss_sum, count = sft_loss(
            model, batch["tokens_BxT"], batch["attention_mask_BxT"], batch["loss_mask_BxT"]
        )
        return loss_sum / jnp.maximum(count, 1.0), (loss_sum, count)

    def step(state: TrainState, rest, batch):
        (loss, (loss_sum, count)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, rest, batch
        )
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = dict(
            loss=loss,
            loss_sum=loss_sum,
            num_target_tokens=count,
            num_tokens=jnp.sum(batch["attention_mask_BxT"], dtype=jnp.float32),
            grad_norm=optax.tree.norm(grads),
        )
        return TrainState(params, opt_state, state.step + 1), metrics

    return jax.jit(sharding.with_rules(step, mesh, rules), donate_argnums=0)


@functools.lru_cache(maxsize=16)
def _default_step(graphdef, lr: float, steps: int):
    """Compiled once per (architecture, lr, steps): repeated runs skip recompiling."""
    optimizer = make_optimizer(lr, steps)
    return optimizer, make_train_step(graphdef, optimizer)


# ----------------------------------------------------------------------- host loop
@dataclasses.dataclass
class SFTResult:
    """What `train_sft` reports.

    Attributes:
      history: one dict per logged step (step, loss, grad_norm, tokens_per_s, ...).
      evals: (step, eval_fn result) pairs.
      seconds: wall time of the loop, compilation included.
      final_loss: mean loss of the last `log_every` steps.
    """

    history: list[dict[str, float]]
    evals: list[tuple[int, Any]]
    seconds: float
    final_loss: float


def _batch_indices(num_examples: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """[steps, batch_size] example indices: seeded epochs of permutations, concatenated."""
    rng = np.random.default_rng(seed)
    need = steps * batch_size
    epochs = [rng.permutation(num_examples) for _ in range(math.ceil(need / num_examples))]
    return np.concatenate(epochs)[:need].reshape(steps, batch_size)


def train_sft(
    model: Transformer,
    tokenizer: Tokenizer,
    examples: Sequence[tuple[str, str]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    eval_fn: Callable[[Transformer, int], Any] | None = None,
    eval_every: int = 0,
    log_every: int = 50,
    optimizer: optax.GradientTransformation | None = None,
    length_multiple: int = 8,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
) -> SFTResult:
    """Trains `model` in place on (prompt, completion) pairs with the masked SFT loss.

    Every batch is padded to one length (the longest example, rounded up to
    `length_multiple`), so the step compiles once. Batches are drawn from
    seeded permutations of `examples`, so a run is deterministic for a seed.

    Args:
      model: the policy; its parameters are replaced by the trained ones.
      tokenizer: renders prompts with its chat template.
      examples: (prompt, completion) text pairs.
      steps: optimizer steps.
      batch_size: examples per step.
      lr: peak learning rate of `make_optimizer` (ignored if `optimizer` is given).
      seed: batch order seed.
      eval_fn: optional `eval_fn(model, step) -> anything`, called every
        `eval_every` steps and after the last step.
      eval_every: 0 = only after the last step.
      log_every: steps between log lines (and history entries).
      optimizer: overrides the default AdamW + warmup/cosine + clipping.
      length_multiple: round the batch length up to a multiple of this.
      checkpoint_dir: if given, resume from the checkpoint there (refused if it
        belongs to a run with other steps, batch size, seed, lr or examples) and
        save one every `checkpoint_every` steps (0: only at the end) and after
        the last step. `history` then includes the steps before the resume;
        `evals` only the evaluations made after it.
      checkpoint_every: steps between checkpoints.
    Returns:
      SFTResult. Raises FloatingPointError on a non-finite loss.
    """
    if not examples:
        raise ValueError("train_sft needs at least one example")
    encoded = [encode_example(tokenizer, p, c) for p, c in examples]
    return train_sft_encoded(
        model,
        tokenizer,
        encoded,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        eval_fn=eval_fn,
        eval_every=eval_every,
        log_every=log_every,
        optimizer=optimizer,
        length_multiple=length_multiple,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
    )


def train_sft_encoded(
    model: Transformer,
    tokenizer: Tokenizer,
    encoded: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    eval_fn: Callable[[Transformer, int], Any] | None = None,
    eval_every: int = 0,
    log_every: int = 50,
    optimizer: optax.GradientTransformation | None = None,
    length_multiple: int = 8,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 0,
) -> SFTResult:
    """`train_sft` on already-encoded (ids_T, loss_mask_T) examples (e.g. multi-turn episodes).

    Args:
      model, tokenizer (gives the pad id): as in `train_sft`.
      encoded: examples from `encode_example` or `multiturn.encode_episode`.
      steps, batch_size, lr, seed, eval_fn, eval_every, log_every, optimizer,
        length_multiple, checkpoint_dir, checkpoint_every: as in `train_sft`.
    Returns:
      SFTResult. Raises FloatingPointError on a non-finite loss.
    """
    if not encoded:
        raise ValueError("train_sft_encoded needs at least one example")
    longest = max(len(ids) for ids, _ in encoded)
    length = -(-longest // length_multiple) * length_multiple
    max_positions = model.config.max_position_embeddings
    if length > max_positions:
        raise ValueError(f"examples need {length} positions; the model has {max_positions}")
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0
    order = _batch_indices(len(encoded), batch_size, steps, seed)

    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    # The step donates its input buffers; copy so the caller's arrays stay valid.
    params = jax.tree.map(jnp.copy, params)
    if optimizer is None:
        optimizer, train_step = _default_step(graphdef, float(lr), int(steps))
    else:
        train_step = make_train_step(graphdef, optimizer)
    state = TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    history, evals, window = [], [], []
    first, elapsed, ckpt = 0, 0.0, None
    if checkpoint_dir is not None:
        identity = dict(steps=int(steps), batch_size=int(batch_size), seed=int(seed),
                        lr=float(lr), num_examples=len(encoded), length=int(length))  # fmt: skip
        ckpt = SFTCheckpointer(checkpoint_dir, identity)
        if ckpt.latest_step() is not None:
            state, meta = ckpt.restore(state)
            first, history, window = int(state.step), meta["history"], meta["window"]
            elapsed = meta["seconds"]
            log.info("SFT resumes at step %d of %d from %s", first, steps, checkpoint_dir)
    start = last_time = time.perf_counter()
    start -= elapsed  # `seconds` counts the attempts before a resume too
    tokens_since = 0.0
    pending = None  # (step, metrics) of the step dispatched before the current one

    def record(step_num, metrics):
        nonlocal last_time, tokens_since
        m = {k: float(v) for k, v in jax.device_get(metrics).items()}
        if not math.isfinite(m["loss"]):
            raise FloatingPointError(f"SFT loss is {m['loss']} at step {step_num}")
        window.append(m["loss"])
        tokens_since += m["num_tokens"]
        if step_num % log_every == 0 or step_num == steps:
            now = time.perf_counter()
            entry = dict(
                step=step_num,
                loss=float(np.mean(window)),
                grad_norm=m["grad_norm"],
                tokens_per_s=tokens_since / max(now - last_time, 1e-9),
                seconds=now - start,
            )
            history.append(entry)
            log.info(
                "sft step %d loss %.4f grad_norm %.3f tok/s %.0f",
                step_num,
                entry["loss"],
                entry["grad_norm"],
                entry["tokens_per_s"],
            )
            window.clear()
            last_time, tokens_since = now, 0.0

    for i in range(first, steps):
        batch = pad_batch([encoded[j] for j in order[i]], length, pad_id)
        state, metrics = train_step(state, rest, batch)
        # Read step i-1's metrics only after step i is dispatched: no idle device.
        if pending is not None:
            record(*pending)
        pending = (i + 1, metrics)
        due = i + 1 == steps or (checkpoint_every and (i + 1) % checkpoint_every == 0)
        if ckpt is not None and due:
            record(*pending)  # the checkpoint's history includes its own step
            pending = None
            meta = dict(history=history, window=window, seconds=time.perf_counter() - start)
            ckpt.save(i + 1, state, meta)
        if eval_fn is not None and eval_every and (i + 1) % eval_every == 0 and i + 1 < steps:
            nnx.update(model, jax.tree.map(jnp.copy, state.params))
            evals.append((i + 1, eval_fn(model, i + 1)))
    if pending is not None:
        record(*pending)
    if ckpt is not None:
        ckpt.close()
    nnx.update(model, state.params)
    if eval_fn is not None:
        evals.append((steps, eval_fn(model, steps)))
    seconds = time.perf_counter() - start
    final = history[-1]["loss"] if history else float("nan")
    return SFTResult(history=history, evals=evals, seconds=seconds, final_loss=final)
