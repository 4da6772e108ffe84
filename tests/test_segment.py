"""Surprise segmentation (pure numpy): EM-LLM eq. 1 against a brute-force loop, and properties of segment()."""
from __future__ import annotations

import numpy as np
import pytest

from episodic_cli.engine.segment import SegmentParams, clean_cut_mask, segment, surprise_candidates


def brute_force_candidates(s: np.ndarray, gamma: float, tau: int) -> list[int]:
    """EM-LLM eq. 1 written as the paper states it: t is a boundary when surprise[t] > mu + gamma * sigma of the
    (up to) tau preceding tokens; a window needs at least 2 tokens."""
    out = []
    for t in range(len(s)):
        window = s[max(0, t - tau) : t].astype(np.float64)
        if len(window) < 2:
            continue
        if s[t] > window.mean() + gamma * window.std():
            out.append(t)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gamma,tau", [(1.0, 128), (0.5, 16), (2.0, 3), (0.0, 2), (1.5, 1000)])
def test_surprise_candidates_match_brute_force(seed, gamma, tau):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 700))
    # Surprise-like values: mostly small, heavy right tail, with a slow drift.
    s = (rng.gamma(2.0, 1.5, n) + np.linspace(0, 3, n) * rng.random()).astype(np.float32)
    got = surprise_candidates(s, gamma, tau).tolist()
    assert got == brute_force_candidates(s, gamma, tau)


def test_surprise_candidates_short_inputs():
    assert surprise_candidates(np.array([], dtype=np.float32), 1.0, 8).tolist() == []
    assert surprise_candidates(np.array([1.0, 9.0], dtype=np.float32), 1.0, 8).tolist() == []
    assert surprise_candidates(np.array([1.0, 2.0, 9.0], dtype=np.float32), 1.0, 8).tolist() == [2]


# ------------------------------------------------------------------------------------------- segment()


def _check_segmentation(spans, surprise, clean, p: SegmentParams):
    n = len(surprise)
    if n == 0:
        assert spans == []
        return
    # Contiguous cover of [0, n) without gaps or empty events.
    assert spans[0][0] == 0 and spans[-1][1] == n
    for (a, b), (c, _) in zip(spans, spans[1:]):
        assert b == c
    assert all(b > a for a, b in spans)
    sizes = [b - a for a, b in spans]
    assert max(sizes) <= p.max_tokens
    if n <= p.max_tokens:
        assert spans == [(0, n)]  # includes the "document shorter than min_tokens -> one event" exception
        return
    # Sizes below min_tokens only in the documented remainder case: the last two events, split evenly from a
    # remainder too short for two full events.
    for i, size in enumerate(sizes):
        if size < p.min_tokens:
            assert i >= len(sizes) - 2, (i, sizes)
            a = spans[-2][0]
            assert n - a < 2 * p.min_tokens and abs(sizes[-1] - sizes[-2]) <= 1, sizes
    if p.max_tokens >= 2 * p.min_tokens:
        assert min(sizes) >= p.min_tokens, sizes
    # Every cut is a clean position unless the allowed range held none.
    for (s, cut) in spans[:-1]:
        lo, hi = s + p.min_tokens, min(s + p.max_tokens, n - p.min_tokens)
        if hi < lo:
            continue  # even split of a short remainder: position forced
        assert lo <= cut <= hi
        if not clean[cut]:
            assert not clean[lo : hi + 1].any(), (s, cut, lo, hi)


@pytest.mark.parametrize("seed", range(40))
def test_segment_properties_on_random_inputs(seed):
    rng = np.random.default_rng(1000 + seed)
    min_t = int(rng.integers(16, 200))
    max_t = int(rng.integers(min_t, 3 * min_t + 40))
    p = SegmentParams(gamma=float(rng.uniform(0, 2.5)), tau=int(rng.integers(2, 200)), min_tokens=min_t,
                      max_tokens=max_t, snap_radius=int(rng.integers(0, 64)))
    n = int(rng.integers(0, 4000))
    surprise = rng.gamma(2.0, 1.5, n).astype(np.float32)
    density = rng.choice([0.0, 0.005, 0.05, 0.3, 1.0])
    clean = rng.random(n + 1) < density
    clean[0] = clean[n] = True
    spans = segment(surprise, clean, p)
    _check_segmentation(spans, surprise, clean, p)


def test_short_document_is_one_event():
    p = SegmentParams(min_tokens=160, max_tokens=448)
    s = np.random.default_rng(0).gamma(2.0, 1.5, 50).astype(np.float32)
    assert segment(s, np.ones(51, dtype=bool), p) == [(0, 50)]
    assert segment(np.zeros(0, dtype=np.float32), np.ones(1, dtype=bool), p) == []


def _flat(n: int, seed: int = 0) -> np.ndarray:
    return (1.0 + 0.05 * np.random.default_rng(seed).random(n)).astype(np.float32)


def test_surprise_spike_in_range_becomes_the_boundary():
    p = SegmentParams(min_tokens=100, max_tokens=300, tau=64, snap_radius=10)
    s = _flat(1000)
    s[237] = 50.0
    clean = np.ones(1001, dtype=bool)
    spans = segment(s, clean, p)
    assert spans[0] == (0, 237)


def test_highest_spike_wins_and_snaps_to_nearest_clean_end():
    p = SegmentParams(min_tokens=100, max_tokens=300, tau=64, snap_radius=10)
    s = _flat(1000)
    s[150] = 20.0
    s[260] = 60.0
    clean = np.zeros(1001, dtype=bool)
    clean[[0, 1000, 120, 155, 264, 280]] = True
    spans = segment(s, clean, p)
    assert spans[0] == (0, 264)  # the larger spike (260) snapped to the nearest clean end within 10 tokens


def test_spike_outside_allowed_range_is_not_a_cut():
    p = SegmentParams(min_tokens=100, max_tokens=300, tau=64, snap_radius=0)
    s = _flat(1000)
    s[40] = 80.0  # inside the first min_tokens: would make a too-small event
    clean = np.ones(1001, dtype=bool)
    spans = segment(s, clean, p)
    assert spans[0][1] != 40 and 100 <= spans[0][1] <= 300


def test_no_clean_position_gives_hard_cut_at_max():
    p = SegmentParams(min_tokens=50, max_tokens=120, tau=32, snap_radius=5)
    s = _flat(600)
    clean = np.zeros(601, dtype=bool)
    clean[0] = clean[600] = True
    spans = segment(s, clean, p)
    assert spans[0] == (0, 120)
    _check_segmentation(spans, s, clean, p)


# ---------------------------------------------------------------------------------------- clean_cut_mask


def test_clean_cut_mask_sentence_and_line_ends():
    mask = clean_cut_mask([b"Hello", b".", b" World", b"\n", b"x"])
    assert mask.tolist() == [True, False, True, False, True, True]


@pytest.mark.parametrize(
    "prev,nxt,expected",
    [
        (b" end.", b" Next", True),
        (b"e.g", b" x", False),      # no sentence end
        (b".", b"x", False),         # period not followed by whitespace (e.g. "3.14", "a.b")
        (b'."', b" He", True),       # closing quote after a period
        (b"?", b"\n", True),
        (b" (see above)", b" x", False),  # a closing parenthesis alone does not end a sentence
        (b" end.)", b" x", True),
        (b" done;", b" then", True),
        (b" word", b"\n", False),    # the newline token itself is not a boundary before it
        (b"line \t\n", b"x", True),  # a line end with trailing blanks
    ],
)
def test_clean_cut_mask_cases(prev, nxt, expected):
    mask = clean_cut_mask([prev, nxt])
    assert mask[0] and mask[2]
    assert bool(mask[1]) is expected
