"""A per-token array of a whole document, indexed by absolute token position, that holds only a window of it.

The ingest pass reads and writes per-token values (tokens, character offsets, clean-cut marks, surprise, candidate
boundaries) only near where it stands: the batch being decoded and the undecided event behind it. Keeping the whole
document's arrays made `epi ingest`'s memory grow with the document (~25 bytes a token); this keeps the live span
only, so code written against a whole-document numpy array (`a[i]`, `a[i:j]`, `a[index_array]`, assignment to
those) works unchanged, with positions from 0 to `len(a)` = the document's length.

Reading a position that was released (`release_before`) raises IndexError: that is a bug in the caller's idea of
what it still needs, and must not read stale values silently. Positions never written read as zero.
"""
from __future__ import annotations

import numpy as np

MIN_CAPACITY = 4096


class SlidingArray:
    def __init__(self, length: int, dtype, fill_to=None):
        self._length = int(length)
        self._buf = np.zeros(min(MIN_CAPACITY, max(self._length, 1)), dtype=dtype)
        self._base = 0          # absolute position of _buf[0]
        self._live_from = 0     # positions before this were released
        # fill_to(stop): called before a read that reaches `stop`, so a producer (the tokenizer) can write ahead.
        self._fill_to = fill_to

    def __len__(self) -> int:
        return self._length

    @property
    def dtype(self):
        return self._buf.dtype

    @property
    def live_from(self) -> int:
        return self._live_from

    @property
    def nbytes(self) -> int:
        """Bytes held now (the window's buffer), not the document's length."""
        return self._buf.nbytes

    def release_before(self, position: int) -> None:
        """Values before `position` will not be read again; their memory is reused."""
        self._live_from = max(self._live_from, min(int(position), self._length))

    # -- indexing ---------------------------------------------------------------------------------------------------

    def __getitem__(self, index):
        local = self._local(index, writing=False)  # first: it may fill or move _buf
        value = self._buf[local]
        return value.copy() if isinstance(value, np.ndarray) else value

    def __setitem__(self, index, value) -> None:
        local = self._local(index, writing=True)  # first: it may move _buf (`self._buf[...] = ` would read it before)
        self._buf[local] = value

    def _local(self, index, writing: bool):
        """`index` (absolute) as an index into _buf, after making room for it (writes) or filling it (reads)."""
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step != 1:
                raise IndexError("SlidingArray slices take no step")
            stop = max(stop, start)
            lo, hi = start, stop
        elif isinstance(index, np.ndarray):
            index = index.astype(np.int64, copy=False)
            if index.size == 0:
                return index
            lo, hi = int(index.min()), int(index.max()) + 1
        else:
            lo = int(index)
            hi = lo + 1
        if lo < self._live_from and hi > lo:
            raise IndexError(f"position {lo} was released (live from {self._live_from})")
        if hi > self._length or lo < 0:
            raise IndexError(f"positions {lo}..{hi} outside 0..{self._length}")
        if not writing and self._fill_to is not None:
            self._fill_to(hi)
        self._make_room(hi)
        if isinstance(index, slice):
            return slice(lo - self._base, hi - self._base)
        return index - self._base

    def _make_room(self, stop: int) -> None:
        """Make _buf cover [live_from, stop): drop released values first, grow only if the live span needs it."""
        if stop - self._base <= len(self._buf):
            return
        keep = self._buf[self._live_from - self._base :]
        need = stop - self._live_from
        if need <= len(self._buf):
            buf = self._buf
            buf[: len(keep)] = keep  # overlapping move; numpy copies through a buffer when views overlap
            buf[len(keep) :] = 0
        else:
            buf = np.zeros(max(need, 2 * len(self._buf)), dtype=self._buf.dtype)
            buf[: len(keep)] = keep
        self._buf, self._base = buf, self._live_from
