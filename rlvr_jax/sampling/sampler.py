"""Batched group sampler with a KV cache: prefill, then one jitted `lax.while_loop` decode.

Layout of every returned batch (the trainer's layout, see docs/design.md): row b is
`[left-padded context | generated region]` of length L = P + N, where P is the
context length rounded up to a bucket and N = max_new_tokens. The context is
the prompt, then (optionally) forced tokens: a given prefix (branching from a
node of an earlier rollout, entrance-prefix grafts) or, in multi-turn
continuation, earlier turns and environment observations.

Masks: `prompt_mask` (the prompt), `response_mask` (tokens the policy sampled:
what the loss trains on), `attention_mask` (every real token). Forced tokens are
`attention_mask & ~prompt_mask & ~response_mask`.

Compilation: one program per (batch size, context bucket, N, noise layer).
Temperature, top-k, top-p and stop tokens are data and never recompile.

Sharding (`mesh=`, see rlvr_jax.sharding): rows and the KV cache split over (data, fsdp), kv
heads over `tensor` when it divides them; weights keep their shardings (`models.sharded_init`).

Multi-process (`rlvr_jax.distributed`): every process calls `sample` at the same
point with its own prompts; one program runs over all hosts' rows (each
process's rows, concatenated), every process padding to the largest row count
and context bucket any process needs, and each gets back its own rows. The key
is shared, so a row's draws depend on its global position only. Without `mesh=`
a multi-process sampler runs on the mesh of the model's weights.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import distributed, sharding
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.sampling.generate import (
    MAX_STOP_IDS,
    cache_slots,
    generate,
    kv_cache_bytes,
    kv_head_split,
    work_bytes_per_row,
)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample. All fields but `max_new_tokens`/`n` are runtime data.

    Attributes:
      temperature: 0 = greedy.
      top_k: keep the k most likely tokens (0 = off).
      top_p: nucleus mass (1 = off).
      max_new_tokens: N, the decode budget (static: sets buffer shapes).
      stop_token_ids: sampling one of these ends the row (it is kept in the response).
      n: samples per prompt (one group per prompt, rows grouped consecutively).
      prompt_noise_sigma: NC-GRPO latent noise (units of hidden RMS) added to
        context positions at `prompt_noise_layer` during prefill, for the rows
        where `noise_rows` (a per-row bool list passed to `sample`) is set.
      prompt_noise_layer: block after which the noise is added (-1 = last).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    n: int = 1
    prompt_noise_sigma: float = 0.0
    prompt_noise_layer: int = -1

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0 or self.max_new_tokens < 1 or self.n < 1:
            raise ValueError(f"invalid top_k/max_new_tokens/n in {self}")
        if len(self.stop_token_ids) > MAX_STOP_IDS:
            raise ValueError(f"at most {MAX_STOP_IDS} stop tokens, got {self.stop_token_ids}")


@dataclasses.dataclass
class Rollout:
    """Sampled sequences on the host (NumPy), in the trainer's [B, L] layout.

    `logps`, `sampling_logps` and `entropy` are aligned like the scoring
    interface: entry t belongs to token t; they are 0 outside `response_mask`.
    """

    tokens: np.ndarray  # [B, L] int32
    attention_mask: np.ndarray  # [B, L] bool
    prompt_mask: np.ndarray  # [B, L] bool
    response_mask: np.ndarray  # [B, L] bool
    logps: np.ndarray  # [B, L] float32, temperature-1 model log-probs
    sampling_logps: np.ndarray  # [B, L] float32, log-probs under the sampling distribution
    entropy: np.ndarray  # [B, L] float32, entropy of the temperature-1 distribution
    group: np.ndarray  # [B] int32, index of the prompt each row answers
    stopped: np.ndarray  # [B] bool, the last turn ended with a stop token

    @property
    def forced_mask(self) -> np.ndarray:
        return self.attention_mask & ~self.prompt_mask & ~self.response_mask

    def response_tokens(self, b: int) -> list[int]:
        """Tokens after the prompt in row b (sampled and forced, in order)."""
        keep = self.attention_mask[b] & ~self.prompt_mask[b]
        return self.tokens[b][keep].tolist()

    def sampled_tokens(self, b: int) -> list[int]:
        return self.tokens[b][self.response_mask[b]].tolist()


def _weights_mesh(model) -> jax.sharding.Mesh:
    """The mesh the model's weights live on (a multi-process sampler must run on it)."""
    for leaf in jax.tree.leaves(nnx.state(model)):
        if isinstance(getattr(leaf, "sharding", None), jax.sharding.NamedSharding):
            return leaf.sharding.mesh
    raise ValueError(
        "a multi-process Sampler needs mesh= or a model whose weights are sharded on a mesh"
    )


def _bucket(length: int, minimum: int = 16) -> int:
    """Next power of two (>= minimum): few distinct shapes, so few compiles."""
    return max(minimum, 1 << max(0, (length - 1)).bit_length())


class Sampler:
    """Samples groups of rollouts from a Transformer.

    Usage:
      sampler = Sampler(model)
      out = sampler.sample(prompts, SamplingParams(n=8, max_new_tokens=64,
                                                   stop_token_ids=(eos,)), key)
    Each call samples with the model's current weights (updates made in place,
    e.g. by an optimizer, are picked up without recompiling); pass `state=` (an
    `nnx.state` of a model with the same structure) to sample with other weights.
    """

    def __init__(
        self,
        model: Transformer,
        *,
        pad_id: int = 0,
        max_length: int | None = None,
        batch_multiple: int = 8,
        mesh: jax.sharding.Mesh | None = None,
        rules="fsdp",
        cache_bytes: float | None = None,
        cache_dtype: str | None = None,
    ):
        """Args:
        model: the policy; its current weights are used at every call.
        pad_id: token id written at padding positions.
        max_length: longest context + generation (default: max_position_embeddings).
        batch_multiple: rows are padded to a multiple of this with idle rows, so a
          batch that changes size by a few rows (e.g. dynamic sampling) reuses
          the compiled program.
        mesh: optional device mesh to sample on (rows padded to a multiple of
          its batch shards as well).
        rules: sharding rules (preset name or pairs) for the cache and activations.
        cache_bytes: memory budget per device of one call's rows: their KV cache plus
          their working memory (`generate.work_bytes_per_row`: prefill activations,
          decode logits and sort buffers, output buffers). A batch that would not fit
          is sampled in several calls of equal row count (`rows_per_call`), each
          call's rows drawing with `fold_in(key, call)`. None: one call.
        cache_dtype: KV cache storage dtype ("bfloat16" halves it; None: the
          model's compute dtype).
        """
        if cache_dtype not in (None, "float32", "bfloat16"):
            raise ValueError(f"cache_dtype={cache_dtype!r}; choose None, 'float32' or 'bfloat16'")
        if cache_bytes is not None and cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be positive, got {cache_bytes}")
        self.cache_bytes, self.cache_dtype = cache_bytes, cache_dtype
        if batch_multiple < 1:
            raise ValueError(f"batch_multiple must be >= 1, got {batch_multiple}")
        if mesh is None and jax.process_count() > 1:
            mesh = _weights_mesh(model)
        if mesh is not None:
            batch_multiple = math.lcm(batch_multiple, sharding.batch_shards(mesh))
        self.batch_multiple = batch_multiple
        self.mesh, self.rules = mesh, rules
        self.model = model
        self.config = model.config
        self.pad_id = pad_id
        self.max_length = max_length or self.config.max_position_embeddings
        self._generate = jax.jit(
            sharding.with_rules(generate, mesh, rules),
            static_argnames=("graphdef", "max_new_tokens", "noise_layer", "cache_dtype"),
            # Outputs split like the inputs' rows: each process reads back its own rows.
            out_shardings=None if mesh is None else sharding.batch_sharding(mesh),
        )

    # ------------------------------------------------------------------ public
    def with_model(self, model: Transformer) -> Sampler:
        """A sampler of `model` with this one's settings: pad id, length, row multiple,
        mesh, sharding rules, memory budget and cache dtype (e.g. for a LoRA copy of the policy)."""
        return Sampler(
            model,
            pad_id=self.pad_id,
            max_length=self.max_length,
            batch_multiple=self.batch_multiple,
            mesh=self.mesh,
            rules=self.rules,
            cache_bytes=self.cache_bytes,
            cache_dtype=self.cache_dtype,
        )

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        key: jax.Array,
        *,
        prefixes: Sequence[Sequence[int]] | None = None,
        noise_rows: Sequence[bool] | None = None,
        state=None,
    ) -> Rollout:
        """Samples `params.n` continuations of every prompt.

        Args:
          prompts: token id lists, one per prompt.
          params: SamplingParams.
          key: PRNG key; the same key and inputs give the same rollouts.
          prefixes: optional forced tokens per row (len = len(prompts) * n):
            decoding continues after them; they are marked neither prompt nor
            response.
          noise_rows: per-row flags for NC-GRPO prompt noise (len = rows).
          state: model state to sample with (default: the model's current state).
        Returns:
          Rollout with B = len(prompts) * n rows.
        """
        rows = [list(p) for p in prompts for _ in range(params.n)]
        group = np.repeat(np.arange(len(prompts), dtype=np.int32), params.n)
        if prefixes is not None and len(prefixes) != len(rows):
            raise ValueError(f"got {len(prefixes)} prefixes for {len(rows)} rows (prompts x n)")
        forced = [list(p) for p in prefixes] if prefixes is not None else [[] for _ in rows]
        roles = [[0] * len(r) + [1] * len(f) for r, f in zip(rows, forced, strict=True)]
        contexts = [r + f for r, f in zip(rows, forced, strict=True)]
        zeros = [np.zeros(len(c), np.float32) for c in contexts]
        return self._run(
            contexts, roles, zeros, zeros, zeros, group, params, key, noise_rows, state, None
        )

    def continue_rollout(
        self,
        rollout: Rollout,
        observations: Sequence[Sequence[int] | None],
        params: SamplingParams,
        key: jax.Array,
        *,
        state=None,
    ) -> Rollout:
        """Multi-turn continuation: append observation tokens to each row and decode again.

        Args:
          rollout: the previous turn's Rollout.
          observations: per row, environment tokens to append (masked out of
            the response), or None for a row whose episode has ended (it is
            carried unchanged and generates nothing). `params.n` is ignored.
          params, key, state: as in `sample`.
        Returns:
          A Rollout holding every turn; earlier turns keep their log-probs.
        """
        if len(observations) != rollout.tokens.shape[0]:
            raise ValueError(f"{len(observations)} observations for {rollout.tokens.shape[0]} rows")
        contexts, roles, lps, slps, ents = [], [], [], [], []
        for b, obs in enumerate(observations):
            keep = rollout.attention_mask[b]
            role = np.where(rollout.prompt_mask[b], 0, np.where(rollout.response_mask[b], 2, 1))
            extra = list(obs or [])
            contexts.append(rollout.tokens[b][keep].tolist() + extra)
            roles.append(role[keep].tolist() + [1] * len(extra))
            pad = np.zeros(len(extra), np.float32)
            lps.append(np.concatenate([rollout.logps[b][keep], pad]))
            slps.append(np.concatenate([rollout.sampling_logps[b][keep], pad]))
            ents.append(np.concatenate([rollout.entropy[b][keep], pad]))
        active = np.array([o is not None for o in observations])
        return self._run(
            contexts,
            roles,
            lps,
            slps,
            ents,
            rollout.group,
            params,
            key,
            None,
            state,
            active,
            rollout.stopped,
        )

    # ----------------------------------------------------------------- private
    def rows_per_call(self, rows: int, prompt_len: int, max_new_tokens: int) -> int:
        """Rows of one device call: all `rows` (padded), or fewer when a budget is set.

        With `cache_bytes`, the largest multiple of `batch_multiple` whose per-device
        KV cache (P + N slots per row, kv heads split over `tensor` when they divide)
        plus working memory (`work_bytes_per_row`, rows split over the batch shards)
        fits the budget, then evened out over the calls that `rows` needs (so the
        last call is not mostly idle rows).

        Args:
          rows: rows to sample (this process's).
          prompt_len: P, the context bucket; max_new_tokens: N.
        Returns:
          Rows per call, a multiple of `batch_multiple`.
        Raises:
          ValueError: the budget does not hold `batch_multiple` rows.
        """
        whole = -(-rows // self.batch_multiple) * self.batch_multiple
        if self.cache_bytes is None:
            return whole
        cfg = self.config
        slots = cache_slots(cfg, prompt_len, max_new_tokens)
        kv_row = kv_cache_bytes(cfg, 1, slots, self.cache_dtype)
        work_row = work_bytes_per_row(cfg, prompt_len, max_new_tokens)
        shards, heads = 1, 1
        if self.mesh is not None:
            shards, heads = sharding.batch_shards(self.mesh), kv_head_split(cfg, self.mesh)
        per_row = kv_row / heads + work_row  # on a device holding that row
        # This process's share of a call's rows (every process calls with as many).
        fit = int(self.cache_bytes * shards // (per_row * jax.process_count()))
        fit = fit // self.batch_multiple * self.batch_multiple
        if fit < self.batch_multiple:
            need = per_row * self.batch_multiple * jax.process_count() / shards
            raise ValueError(
                f"cache_bytes={self.cache_bytes:.4g} (rollout.cache_gib in a run config) holds "
                f"{fit} rows of P + N = {prompt_len} + {max_new_tokens} per call; one call "
                f"needs batch_multiple={self.batch_multiple} rows: {need:.4g} bytes per device "
                f"(KV cache {kv_row / heads:.4g} + work {work_row:.4g} per row)"
            )
        calls = -(-whole // fit)
        return -(-whole // (calls * self.batch_multiple)) * self.batch_multiple

    def _run(
        self,
        contexts,
        roles,
        lps,
        slps,
        ents,
        group,
        params,
        key,
        noise_rows,
        state,
        active,
        prev_stopped=None,
    ):
        cfg, n_new = self.config, params.max_new_tokens
        longest = max((len(c) for c in contexts), default=0)
        if not contexts or min(len(c) for c in contexts) == 0:
            raise ValueError("every row needs at least one context token")
        if longest + n_new > self.max_length:
            raise ValueError(
                f"context of {longest} tokens + max_new_tokens={n_new} exceeds the cache "
                f"limit of {self.max_length} positions"
            )
        for b, c in enumerate(contexts):
            bad = [t for t in c if not 0 <= t < cfg.vocab_size]
            if bad:
                raise ValueError(
                    f"row {b}: token id {bad[0]} outside vocabulary [0, {cfg.vocab_size})"
                )
        bsz = len(contexts)
        if noise_rows is not None and len(noise_rows) != bsz:
            raise ValueError(f"noise_rows has {len(noise_rows)} entries for {bsz} rows")
        p = min(_bucket(longest), self.max_length - n_new)
        chunk = self.rows_per_call(bsz, p, n_new)
        calls = -(-bsz // chunk)
        # Multi-process: one program over every host's rows, so all take the largest shape
        # and make as many calls.
        chunk, p, calls = (
            int(v) for v in distributed.max_over_processes(np.array([chunk, p, calls]))
        )
        use_noise = params.prompt_noise_sigma > 0 and noise_rows is not None and any(noise_rows)
        use_noise = bool(distributed.max_over_processes(np.array([use_noise]))[0])
        stop = np.full((MAX_STOP_IDS,), -1, np.int32)
        stop[: len(params.stop_token_ids)] = params.stop_token_ids
        done_all = np.zeros((bsz,), bool) if active is None else ~np.asarray(active, bool)
        sigma_all = np.zeros((bsz,), np.float32)
        if noise_rows is not None:
            sigma_all[np.asarray(noise_rows, bool)] = params.prompt_noise_sigma
        graphdef, current = nnx.split(self.model)
        # Per-row inputs: split over the batch axes when sampling on a mesh; in a
        # multi-process run each process's rows, concatenated over processes.
        if self.mesh is None:
            put, put_whole, fetch = jnp.asarray, jnp.asarray, np.asarray
        else:
            whole = sharding.replicated(self.mesh)
            put = functools.partial(distributed.host_local_to_global, mesh=self.mesh)
            put_whole = functools.partial(jax.device_put, device=whole)
            fetch = distributed.host_rows
            if jax.process_count() > 1:  # a key made on one device: the same on every host
                key = put_whole(np.asarray(key))
        outs = []
        for call in range(calls):
            lo, hi = min(call * chunk, bsz), min((call + 1) * chunk, bsz)
            ctx = np.full((chunk, p), self.pad_id, np.int32)
            role = np.full((chunk, p), -1, np.int8)  # -1 pad, 0 prompt, 1 forced, 2 sampled
            for b, c in enumerate(contexts[lo:hi]):
                ctx[b, p - len(c) :] = c
                role[b, p - len(c) :] = roles[lo + b]
            done0 = np.ones((chunk,), bool)  # idle rows at the end
            done0[: hi - lo] = done_all[lo:hi]
            sigma = np.zeros((chunk,), np.float32)
            sigma[: hi - lo] = sigma_all[lo:hi]
            gen = self._generate(
                current if state is None else state,
                put(ctx),
                put(role >= 0),
                key if calls == 1 else jax.random.fold_in(key, call),
                put(np.full((chunk,), params.temperature, np.float32)),
                put(np.full((chunk,), params.top_k, np.int32)),
                put(np.full((chunk,), params.top_p, np.float32)),
                put_whole(stop),
                put(sigma),
                put(done0),
                put_whole(np.int32(self.pad_id)),
                graphdef=graphdef,
                max_new_tokens=n_new,
                noise_layer=params.prompt_noise_layer if use_noise else None,
                cache_dtype=self.cache_dtype,
            )
            outs.append([fetch(x)[: hi - lo] for x in gen])
            outs[-1] += [ctx[: hi - lo], role[: hi - lo]]
        tok, valid, lp, slp, ent, stopped, ctx, role = (
            np.concatenate(parts) for parts in zip(*outs, strict=True)
        )
        ctx_f = np.zeros((3, bsz, p), np.float32)
        for b, c in enumerate(contexts):
            for i, src in enumerate((lps, slps, ents)):
                ctx_f[i, b, p - len(c) :] = src[b]
        sampled = role == 2
        return Rollout(
            tokens=np.concatenate([ctx, tok], axis=1),
            attention_mask=np.concatenate([role >= 0, valid], axis=1),
            prompt_mask=np.concatenate([role == 0, np.zeros_like(valid)], axis=1),
            response_mask=np.concatenate([sampled, valid], axis=1),
            logps=np.concatenate([np.where(sampled, ctx_f[0], 0), lp], axis=1),
            sampling_logps=np.concatenate([np.where(sampled, ctx_f[1], 0), slp], axis=1),
            entropy=np.concatenate([np.where(sampled, ctx_f[2], 0), ent], axis=1),
            group=np.asarray(group, np.int32),
            stopped=stopped if prev_stopped is None else np.where(done_all, prev_stopped, stopped),
        )
