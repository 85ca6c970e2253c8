"""Host-side page allocator of a paged KV cache: page tables, reference counts, copy-on-write.

The device cache (models/paged_attention.py) is one store of fixed-size pages
of `page_size` (Z) token slots per layer. This module decides which page holds
which sequence's tokens; it never touches device memory. A sequence (any
hashable id) owns a page table, the list of its page ids in slot order, and a
length in tokens; slot s of a sequence is page `table[s // Z]`, offset `s % Z`.

Sharing. Pages carry reference counts. `fork` gives a new sequence the first
`length` tokens of another: every page those tokens fill completely is shared
(its count goes up), and the page holding a partial tail is copied at once
(copy-on-write done eagerly): `fork` returns the (source, destination) pair the
device must copy with `paged_attention.copy_pages` before the new sequence's
next write. So one prefill serves a group (prefill the prompt, fork it G
times), and a forced prefix branching from an earlier rollout shares that
rollout's pages up to the branch point.

Invariant: a page with a count above 1 is full in every sequence holding it.
Writes go only to slots at or past a sequence's length, which lie in its
partial last page (count 1) or in pages `append_tokens` just allocated, so no
page is ever written by two sequences. A page returns to the free list when its
count reaches 0 and is reused by later allocations (last freed, first reused).

Page 0 is `paged_attention.NULL_PAGE`, reserved: never allocated, padding of
`page_table_array`, target of idle rows' writes. A pool of `num_pages` usable
pages therefore needs a device store of `store_pages = num_pages + 1` pages.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np

from rlvr_jax.models.paged_attention import NULL_PAGE


class OutOfPages(RuntimeError):
    """Not enough free pages now; freeing (preempting) sequences may make room."""


class PageCopy(NamedTuple):
    """A page the device must copy (copy-on-write of a forked partial page)."""

    src: int
    dst: int


def page_bytes(
    page_size: int, num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int
) -> int:
    """Bytes of one page across every layer: keys and values of `page_size` slots."""
    return 2 * num_layers * num_kv_heads * head_dim * page_size * dtype_bytes


def _check_page_size(page_size: int) -> None:
    if page_size <= 0:
        raise ValueError(f"rollout.page_size must be positive, got {page_size}")


def pages_for_budget(
    budget_bytes: float,
    page_size: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int,
) -> int:
    """Usable pages a memory budget holds, after the reserved null page.

    Args:
      budget_bytes: KV cache budget on one device (rollout.cache_gib · 2**30).
      page_size: Z, token slots per page.
      num_layers, num_kv_heads, head_dim: the model's cache shape (kv heads on this device).
      dtype_bytes: bytes per cached element (2 for bf16).
    Returns:
      num_pages for `PagePool`: floor(budget / page bytes) - 1.
    Raises:
      ValueError: page_size <= 0, or the budget holds no usable page.
    """
    _check_page_size(page_size)
    per_page = page_bytes(page_size, num_layers, num_kv_heads, head_dim, dtype_bytes)
    if per_page <= 0:
        raise ValueError(
            f"page of {per_page} bytes: num_layers={num_layers}, num_kv_heads={num_kv_heads}, "
            f"head_dim={head_dim} and dtype_bytes={dtype_bytes} must be positive"
        )
    usable = int(budget_bytes // per_page) - 1
    if usable < 1:
        raise ValueError(
            f"rollout.cache_gib={budget_bytes / 2**30:.4g} ({budget_bytes:.6g} bytes) holds "
            f"{max(usable, 0)} pages: one page of rollout.page_size={page_size} tokens is "
            f"{per_page} bytes and the cache needs 2 (one usable page + the reserved null page)"
        )
    return usable


class PagePool:
    """Free list, reference counts and page tables of one paged KV cache.

    Usage (one group of G samples from one prompt of 37 tokens, Z = 16):
      pool = PagePool.from_budget(2**30, 16, num_layers=..., ...)
      pool.add("p", 37)                 # pages for the prompt; prefill writes them
      copies = [pool.fork("p", ("p", g)) for g in range(G)]  # device copies them
      pool.free("p")
      for each decode step: pool.append_tokens(seq, 1) per live row, write, attend
    """

    def __init__(self, num_pages: int, page_size: int):
        """Args:
        num_pages: usable pages (ids 1..num_pages; the store has num_pages + 1).
        page_size: Z, token slots per page.
        """
        _check_page_size(page_size)
        if num_pages < 1:
            raise ValueError(f"a page pool needs at least one page, got num_pages={num_pages}")
        self.num_pages, self.page_size = num_pages, page_size
        # Popped from the end: page 1 first; freed pages are pushed back and reused first.
        self._free = list(range(num_pages, NULL_PAGE, -1))
        self._refs = np.zeros(num_pages + 1, np.int32)
        self._tables: dict[Hashable, list[int]] = {}
        self._lengths: dict[Hashable, int] = {}

    @classmethod
    def from_budget(
        cls,
        budget_bytes: float,
        page_size: int,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype_bytes: int,
    ) -> PagePool:
        """A pool of as many pages as `budget_bytes` holds (see `pages_for_budget`)."""
        num = pages_for_budget(
            budget_bytes, page_size, num_layers, num_kv_heads, head_dim, dtype_bytes
        )
        return cls(num, page_size)

    # ------------------------------------------------------------------ queries
    @property
    def store_pages(self) -> int:
        """Leading dim of the device page store: the usable pages plus NULL_PAGE."""
        return self.num_pages + 1

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def capacity_tokens(self) -> int:
        return self.num_pages * self.page_size

    def pages_for(self, n_tokens: int) -> int:
        """Pages that hold n_tokens slots."""
        return -(-n_tokens // self.page_size)

    def __contains__(self, seq: Hashable) -> bool:
        return seq in self._tables

    def sequences(self) -> list[Hashable]:
        return list(self._tables)

    def page_table(self, seq: Hashable) -> list[int]:
        """A copy of seq's page ids in slot order."""
        return list(self._table(seq))

    def length(self, seq: Hashable) -> int:
        self._table(seq)
        return self._lengths[seq]

    def refcount(self, page: int) -> int:
        """Sequences holding `page` (0: free)."""
        return int(self._refs[page])

    def pages_needed(self, seq: Hashable, n: int) -> int:
        """New pages an `append_tokens(seq, n)` would allocate."""
        length, held = self.length(seq), len(self._tables[seq])
        return max(0, self.pages_for(length + n) - held)

    def can_allocate(self, n_tokens: int, seq: Hashable | None = None) -> bool:
        """Whether n_tokens fit now: in a new sequence, or appended to `seq` when given."""
        need = self.pages_for(n_tokens) if seq is None else self.pages_needed(seq, n_tokens)
        return need <= self.num_free

    def check_fits(self, row_id, length: int) -> None:
        """Raises ValueError when a request of `length` tokens can never fit the whole pool.

        Catch it before queueing a row: such a row would wait forever (no amount
        of preemption frees enough pages).
        """
        need = self.pages_for(length)
        if need > self.num_pages:
            raise ValueError(
                f"row {row_id}: {length} tokens need {need} pages of rollout.page_size="
                f"{self.page_size}, but the whole pool (the rollout.cache_gib budget) holds "
                f"{self.num_pages} pages = {self.capacity_tokens} tokens"
            )

    # ---------------------------------------------------------------- mutations
    def add(self, seq: Hashable, n_tokens: int = 0) -> list[int]:
        """Starts a sequence with room for n_tokens; returns its new page ids.

        Raises:
          KeyError: seq exists. OutOfPages: not enough free pages (nothing changes).
        """
        if seq in self._tables:
            raise KeyError(f"sequence {seq!r} already exists")
        if n_tokens < 0:
            raise ValueError(f"add needs n_tokens >= 0, got {n_tokens}")
        pages = self._take(self.pages_for(n_tokens), f"sequence {seq!r} of {n_tokens} tokens")
        self._tables[seq], self._lengths[seq] = pages, n_tokens
        return list(pages)

    def append_tokens(self, seq: Hashable, n: int) -> list[int]:
        """Grows seq by n tokens (slots length .. length + n - 1); returns the pages added.

        Raises:
          KeyError: unknown seq. OutOfPages: not enough free pages (nothing changes).
        """
        if n < 0:
            raise ValueError(f"append_tokens needs n >= 0, got {n}")
        new = self._take(self.pages_needed(seq, n), f"appending {n} tokens to {seq!r}")
        self._tables[seq].extend(new)
        self._lengths[seq] += n
        return new

    def fork(self, seq: Hashable, new_seq: Hashable, length: int | None = None) -> PageCopy | None:
        """Starts new_seq as the first `length` tokens of seq (default: all of them).

        Pages those tokens fill are shared; a partial tail page is copied to a
        fresh page of new_seq's own.

        Returns:
          The PageCopy the device must do before new_seq's next write, or None
          when `length` is a multiple of the page size.
        Raises:
          KeyError: unknown seq or existing new_seq. ValueError: length out of
          [0, seq's length]. OutOfPages: no free page for the copy (nothing changes).
        """
        table = self._table(seq)
        if new_seq in self._tables:
            raise KeyError(f"sequence {new_seq!r} already exists")
        length = self._lengths[seq] if length is None else length
        if not 0 <= length <= self._lengths[seq]:
            raise ValueError(f"fork length {length} outside [0, {self._lengths[seq]}] of {seq!r}")
        full, tail = divmod(length, self.page_size)
        copy = None
        own = []
        if tail:
            own = self._take(1, f"forking {seq!r} at {length} tokens")
            copy = PageCopy(table[full], own[0])
        shared = table[:full]
        self._refs[shared] += 1
        self._tables[new_seq], self._lengths[new_seq] = shared + own, length
        return copy

    def free(self, seq: Hashable) -> None:
        """Drops seq; each of its pages whose count reaches 0 returns to the free list."""
        for page in reversed(self._table(seq)):  # so the first page is the first reused
            self._refs[page] -= 1
            if self._refs[page] == 0:
                self._free.append(page)
        del self._tables[seq], self._lengths[seq]

    # ------------------------------------------------------------- device views
    def page_table_array(self, seqs: Sequence[Hashable | None], max_pages: int) -> np.ndarray:
        """int32 [S, max_pages] page tables, padded with NULL_PAGE; None gives an idle row.

        Raises:
          ValueError: a sequence holds more than max_pages pages.
        """
        out = np.full((len(seqs), max_pages), NULL_PAGE, np.int32)
        for i, seq in enumerate(seqs):
            if seq is None:
                continue
            table = self._table(seq)
            if len(table) > max_pages:
                raise ValueError(f"sequence {seq!r} holds {len(table)} pages > {max_pages}")
            out[i, : len(table)] = table
        return out

    def lengths_array(self, seqs: Sequence[Hashable | None]) -> np.ndarray:
        """int32 [S] lengths in tokens (0 for None, an idle row)."""
        return np.array([0 if s is None else self.length(s) for s in seqs], np.int32)

    # ------------------------------------------------------------------ private
    def _table(self, seq: Hashable) -> list[int]:
        try:
            return self._tables[seq]
        except KeyError:
            raise KeyError(f"unknown sequence {seq!r}") from None

    def _take(self, count: int, what: str) -> list[int]:
        """Pops `count` free pages (count 1 each), or raises OutOfPages taking none."""
        if count > len(self._free):
            raise OutOfPages(
                f"{what} needs {count} new pages; {len(self._free)} of {self.num_pages} are free"
            )
        pages = [self._free.pop() for _ in range(count)]
        self._refs[pages] = 1
        return pages
