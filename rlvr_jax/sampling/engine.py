"""A paged, continuous-batching rollout engine: S decode slots fed from a queue of rows.

The device side is `engine_step` (a decode step over S slots, a chunked
prefill, page copies); this module is the host scheduler around one
`PagePool` and one `PagedKVCache`:

  queue    rows wait in submission order; a preempted row goes back to the front.
  admit    while a slot is free and the head row's pages fit, the row takes the
           slot. A group's prompt (all but its last token) is prefilled once
           into a parent sequence and forked into each of its rows
           (`PagePool.fork`: full pages shared, the partial tail copied with
           `PagedKVCache.copy_pages` before any row writes); the parent is
           freed when the group's last row has forked. A row's own context
           past the fork point (forced prefix; for a resumed row its sampled
           tokens) is prefilled in chunks of C tokens over R lanes.
  decode   every active slot appends one page slot for the token it feeds; when
           the pool is out of pages the most recently admitted running row is
           preempted (pages freed, tokens kept: it is re-prefilled from prompt,
           prefix and sampled tokens when admitted again). Then one `decode`
           call feeds each row's last token and samples the next.
  finish   a row that samples a stop id or reaches its max_new_tokens frees its
           slot and pages at once, and the next waiting row is admitted.
  stream   `generate` runs a fixed list of rows; `start` / `submit` / `step` /
           `close` keep the queue open, so a scheduler can submit rows while
           others decode (rows come out as in one call over all of them).

A row's context is never truncated: a request that cannot fit the whole pool
raises at submission (`PagePool.check_fits`), and any other eventually runs
alone if it must. Row r's j-th draw is keyed by (key, r, j) only
(`engine_step.row_keys`), so outputs do not depend on slots, admission order
or preemption; this differs from `Sampler`, whose draws are keyed by step and
batch position, so only greedy outputs agree with it.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlvr_jax.models.paged_attention import NULL_PAGE
from rlvr_jax.models.paged_forward import PagedKVCache
from rlvr_jax.models.transformer import Transformer
from rlvr_jax.sampling import engine_step
from rlvr_jax.sampling.engine_rollout import (
    Request,
    RowResult,
    check_requests,
)
from rlvr_jax.sampling.generate import MAX_STOP_IDS
from rlvr_jax.sampling.pages import PagePool

__all__ = ["Engine", "EngineStats", "Request", "RowResult"]


@dataclasses.dataclass
class EngineStats:
    """Counters of the last `generate` call (what the engine did, for tests and logs)."""

    prefill_calls: int = 0  # prefill_chunk programs run
    prefill_tokens: int = 0  # context tokens written by prefill
    decode_steps: int = 0  # decode programs run
    preemptions: int = 0  # rows evicted for pages
    page_copies: int = 0  # copy-on-write pages of forks
    prefill_lane_tokens: int = 0  # token positions the prefill programs computed
    active_slot_steps: int = 0  # decode slots that fed a row, summed over steps
    decode_seconds: float = 0.0  # host wall time in decode calls and their result sync

    def idle_slot_steps(self, slots: int) -> int:
        """Decode slot-steps that fed no row (S x steps - active)."""
        return slots * self.decode_steps - self.active_slot_steps


@dataclasses.dataclass(eq=False)
class _Row:
    req: Request
    context: list[int]  # prompt + prefix + sampled tokens
    out: RowResult
    admitted: int = -1  # admission counter of the current stay in a slot
    started: bool = False  # admitted at least once

    @property
    def seq(self):
        return ("row", self.req.row_id)


@dataclasses.dataclass(eq=False)
class _Run:
    """The host state of one run (a `generate` call, or `start` ... `close`)."""

    fn_args: dict  # static arguments of the device programs (graphdef, block_pages, kernel)
    state: object  # model state
    key: jax.Array
    slots: list  # [S] _Row or None
    waiting: collections.deque  # rows to admit, head first
    unforked: collections.Counter  # group -> rows not started yet
    parents: dict = dataclasses.field(default_factory=dict)  # group -> fork length
    admissions: int = 0
    row_ids: set = dataclasses.field(default_factory=set)  # row ids submitted
    group_prompts: dict = dataclasses.field(default_factory=dict)  # group -> its prompt


def _noise(requests, lanes: int) -> engine_step.Noise:
    """The Noise inputs of `lanes` program lanes holding `requests` (None: a clean lane,
    a group's parent or an idle one)."""
    row_id, until = np.zeros((lanes,), np.int32), np.zeros((lanes,), np.int32)
    sigma = np.zeros((lanes,), np.float32)
    for i, q in enumerate(requests):
        if q is not None and q.noise_sigma > 0:
            row_id[i], sigma[i] = q.row_id, q.noise_sigma
            until[i] = len(q.prompt) + len(q.prefix)  # noise on context positions only
    return engine_step.Noise(row_id, sigma, until)


def _pow2(n: int, minimum: int = 1) -> int:
    """The smallest power of two >= max(n, minimum)."""
    return 1 << max(0, max(n, minimum) - 1).bit_length()


class Engine:
    """Samples rows through a paged KV cache with continuous batching.

    Usage (a Rollout of `Sampler.sample`'s layout: `Sampler(model, engine="paged")`):
      engine = Engine(model, num_pages=4096, page_size=16, slots=64)
      results = engine.generate([Request.of(b, prompt, group, (), params), ...], key)
    """

    def __init__(
        self,
        model: Transformer,
        *,
        num_pages: int,
        page_size: int,
        slots: int,
        max_length: int | None = None,
        prefill_chunk: int = 64,
        prefill_rows: int | None = None,
        pad_id: int = 0,
        cache_dtype: str | None = None,
        block_pages: int = 2,
        kernel: str = "jax",
    ):
        """Args:
        model: the policy; its current weights are used at every call.
        num_pages: usable pages of the pool (the store has num_pages + 1).
        page_size: Z, token slots per page.
        slots: S, rows decoded together (the decode program's batch).
        max_length: longest context + generation (default: max_position_embeddings);
          sets the page-table width M = ceil(max_length / Z).
        prefill_chunk: C, context tokens per row per prefill call.
        prefill_rows: R, rows per prefill call (default S).
        pad_id: token id of padding in the returned Rollout.
        cache_dtype: page store dtype ("bfloat16", "float32"; None: compute dtype).
        block_pages: pages per softmax block of paged attention. Each block gathers
          [S, block_pages] pages into one copy: on CPU small blocks keep it in cache
          (128 rows, 16-token pages: 2 pages 4.9-27 ms per layer for 100-700 cached
          tokens, 8 pages 24-68 ms; docs/benchmarks.md).
        kernel: paged attention kernel, "jax" (any backend) or "pallas" (TPU).
        """
        if slots < 1 or prefill_chunk < 1:
            raise ValueError(f"slots={slots} and prefill_chunk={prefill_chunk} must be >= 1")
        self.model, self.config, self.pad_id = model, model.config, pad_id
        self.pool = PagePool(num_pages, page_size)
        self.slots, self.chunk = slots, prefill_chunk
        self.prefill_rows = prefill_rows or slots
        self.max_length = max_length or self.config.max_position_embeddings
        self.table_width = self.pool.pages_for(self.max_length)
        self.block_pages = block_pages
        if kernel not in ("jax", "pallas"):
            raise ValueError(f"kernel={kernel!r} (rollout.paged_kernel); choose 'jax' or 'pallas'")
        self.kernel = kernel
        dtype = None if cache_dtype is None else jnp.dtype(cache_dtype)
        self.cache = PagedKVCache.zeros(self.config, self.pool.store_pages, page_size, dtype)
        self.stats = EngineStats()
        self._run: _Run | None = None  # the open run (`start` ... `close`)

    # ------------------------------------------------------------------ public
    def generate(
        self, requests: Sequence[Request], key: jax.Array, *, state=None, noise_layer=None
    ) -> dict:
        """Runs every request to its end (`start`, `submit`, `step` until none is
        pending, `close`).

        Args:
          requests: rows (distinct row ids); rows of one group share one prompt.
          key: PRNG key; row r's j-th draw uses (key, r, j) only.
          state: model state (default: the model's current state).
          noise_layer: the block after which noise rows (`Request.noise_sigma` > 0)
            get their latent noise (`engine_step.Noise`); None: no row may have any.
        Returns:
          {row_id: RowResult}.
        Raises:
          ValueError: a row is empty, too long for max_length, larger than the whole
            pool, has bad token ids, or repeats a row id; or a group's prompts differ.
        """
        check_requests(requests, self.pool, self.config.vocab_size, self.max_length)
        self.start(key, state=state, noise_layer=noise_layer)
        results = {}
        try:
            self.submit(requests)
            while self.pending:
                results.update(self.step())
        finally:
            self.close()
        return results

    # ------------------------------------------------------------ streaming
    # A run is a queue that stays open: `submit` adds rows at any time (a scheduler that
    # asks for more groups as earlier ones finish), `step` admits and decodes once and
    # returns the rows that ended in it. Rows come out as in one `generate` call over
    # all of them, whenever they were submitted: draws are keyed by (key, row id, j).
    def start(self, key: jax.Array, *, state=None, noise_layer: int | None = None) -> None:
        """Opens a run with PRNG key `key` on `state` (default: the model's current
        state), noise rows perturbed after block `noise_layer`; its queue is empty.
        Raises RuntimeError while another run is open."""
        if self._run is not None:
            raise RuntimeError("the engine already has an open run: close() it first")
        self.stats = EngineStats()
        graphdef, current = nnx.split(self.model)
        fn_args = dict(graphdef=graphdef, block_pages=self.block_pages, kernel=self.kernel)
        if noise_layer is not None:  # other programs: the default ones stay noise-free
            fn_args["noise_layer"] = int(noise_layer)
        self._run = _Run(
            fn_args=fn_args,
            state=current if state is None else state,
            key=key,
            slots=[None] * self.slots,
            waiting=collections.deque(),
            unforked=collections.Counter(),
        )

    def submit(self, requests: Sequence[Request]) -> None:
        """Appends rows to the open run's queue (after the rows already waiting).

        Raises ValueError (nothing is queued) for what `generate` refuses, and for a
        row id this run already has or a group whose prompt differs from the one it
        was first submitted with."""
        run = self._run
        if run is None:
            raise RuntimeError("no open run: start() one first")
        check_requests(requests, self.pool, self.config.vocab_size, self.max_length)
        for r in requests:
            if r.noise_sigma > 0 and "noise_layer" not in run.fn_args:
                raise ValueError(f"row {r.row_id} is a noise row; start the run with noise_layer")
            if r.row_id in run.row_ids:
                raise ValueError(f"row {r.row_id} was already submitted to this run")
            if run.group_prompts.get(r.group, r.prompt) != r.prompt:
                raise ValueError(f"row {r.row_id}: group {r.group} has another prompt")
        for r in requests:
            run.row_ids.add(r.row_id)
            run.group_prompts.setdefault(r.group, r.prompt)
            run.waiting.append(_Row(r, list(r.prompt) + list(r.prefix), RowResult()))
            run.unforked[r.group] += r.noise_sigma == 0  # noise rows never fork

    @property
    def pending(self) -> int:
        """Rows of the open run that are waiting or decoding (0 without a run)."""
        run = self._run
        return 0 if run is None else len(run.waiting) + sum(x is not None for x in run.slots)

    def step(self) -> dict:
        """Admits what fits, then one decode step: {row_id: RowResult} of the rows that
        ended in it ({} when nothing is pending, or the step only freed parents)."""
        run = self._run
        if run is None:
            raise RuntimeError("no open run: start() one first")
        if not self.pending:
            return {}
        self._admit()
        if not any(run.slots):
            if not run.parents:  # unreachable: check_fits holds every row alone
                raise RuntimeError("no row can be admitted into an empty pool")
            self._free_parents()  # parents of waiting groups block the head row
            return {}
        return {row.req.row_id: row.out for row in self._decode()}

    def close(self) -> None:
        """Ends the open run: rows still pending are dropped and every page is freed
        (the pool ends empty, also after an error)."""
        for seq in self.pool.sequences():
            self.pool.free(seq)
        self._run = None

    # ----------------------------------------------------------------- private
    def _fork_plan(self, row: _Row, free: int, planned: set) -> tuple[int | None, int]:
        """(fork length or None, new pages) to admit row now, one decode slot included.

        A row forks its group's parent when one exists (or is planned this round),
        or when it starts a group with rows still to start and parent plus fork fit
        in `free`; otherwise it prefills its whole context itself.
        """
        run = self._run
        pool, g = self.pool, row.req.group
        whole = pool.pages_for(len(row.context))
        if row.req.noise_sigma > 0:  # its noisy context is its own
            return None, whole
        have = g in run.parents or g in planned
        if have or (not row.started and run.unforked[g] > 1):
            f = len(row.req.prompt) - 1
            parent = 0 if have else pool.pages_for(f)
            own = int(f % pool.page_size > 0) + whole - pool.pages_for(f)
            if have or parent + own <= free or whole > free:
                return f, parent + own
        return None, whole

    def _admit(self):
        """Fills free slots from the queue head while its pages fit (FIFO, no skipping).

        Pages the running rows need for their next token are held back, so an
        admission does not force a preemption at the next step.
        """
        run = self._run
        pool, picked, planned = self.pool, [], set()
        running = filter(None, run.slots)
        budget = pool.num_free - sum(pool.pages_needed(row.seq, 1) for row in running)
        while run.waiting and len(picked) < run.slots.count(None):
            row = run.waiting[0]
            fork, need = self._fork_plan(row, budget, planned)
            if need > budget:
                break
            budget -= need
            picked.append((run.waiting.popleft(), fork))
            if fork is not None:
                planned.add(row.req.group)
        if not picked:
            return
        parents = []  # new parents: prefilled before anything forks from them
        for row, fork in picked:
            g = row.req.group
            if fork is not None and g not in run.parents:
                run.parents[g] = fork
                pool.add(("group", g), fork)
                parents.append((("group", g), list(row.req.prompt[:fork]), 0, None))
        self._prefill(parents)
        copies, own = [], []
        for row, fork in picked:
            g, start = row.req.group, fork or 0
            if fork is None:
                pool.add(row.seq, len(row.context) - 1)
            else:
                copy = pool.fork(("group", g), row.seq)
                copies += [copy] if copy is not None else []
                pool.append_tokens(row.seq, len(row.context) - 1 - fork)
            if not row.started:
                row.started = True
                run.unforked[g] -= row.req.noise_sigma == 0
            if run.unforked[g] == 0 and g in run.parents:
                del run.parents[g]
                pool.free(("group", g))
            own.append((row.seq, row.context[start:-1], start, row.req))
            slot = run.slots.index(None)
            run.slots[slot], row.admitted = row, run.admissions
            run.admissions += 1
        if copies:
            src = np.full((self.slots,), NULL_PAGE, np.int32)
            dst = src.copy()
            src[: len(copies)], dst[: len(copies)] = zip(*copies, strict=True)
            self.cache = engine_step.copy_pages(self.cache, src, dst)
            self.stats.page_copies += len(copies)
        self._prefill(own)

    def _prefill(self, items):
        """Writes [(seq, tokens, start slot, its Request or None for a group's parent)]
        into their allocated pages, C tokens per lane (a noise row's with its noise)."""
        run = self._run
        todo = [[seq, toks, start, 0, req] for seq, toks, start, req in items if toks]
        noisy = "noise_layer" in run.fn_args
        while todo:
            lanes = todo[: self.prefill_rows]
            # Program shape: lanes and chunk rounded up to powers of two (capped at R and
            # C), so a call with a few short lanes does not pay for R x C tokens.
            r = min(self.prefill_rows, _pow2(len(lanes)))
            c = min(self.chunk, _pow2(max(len(t) - d for _, t, _, d, _ in lanes), minimum=8))
            tokens = np.zeros((r, c), np.int32)
            offset, n_new = np.zeros((r,), np.int32), np.zeros((r,), np.int32)
            for i, (_, toks, start, done, _) in enumerate(lanes):
                part = toks[done : done + c]
                tokens[i, : len(part)], offset[i], n_new[i] = part, start + done, len(part)
            seqs = [lane[0] for lane in lanes] + [None] * (r - len(lanes))
            table = self.pool.page_table_array(seqs, self.table_width)
            extra = (run.key, _noise([lane[4] for lane in lanes], r)) if noisy else ()
            self.cache = engine_step.prefill(
                run.state, self.cache, tokens, table, offset, n_new, *extra, **run.fn_args
            )
            self.stats.prefill_calls += 1
            self.stats.prefill_tokens += int(n_new.sum())
            self.stats.prefill_lane_tokens += r * c
            for lane, n in zip(lanes, n_new, strict=False):
                lane[3] += int(n)
            todo = [lane for lane in todo if lane[3] < len(lane[1])]

    def _preempt(self, row: _Row):
        run = self._run
        self.pool.free(row.seq)
        run.slots[run.slots.index(row)] = None
        run.waiting.appendleft(row)
        self.stats.preemptions += 1

    def _decode(self) -> list[_Row]:
        """One decode step over the slots; returns the rows that finished."""
        run = self._run
        pool = self.pool
        for row in sorted(filter(None, run.slots), key=lambda x: x.admitted):
            while row in run.slots and not pool.can_allocate(1, row.seq):
                self._preempt(max(filter(None, run.slots), key=lambda x: x.admitted))
            if row in run.slots:
                pool.append_tokens(row.seq, 1)
        s = self.slots
        tok, pos, row_id, index = (np.zeros((s,), np.int32) for _ in range(4))
        active = np.zeros((s,), bool)
        temp, top_p = np.zeros((s,), np.float32), np.ones((s,), np.float32)
        top_k, stop = np.zeros((s,), np.int32), np.full((s, MAX_STOP_IDS), -1, np.int32)
        for i, row in enumerate(run.slots):
            if row is None:
                continue
            q = row.req
            tok[i], pos[i], active[i] = row.context[-1], len(row.context) - 1, True
            row_id[i], index[i] = q.row_id, len(row.out.tokens)
            temp[i], top_k[i], top_p[i] = q.temperature, q.top_k, q.top_p
            stop[i, : len(q.stop_token_ids)] = q.stop_token_ids
        seqs = [None if row is None else row.seq for row in run.slots]
        table = pool.page_table_array(seqs, self.table_width)
        noise = ()
        if "noise_layer" in run.fn_args:
            noise = (_noise([None if row is None else row.req for row in run.slots], s),)
        start = time.perf_counter()
        self.cache, out = engine_step.decode(
            run.state, self.cache, tok, table, pos, active, run.key, row_id, index,
            temp, top_k, top_p, stop, *noise, **run.fn_args,
        )  # fmt: skip
        out = [np.asarray(x) for x in out]  # the step's one host sync
        self.stats.decode_steps += 1
        self.stats.decode_seconds += time.perf_counter() - start
        self.stats.active_slot_steps += int(active.sum())
        finished = []
        for i, row in enumerate(run.slots):
            if row is None:
                continue
            t, lp, slp, ent, stopped = (x[i] for x in out)
            row.out.append(int(t), float(lp), float(slp), float(ent))
            row.context.append(int(t))
            if stopped or len(row.out.tokens) == row.req.max_new_tokens:
                row.out.stopped = bool(stopped)
                pool.free(row.seq)
                run.slots[i] = None
                finished.append(row)
        return finished

    def _free_parents(self):
        run = self._run
        for g in list(run.parents):
            del run.parents[g]
            self.pool.free(("group", g))
