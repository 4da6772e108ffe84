"""Giving the C heap's free memory back to the operating system during a long ingest (glibc only; a no-op elsewhere).

Measured with bench/memory/ingest_rss_causes.py (docs/benchmarks.md): while one long document was ingested, the bytes
malloc had handed out stayed flat (170-230 MB) but the free bytes it kept inside its heaps grew without end (145 ->
275 MB from 15k to 129k tokens) and VmRSS with them (720 -> 920 MB). The per-event buffers above malloc's initial
mmap threshold (KV state reads, numpy temporaries, embedding activations) come from the heap once glibc has raised
that threshold to the largest such buffer freed (up to 32 MB); their slightly different sizes each time leave holes
that long-lived allocations in between keep from being reused or handed back. Fewer arenas (MALLOC_ARENA_MAX=2) did
not help; a fixed threshold (MALLOC_MMAP_THRESHOLD_=131072) kept the heap flat (152-154 MB) but maps and zeroes
fresh pages for every large temporary. `malloc_trim(0)` returns every whole free page inside the heaps (madvise),
whatever pins their top; epi calls it after each committed group of events and after each document (~0.5 ms).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

_trim = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _trim = getattr(_libc, "malloc_trim", None)  # glibc; musl has no such function
    except OSError:
        _trim = None
    if _trim is not None:
        _trim.argtypes = [ctypes.c_size_t]
        _trim.restype = ctypes.c_int


def release_free_memory() -> None:
    """Return the C heap's free pages to the operating system (cheap next to a committed group of events)."""
    if _trim is not None:
        _trim(0)
