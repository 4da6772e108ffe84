"""Surprise-based event segmentation (EM-LLM section 3.2) with size bounds and clean cut points.

1. Candidate boundaries: token t starts a new event when its surprise exceeds mu + gamma * sigma of the `tau`
   preceding tokens (EM-LLM eq. 1).
2. Cut points are snapped to the nearest sentence or line end, so citations and excerpts read cleanly.
3. Event sizes are held within [min_tokens, max_tokens] (the seeds found 200-500-token units retrieve best).
4. A `BoundaryRefiner` may then move boundaries (EM-LLM 3.3, modularity/conductance over attention keys); it needs
   the KV blocks and arrives with kv mode, so the default refiner leaves boundaries unchanged.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class SegmentParams:
    gamma: float = 1.0        # threshold scale (EM-LLM eq. 1)
    tau: int = 128            # window of preceding tokens for mu and sigma
    min_tokens: int = 160
    max_tokens: int = 448
    snap_radius: int = 48     # how far a boundary may move to reach a sentence or line end
    n_sink: int = 128         # attention-sink tokens kept in the ingest window (EM-LLM 3.1)
    window: int = 2048        # the ingest pass's local window

    def as_dict(self) -> dict:
        return asdict(self)

    def validate(self) -> None:
        if not 16 <= self.min_tokens <= self.max_tokens:
            raise ValueError("need 16 <= min_tokens <= max_tokens")
        if self.tau < 2:
            raise ValueError("tau must be at least 2")


class BoundaryRefiner(Protocol):
    def __call__(self, boundaries: list[int], n_tokens: int) -> list[int]: ...


def keep_boundaries(boundaries: list[int], n_tokens: int) -> list[int]:
    return boundaries


def surprise_candidates(surprise: np.ndarray, gamma: float, tau: int) -> np.ndarray:
    """Indices t >= 1 with surprise[t] > mean(surprise[t-tau:t]) + gamma * std(surprise[t-tau:t]).
    Early tokens use the shorter window they have (at least 2 tokens). Vectorised with cumulative sums."""
    s = surprise.astype(np.float64)
    n = len(s)
    if n < 3:
        return np.zeros(0, dtype=np.int64)
    c1 = np.concatenate([[0.0], np.cumsum(s)])
    c2 = np.concatenate([[0.0], np.cumsum(s * s)])
    t = np.arange(2, n)
    lo = np.maximum(0, t - tau)
    cnt = t - lo
    mean = (c1[t] - c1[lo]) / cnt
    var = np.maximum((c2[t] - c2[lo]) / cnt - mean * mean, 0.0)
    over = s[t] > mean + gamma * np.sqrt(var)
    return t[over]


def clean_cut_mask(pieces: list[bytes]) -> np.ndarray:
    """mask[p] is True when an event may start at token p: token p-1 ends a line, or ends a sentence and token p
    starts with whitespace. mask[0] is True (a document start is always a boundary)."""
    n = len(pieces)
    mask = np.zeros(n + 1, dtype=bool)
    mask[0] = mask[n] = True
    for p in range(1, n):
        prev = pieces[p - 1]
        stripped = prev.rstrip(b" \t")
        if stripped.endswith(b"\n"):
            mask[p] = True
        elif stripped[-1:] in (b".", b"!", b"?", b'"', b")", b":", b";") and pieces[p][:1] in (b" ", b"\n", b"\t"):
            mask[p] = stripped.rstrip(b"\"')")[-1:] in (b".", b"!", b"?", b":", b";") or stripped.endswith(b".)")
    return mask


def _snap(pos: int, clean: np.ndarray, lo: int, hi: int, radius: int) -> int | None:
    """The clean cut nearest to `pos` within `radius`, restricted to [lo, hi]; None if there is none."""
    best = None
    for d in range(radius + 1):
        for q in (pos - d, pos + d):
            if lo <= q <= hi and clean[q]:
                best = q
                break
        if best is not None:
            return best
    return None


class StreamingSegmenter:
    """Decides event boundaries as surprise values arrive, so the ingest pass can capture each event's KV block while
    it is still in the sliding window. The decision for an event depends only on tokens up to start + max_tokens and
    on the document length n (known up front), so cutting in a stream gives the same events as cutting at the end.

    `surprise` is the document's surprise array, filled in by the caller up to the `known` index it passes."""

    def __init__(self, surprise: np.ndarray, clean: np.ndarray, params: SegmentParams):
        self.surprise = surprise
        self.clean = clean
        self.params = params
        self.n = len(surprise)
        self.candidate = np.zeros(self.n + 1, dtype=bool)
        self._scored = 0        # candidates are final for t < _scored
        self.start = 0          # start of the event not yet decided

    def _score(self, known: int) -> None:
        if known <= self._scored:
            return
        lo = max(0, self._scored - self.params.tau)
        found = surprise_candidates(self.surprise[lo:known], self.params.gamma, self.params.tau) + lo
        self.candidate[found[found >= self._scored]] = True
        self._scored = known

    def advance(self, known: int) -> list[tuple[int, int]]:
        """Events [(start, end), ...] that can be decided now that surprise[:known] is final (known == n: all)."""
        p = self.params
        self._score(known)
        events = []
        while self.n - self.start > p.max_tokens and known > self.start + p.max_tokens:
            cut = self._next_cut()
            events.append((self.start, cut))
            self.start = cut
        if known >= self.n and self.start < self.n:
            events.append((self.start, self.n))
            self.start = self.n
        return events

    def _next_cut(self) -> int:
        p, s, n, surprise = self.params, self.start, self.n, self.surprise
        lo, hi = s + p.min_tokens, min(s + p.max_tokens, n - p.min_tokens)
        if hi < lo:  # the remainder cannot hold two events of min size; split it evenly
            hi = lo = s + (n - s) // 2
        window = np.flatnonzero(self.candidate[lo : hi + 1]) + lo
        # The most surprising candidate in range wins (EM-LLM keeps the peaks); then snap it to a clean end.
        for c in window[np.argsort(-surprise[window], kind="stable")]:
            cut = _snap(int(c), self.clean, lo, hi, p.snap_radius)
            if cut is not None:
                return cut
        # No surprise peak in range: the latest clean cut keeps events large, else a hard cut.
        clean_in = np.flatnonzero(self.clean[lo : hi + 1])
        return int(clean_in[-1] + lo) if len(clean_in) else hi


def segment(
    surprise: np.ndarray,
    clean: np.ndarray,
    params: SegmentParams,
    refine: BoundaryRefiner = keep_boundaries,
) -> list[tuple[int, int]]:
    """Split one document's tokens into events [(start, end), ...] covering 0..n without gaps.

    Every event has min_tokens <= size <= max_tokens, except a document shorter than min_tokens (one event) and a
    final remainder that cannot be merged without exceeding max_tokens."""
    n = len(surprise)
    if n == 0:
        return []
    spans = StreamingSegmenter(surprise, clean, params).advance(n)
    starts = refine([a for a, _ in spans], n)
    bounds = starts + [n]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
