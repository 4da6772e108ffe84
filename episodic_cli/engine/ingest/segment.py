"""Surprise-based event segmentation (EM-LLM 3.2) with size bounds, clean cut points and boundary refinement (3.3).

1. Candidate boundaries: token t starts a new event when its surprise exceeds mu + gamma * sigma of the `tau`
   preceding tokens (EM-LLM eq. 1). By default surprise is measured only where an event may start (the clean cuts
   below): the lm_head over a 150k-word vocabulary for every token cost 10% of the answer model's prefill
   (docs/benchmarks.md, "What every token's logits cost"); unmeasured tokens hold NaN and take no part.
2. Cut points are snapped to the nearest sentence or line end, so citations and excerpts read cleanly.
3. Event sizes are held within [min_tokens, max_tokens] (the seeds found 200-500-token units retrieve best); an
   event of code may end sooner (at least MIN_CODE_TOKENS) so that the next definition stays whole.
4. Refinement (Algorithm 1, line 8): the surprise cut beta may move back to the cut in [start + min_tokens, beta]
   (clean cuts only, when there are any) that best splits the key-similarity graph of the tokens
   [start, start + max_tokens) in two: highest modularity (eq. 3) or lowest conductance (eq. 4), in O(max_tokens x
   key width) per event. The keys come in through a callable, so this module stays pure numpy; the ingest pass
   reads them from the live KV cache.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import numpy as np

from .code_cuts import MIN_CODE_TOKENS, cut_choices
from .sliding_array import SlidingArray

REFINE_METHODS = ("modularity", "conductance", "none")
CODE_CUTS = ("definitions", "surprise")  # code files: cut between definitions and statements, or as prose
SURPRISE_AT = ("clean", "every")  # measure surprise where an event may start, or at every token (EM-LLM as written)

# keys_of(a, b): one row per token a..b-1 whose dot products are the similarity graph A (EM-LLM eq. 2).
KeysOf = Callable[[int, int], np.ndarray]
# cut_costs(start, a, b): the cost of each cut a..b of the event that begins at `start` (code_cuts.py).
CutCosts = Callable[[int, int, int], np.ndarray]


@dataclass(frozen=True)
class SegmentParams:
    gamma: float = 1.0        # threshold scale (EM-LLM eq. 1)
    tau: int = 128            # window of preceding tokens for mu and sigma
    min_tokens: int = 160
    max_tokens: int = 448
    snap_radius: int = 48     # how far a boundary may move to reach a sentence or line end
    local: int = 640          # ingest pass: preceding tokens every token sees at least, besides the sink
    refine: str = "modularity"  # boundary refinement objective (EM-LLM 3.3): modularity, conductance or none
    code_cuts: str = "definitions"  # code: events end between definitions and statements (code_cuts.py)
    surprise_at: str = "clean"  # where surprise is measured: the clean cuts only, or every token (SURPRISE_AT)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_recorded(cls, recorded: dict) -> "SegmentParams":
        """The parameters a store recorded. Stores written before refinement existed have no `refine`: their events
        were cut without it, so they read as "none"; likewise code cut before `code_cuts` was cut by surprise alone,
        and surprise was measured at every token before `surprise_at`. Keys added by newer versions are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{"refine": "none", "code_cuts": "surprise", "surprise_at": "every",
                      **{k: v for k, v in recorded.items() if k in names}})

    def validate(self) -> None:
        if not 16 <= self.min_tokens <= self.max_tokens:
            raise ValueError("need 16 <= min_tokens <= max_tokens")
        if self.tau < 2:
            raise ValueError("tau must be at least 2")
        if self.local < 1:
            raise ValueError("local must be at least 1")
        if self.refine not in REFINE_METHODS:
            raise ValueError(f"refine must be one of {', '.join(REFINE_METHODS)}")
        if self.code_cuts not in CODE_CUTS:
            raise ValueError(f"code_cuts must be one of {', '.join(CODE_CUTS)}")
        if self.surprise_at not in SURPRISE_AT:
            raise ValueError(f"surprise_at must be one of {', '.join(SURPRISE_AT)}")


def surprise_candidates(surprise: np.ndarray, gamma: float, tau: int) -> np.ndarray:
    """Indices t >= 1 with surprise[t] > mean(surprise[t-tau:t]) + gamma * std(surprise[t-tau:t]).
    NaN marks a token whose surprise was not measured: it is never a candidate and takes no part in the statistics.
    Early tokens use the shorter window they have (at least 2 measured values). Vectorised with cumulative sums."""
    s = surprise.astype(np.float64)
    n = len(s)
    if n < 3:
        return np.zeros(0, dtype=np.int64)
    measured = ~np.isnan(s)
    s = np.where(measured, s, 0.0)
    c0 = np.concatenate([[0], np.cumsum(measured)])
    c1 = np.concatenate([[0.0], np.cumsum(s)])
    c2 = np.concatenate([[0.0], np.cumsum(s * s)])
    t = np.arange(2, n)
    lo = np.maximum(0, t - tau)
    cnt = c0[t] - c0[lo]
    enough = measured[t] & (cnt >= 2)
    t, lo, cnt = t[enough], lo[enough], cnt[enough]
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


def split_scores(keys: np.ndarray, method: str) -> np.ndarray:
    """score[c], c = 0..N, of splitting tokens [0, N) into [0, c) and [c, N) on the graph A = keys @ keys.T
    (EM-LLM eq. 2, dot-product similarity): modularity (eq. 3, higher is better) or conductance (eq. 4 with
    vol(S) = the weight inside S, lower is better; inf where a side has no positive volume).

    A is never formed: with P_c the sum of the first c keys and T the sum of all, the weight inside [0, c) is
    |P_c|^2, inside [c, N) |T - P_c|^2, between them P_c . (T - P_c), and the degrees of [0, c) sum to P_c . T. So
    every cut costs O(d) after one prefix sum, O(N d) in all (Appendix C.1 budgets O(N^2) for this)."""
    k = np.asarray(keys, dtype=np.float64)
    prefix = np.concatenate([np.zeros((1, k.shape[1])), np.cumsum(k, axis=0)])
    total_keys = prefix[-1]
    rest = total_keys - prefix
    inside = np.einsum("cd,cd->c", prefix, prefix)
    inside_right = np.einsum("cd,cd->c", rest, rest)
    cut = np.einsum("cd,cd->c", prefix, rest)
    total = float(total_keys @ total_keys)
    if method == "modularity":
        if total <= 0.0:
            return np.zeros(len(inside))
        degree_left = inside + cut
        expected = (degree_left**2 + (total - degree_left) ** 2) / total
        return (inside + inside_right - expected) / (2.0 * total)  # eq. 3's 1/(4m), with 2m = total weight
    if method == "conductance":
        volume = np.minimum(inside, inside_right)
        scores = np.full(len(inside), np.inf)
        np.divide(cut, volume, out=scores, where=volume > 0.0)
        return scores
    raise ValueError(f"unknown refinement objective {method!r}")


def refine_cut(keys: np.ndarray, cuts: np.ndarray, method: str) -> int:
    """The cut among `cuts` (row offsets into `keys`, each in 1..N) whose split scores best. Ties go to the latest
    cut, so a graph without structure keeps the surprise cut (the last candidate)."""
    scores = split_scores(keys, method)[cuts]
    if method == "conductance":
        scores = -scores
    return int(cuts[np.flatnonzero(scores == scores.max())[-1]])


def _snap(pos: int, marks: np.ndarray, lo: int, hi: int, radius: int) -> int | None:
    """The marked cut (marks[q - lo] for q in [lo, hi]) nearest to `pos` within `radius`; None if there is none."""
    best = None
    for d in range(radius + 1):
        for q in (pos - d, pos + d):
            if lo <= q <= hi and marks[q - lo]:
                best = q
                break
        if best is not None:
            return best
    return None


class StreamingSegmenter:
    """Decides event boundaries as surprise values arrive, so the ingest pass can capture each event's KV block while
    it is still in the sliding window. The decision for an event depends only on tokens up to start + max_tokens and
    on the document length n (known up front), so cutting in a stream gives the same events as cutting at the end.

    `surprise` is the document's surprise array, filled in by the caller up to the `known` index it passes.
    `keys_of(start, start + max_tokens)` is asked once per refined event, when that event is decided.
    `cut_costs` (code files, code_cuts.py) narrows each event's cuts to those that break the fewest definitions and
    statements; surprise and refinement choose among them.
    `surprise` and `clean` may be SlidingArrays that hold only a window of the document: the segmenter reads nothing
    before `needs_from()`, so the caller may release what lies before it (and its own candidate marks go too)."""

    def __init__(self, surprise: np.ndarray, clean: np.ndarray, params: SegmentParams, keys_of: KeysOf | None = None,
                 cut_costs: CutCosts | None = None):
        self.surprise = surprise
        self.clean = clean
        self.params = params
        self.keys_of = keys_of if params.refine != "none" else None
        self.cut_costs = cut_costs
        self.n = len(surprise)
        self.candidate = SlidingArray(self.n + 1, bool)
        self._scored = 0        # candidates are final for t < _scored
        self.start = 0          # start of the event not yet decided

    def _score(self, known: int) -> None:
        if known <= self._scored:
            return
        lo = max(0, self._scored - self.params.tau)
        found = surprise_candidates(self.surprise[lo:known], self.params.gamma, self.params.tau) + lo
        self.candidate[found[found >= self._scored]] = True
        self._scored = known

    def needs_from(self) -> int:
        """The first token whose surprise, clean mark or candidate mark a later decision may read: the undecided
        event's start, or the scoring window (tau values before the first unscored token) if that reaches further
        back. Candidate marks before it are released here."""
        first = max(0, min(self.start, self._scored - self.params.tau))
        self.candidate.release_before(self.start)
        return first

    def state(self) -> tuple[int, int, list[int]]:
        """What a checkpoint keeps: the undecided event's start, how far candidates are scored, and the candidates
        from the start on (the decisions ahead read nothing before the start)."""
        found = np.flatnonzero(self.candidate[self.start : self._scored]) + self.start
        return self.start, self._scored, [int(t) for t in found]

    def restore(self, start: int, scored: int, candidates: list[int]) -> None:
        """Continue from `state()` (the caller restores the surprise values the scoring window reads: from
        min(start, scored - tau))."""
        self.start, self._scored = start, scored
        self.candidate = SlidingArray(self.n + 1, bool)
        self.candidate.release_before(start)
        self.candidate[np.asarray(candidates, dtype=np.int64)] = True

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
        p, s, n = self.params, self.start, self.n
        lo, hi = s + p.min_tokens, min(s + p.max_tokens, n - p.min_tokens)
        if self.cut_costs is not None:
            cut = self._code_cut(lo, hi)
            if cut is not None:
                return cut
        if hi < lo:  # the remainder cannot hold two events of min size; split it evenly
            return s + (n - s) // 2
        return self._refine(lo, self._surprise_cut(lo, hi))

    def _code_cut(self, lo: int, hi: int) -> int | None:
        """The cut of an event of code (code_cuts.py): only the line starts in [lo, hi] that break the least stay
        candidates, or an earlier one when all of those would break a definition or statement that fits in an event.
        None when no line starts in range (the prose rules then apply)."""
        s, n = self.start, self.n
        if hi < lo:  # the remainder cannot hold two events of min size: cut where the structure allows
            lo, hi = s + MIN_CODE_TOKENS, min(s + self.params.max_tokens, n - MIN_CODE_TOKENS)
            if hi < lo:
                return None
        early_from = min(s + MIN_CODE_TOKENS, lo)
        choice = cut_choices(self.cut_costs(s, early_from, hi), lo, hi, early_from)
        if choice is None or isinstance(choice, int):
            return choice
        return self._refine(lo, self._surprise_cut(lo, hi, choice), choice)

    def _surprise_cut(self, lo: int, hi: int, marks: np.ndarray | None = None) -> int:
        """The most surprising candidate in [lo, hi] snapped to a marked cut (`marks` over lo..hi, default the clean
        cuts)."""
        p, surprise = self.params, self.surprise
        marks = np.asarray(self.clean[lo : hi + 1], dtype=bool) if marks is None else marks
        window = np.flatnonzero(self.candidate[lo : hi + 1]) + lo
        # The most surprising candidate in range wins (EM-LLM keeps the peaks); then snap it to a clean end.
        for c in window[np.argsort(-surprise[window], kind="stable")]:
            cut = _snap(int(c), marks, lo, hi, p.snap_radius)
            if cut is not None:
                return cut
        # No surprise peak in range: the latest clean cut keeps events large, else a hard cut.
        clean_in = np.flatnonzero(marks)
        return int(clean_in[-1] + lo) if len(clean_in) else hi

    def _refine(self, lo: int, beta: int, marks: np.ndarray | None = None) -> int:
        """EM-LLM Algorithm 1, line 8, within epi's bounds. beta is a clean cut whenever [lo, hi] holds one, so the
        clean candidates are never empty then. The graph spans the tokens an event may hold, [s, s + max_tokens),
        all still in the ingest window, so the decision stays independent of how the surprise values arrived."""
        if self.keys_of is None:
            return beta
        s = self.start
        span = np.arange(lo, beta + 1)
        marks = np.asarray(self.clean[lo : beta + 1], dtype=bool) if marks is None else marks[: beta - lo + 1]
        clean = span[marks]
        cuts = clean if len(clean) else span
        if len(cuts) < 2:
            return beta
        keys = self.keys_of(s, s + self.params.max_tokens)
        return s + refine_cut(keys, cuts - s, self.params.refine)


def segment(
    surprise: np.ndarray,
    clean: np.ndarray,
    params: SegmentParams,
    keys: np.ndarray | None = None,
    cut_costs: CutCosts | None = None,
) -> list[tuple[int, int]]:
    """Split one document's tokens into events [(start, end), ...] covering 0..n without gaps; `keys` (one row per
    token) turns on refinement as `params.refine` says; `cut_costs` makes cuts follow code structure.

    Every event has min_tokens <= size <= max_tokens, except a document shorter than min_tokens (one event), a
    final remainder that cannot be merged without exceeding max_tokens, and an event of code cut short (at least
    MIN_CODE_TOKENS) to keep the next definition whole."""
    n = len(surprise)
    if n == 0:
        return []
    keys_of = None if keys is None else (lambda a, b: keys[a:b])
    return StreamingSegmenter(surprise, clean, params, keys_of, cut_costs).advance(n)
