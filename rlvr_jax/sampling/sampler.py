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

import concurrent.futures
import contextlib
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax import distributed, sharding
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.sampling.engine import Engine
from rlvr_jax.sampling.engine_rollout import Request, generated_arrays
from rlvr_jax.sampling.generate import (
    MAX_STOP_IDS,
    cache_slots,
    generate,
    kv_cache_bytes,
    kv_head_split,
    work_bytes_per_row,
)
from rlvr_jax.sampling.pages import pages_for_budget
from rlvr_jax.sampling.rows import (
    Generated,
    Rollout,
    SamplingParams,
    assemble_rollout,
    context_bucket,
)

__all__ = ["ENGINES", "Rollout", "Sampler", "SamplingParams"]

# Sampling paths: "static" (one dense-cache program per call, every row kept to the
# longest) and "paged" (`sampling.engine.Engine`: paged KV cache, continuous batching,
# one prefill per group).
ENGINES = ("static", "paged")


def _weights_mesh(model) -> jax.sharding.Mesh:
    """The mesh the model's weights live on (a multi-process sampler must run on it)."""
    for leaf in jax.tree.leaves(nnx.state(model)):
        if isinstance(getattr(leaf, "sharding", None), jax.sharding.NamedSharding):
            return leaf.sharding.mesh
    raise ValueError(
        "a multi-process Sampler needs mesh= or a model whose weights are sharded on a mesh"
    )


def _replicated(mesh: jax.sharding.Mesh) -> bool:
    """The mesh keeps whole weights on every device (only its data axis splits)."""
    return all(mesh.shape[a] == 1 for a in sharding.AXES if a != "data")


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
        engine: str = "static",
        page_size: int = 16,
        decode_slots: int = 64,
        prefill_chunk: int = 64,
        paged_kernel: str = "jax",
        paged_block_pages: int = 2,
        paged_prefill_rows: int | None = None,
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
        engine: "static" or "paged" (`ENGINES`). The paged engine samples (noise rows
          too: each prefills its own noisy context, `engine_step.Noise`) on one device, or
          data-parallel on a mesh whose weights are replicated (fsdp = tensor = 1):
          one engine per local device of the mesh, a call's groups spread over them,
          each process sampling its own rows (`_paged_generate`). Each engine's page
          pool is `cache_bytes` of pages (None: enough for every slot to hold a
          max_length row).
        page_size: Z, token slots per page (paged).
        decode_slots: S, rows decoded together (paged).
        prefill_chunk: C, context tokens per row per prefill call (paged).
        paged_kernel: the engine's attention over pages, "jax" or "pallas" (TPU).
        paged_block_pages: pages per softmax block of the "jax" kernel (`Engine`).
        paged_prefill_rows: R, rows per prefill call (paged; None: the decode slots).
        """
        if engine not in ENGINES:
            raise ValueError(f"engine={engine!r} (rollout.engine); choose one of {ENGINES}")
        if mesh is None and jax.process_count() > 1:
            mesh = _weights_mesh(model)
        if engine == "paged" and mesh is not None and not _replicated(mesh):
            raise ValueError(
                f"engine='paged' (rollout.engine) runs data-parallel engines with the whole "
                f"weights on each device; mesh {dict(mesh.shape)} splits them (fsdp or "
                "tensor > 1): use mesh.shape = (devices, 1, 1) or engine='static'"
            )
        self.engine, self.page_size = engine, page_size
        self.decode_slots, self.prefill_chunk = decode_slots, prefill_chunk
        self.paged_kernel, self.paged_block_pages = paged_kernel, paged_block_pages
        self.paged_prefill_rows = paged_prefill_rows
        self._paged = {}  # device -> its Engine, built at the first paged call
        if cache_dtype not in (None, "float32", "bfloat16"):
            raise ValueError(f"cache_dtype={cache_dtype!r}; choose None, 'float32' or 'bfloat16'")
        if cache_bytes is not None and cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be positive, got {cache_bytes}")
        self.cache_bytes, self.cache_dtype = cache_bytes, cache_dtype
        if batch_multiple < 1:
            raise ValueError(f"batch_multiple must be >= 1, got {batch_multiple}")
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
            engine=self.engine,
            page_size=self.page_size,
            decode_slots=self.decode_slots,
            prefill_chunk=self.prefill_chunk,
            paged_kernel=self.paged_kernel,
            paged_block_pages=self.paged_block_pages,
            paged_prefill_rows=self.paged_prefill_rows,
        )

    def engine_devices(self) -> list:
        """The devices this process's paged engines run on: the mesh's local devices, or
        [None] without a mesh (one engine, on the default device when it is built)."""
        if self.mesh is None:
            return [None]
        mine = set(jax.local_devices())
        return [d for d in self.mesh.devices.flat if d in mine]

    def paged_engine(self, device=None):
        """The paged `Engine` on `device` (default: the first of `engine_devices`), built
        once: its pool and programs persist."""
        device = device or self.engine_devices()[0]
        if device not in self._paged:
            cfg, z = self.config, self.page_size
            if self.cache_bytes is None:
                num = self.decode_slots * -(-self.max_length // z)
            else:
                dtype = jnp.dtype(self.cache_dtype or cfg.dtype)
                num = pages_for_budget(
                    self.cache_bytes, z, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim,
                    dtype.itemsize,
                )  # fmt: skip
            where = contextlib.nullcontext() if device is None else jax.default_device(device)
            with where:  # its page store lives on `device`
                self._paged[device] = Engine(
                    self.model,
                    num_pages=num,
                    page_size=z,
                    slots=self.decode_slots,
                    max_length=self.max_length,
                    prefill_chunk=self.prefill_chunk,
                    prefill_rows=self.paged_prefill_rows,
                    pad_id=self.pad_id,
                    cache_dtype=self.cache_dtype,
                    kernel=self.paged_kernel,
                    block_pages=self.paged_block_pages,
                )
        return self._paged[device]

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        key: jax.Array,
        *,
        prefixes: Sequence[Sequence[int]] | None = None,
        noise_rows: Sequence[bool] | None = None,
        state=None,
        row_ids: Sequence[int] | None = None,
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
          row_ids: the paged engine only: per row (len = rows), a distinct id in
            [0, 2**31) that keys the row's draws, which then depend on neither the
            other rows nor the row's position (the engine's keying); None: row b
            has id b.
        Returns:
          Rollout with B = len(prompts) * n rows.
        """
        rows = [list(p) for p in prompts for _ in range(params.n)]
        if row_ids is not None:
            if self.engine != "paged":
                raise ValueError("row_ids key the paged engine's draws; this sampler is "
                                 f"engine={self.engine!r}")  # fmt: skip
            if len(row_ids) != len(rows) or len(set(row_ids)) != len(rows):
                raise ValueError(f"row_ids: {len(rows)} distinct ids needed (prompts x n), "
                                 f"got {len(row_ids)} ({len(set(row_ids))} distinct)")  # fmt: skip
        group = np.repeat(np.arange(len(prompts), dtype=np.int32), params.n)
        if prefixes is not None and len(prefixes) != len(rows):
            raise ValueError(f"got {len(prefixes)} prefixes for {len(rows)} rows (prompts x n)")
        forced = [list(p) for p in prefixes] if prefixes is not None else [[] for _ in rows]
        roles = [[0] * len(r) + [1] * len(f) for r, f in zip(rows, forced, strict=True)]
        contexts = [r + f for r, f in zip(rows, forced, strict=True)]
        zeros = [np.zeros(len(c), np.float32) for c in contexts]
        return self._run(
            contexts,
            roles,
            zeros,
            zeros,
            zeros,
            group,
            params,
            key,
            noise_rows,
            state,
            None,
            shared_prompt=[len(r) for r in rows],
            row_ids=row_ids,
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
        shared_prompt=None,
        row_ids=None,
    ):
        """Checks the rows, generates them on the static or paged path, assembles the Rollout.

        shared_prompt: per row, the length of its group's shared prompt (sample: the
        prompt, prefilled once per group by the paged engine); None: no sharing.
        """
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
        p = min(context_bucket(longest), self.max_length - n_new)
        use_noise = params.prompt_noise_sigma > 0 and noise_rows is not None and any(noise_rows)
        use_noise = bool(distributed.max_over_processes(np.array([use_noise]))[0])
        done_all = np.zeros((bsz,), bool) if active is None else ~np.asarray(active, bool)
        if self.engine == "paged":
            noisy = noise_rows if use_noise else None
            gen = self._paged_generate(
                contexts, group, shared_prompt, params, key, done_all, state, row_ids, noisy
            )
        else:
            gen, p = self._static_generate(
                contexts, p, params, key, noise_rows, use_noise, done_all, state
            )
        return assemble_rollout(
            contexts,
            roles,
            (lps, slps, ents),
            group,
            p,
            self.pad_id,
            gen,
            prev_stopped,
            done_all if prev_stopped is not None else None,
        )

    def _paged_generate(
        self, contexts, group, shared_prompt, params, key, done_all, state, row_ids=None,
        noise_rows=None,
    ):  # fmt: skip
        """The rows' generated regions from the paged engines (carried rows generate nothing).

        Row b is the engines' row `row_ids[b]` (default: b plus the rows of the processes
        before this one), which alone keys its draws: the rows come out the same on one
        engine or several, in any process. A call's groups are dealt to this process's
        engines (one per local device, `engine_devices`), each to the one with the
        fewest rows so far, and the engines run at once, each in its own thread on its
        own copy of the weights."""
        if row_ids is None:
            counts = distributed.allgather_objects(len(contexts))
            offset = int(sum(counts[: jax.process_index()]))
            ids = [offset + b for b in range(len(contexts))]
        else:
            ids = [int(r) for r in row_ids]
        by_group: dict[int, list] = {}
        for b, c in enumerate(contexts):
            if done_all[b]:
                continue
            cut = len(c) if shared_prompt is None else shared_prompt[b]
            # A continuation's rows share nothing: each is its own group.
            row_group = int(group[b]) if shared_prompt is not None else b
            noisy = noise_rows is not None and bool(noise_rows[b])
            req = Request.of(ids[b], c[:cut], row_group, c[cut:], params, noise=noisy)
            by_group.setdefault(row_group, []).append(req)
        devices = self.engine_devices()
        shares = [[] for _ in devices]
        for reqs in by_group.values():  # each group to the engine with the fewest rows
            min(shares, key=len).extend(reqs)
        if state is None:
            state = nnx.split(self.model)[1]
        jobs = [(d, reqs) for d, reqs in zip(devices, shares, strict=True) if reqs]

        layer = params.prompt_noise_layer if noise_rows is not None else None

        def run(job):
            device, reqs = job
            local = state if device is None else jax.device_put(state, device)
            return self.paged_engine(device).generate(reqs, key, state=local, noise_layer=layer)

        if len(jobs) <= 1:
            outs = [run(j) for j in jobs]
        else:
            with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
                outs = list(pool.map(run, jobs))
        results = {r: res for out in outs for r, res in out.items()}
        by_row = {b: results[r] for b, r in enumerate(ids) if r in results}
        return generated_arrays(len(contexts), by_row, params.max_new_tokens, self.pad_id)

    def _static_generate(self, contexts, p, params, key, noise_rows, use_noise, done_all, state):
        """The rows' generated regions from the dense-cache program, in calls of equal rows."""
        n_new, bsz = params.max_new_tokens, len(contexts)
        chunk = self.rows_per_call(bsz, p, n_new)
        calls = -(-bsz // chunk)
        # Multi-process: one program over every host's rows, so all take the largest shape
        # and make as many calls.
        chunk, p, calls = (
            int(v) for v in distributed.max_over_processes(np.array([chunk, p, calls]))
        )
        stop = np.full((MAX_STOP_IDS,), -1, np.int32)
        stop[: len(params.stop_token_ids)] = params.stop_token_ids
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
            real = np.zeros((chunk, p), bool)
            for b, c in enumerate(contexts[lo:hi]):
                ctx[b, p - len(c) :] = c
                real[b, p - len(c) :] = True
            done0 = np.ones((chunk,), bool)  # idle rows at the end
            done0[: hi - lo] = done_all[lo:hi]
            sigma = np.zeros((chunk,), np.float32)
            sigma[: hi - lo] = sigma_all[lo:hi]
            gen = self._generate(
                current if state is None else state,
                put(ctx),
                put(real),
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
        parts = (np.concatenate(part) for part in zip(*outs, strict=True))
        return Generated(*parts), p
