"""Numpy reference implementations of the native kernels: the definition the C code is tested against."""
from __future__ import annotations

import numpy as np


def surprise(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row, computed in float64 (EM-LLM eq. 1's surprise)."""
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return (lse - x[np.arange(len(targets)), targets]).astype(np.float32)
