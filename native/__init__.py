"""Native kernels for epi's hot paths. Each kernel has a numpy twin in `reference.py` that the tests compare against."""
from __future__ import annotations

import numpy as np

from ._kernels import surprise as _surprise


def surprise_at(logits_address: int, n_rows: int, n_vocab: int, targets: np.ndarray) -> np.ndarray:
    """-log p(target | row) for each of `n_rows` float32 logit rows starting at `logits_address` (no copy of the rows)."""
    targets = np.ascontiguousarray(targets, dtype=np.int32)
    if targets.shape != (n_rows,):
        raise ValueError(f"targets must have shape ({n_rows},), got {targets.shape}")
    if n_rows and (targets.min() < 0 or targets.max() >= n_vocab):
        raise ValueError("target token id outside the vocabulary")
    out = np.empty(n_rows, dtype=np.float32)
    if n_rows:
        _surprise(logits_address, n_rows, n_vocab, targets, out)
    return out


def surprise(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Same as `surprise_at` for a [n_rows, n_vocab] float32 array (used by tests and benchmarks)."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    return surprise_at(logits.ctypes.data, logits.shape[0], logits.shape[1], targets)
