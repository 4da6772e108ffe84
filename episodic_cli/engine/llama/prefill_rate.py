"""How many tokens a second this machine prefills with a model: timed on real prefills of cold events and kept in
the cache, so that a question can size what it reads from text to the time it may take."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..paths import cache_dir

MIN_TOKENS = 128  # shorter prefills are mostly fixed costs: not worth a measurement
# Before a model has been timed here: cold prefills measured on 2 idle cores (docs/benchmarks.md, "Answer
# models"), ~290 tokens/s at 135M parameters, falling with the square root of the parameter count (0.6B: ~140,
# 1.8B: ~80).
GUESS_TOKENS_PER_S_AT_135M = 290.0
GUESS_EXPONENT = 0.5


def _path() -> Path:
    return cache_dir() / "prefill-rates.json"


def _key(model_sha256: str, threads: int) -> str:
    return f"{model_sha256[:16]}-{threads}"


def _read() -> dict:
    try:
        return json.loads(_path().read_text())
    except (OSError, ValueError):
        return {}


def rate(model_sha256: str, threads: int, n_params: int) -> float:
    """Tokens per second: as last measured with this model and thread count, or a guess from its size."""
    known = _read().get(_key(model_sha256, threads))
    if isinstance(known, (int, float)) and known > 0:
        return float(known)
    return GUESS_TOKENS_PER_S_AT_135M * (135e6 / max(n_params, 1)) ** GUESS_EXPONENT


def record(model_sha256: str, threads: int, tokens: int, seconds: float) -> None:
    """Fold one timed prefill into the kept rate (the mean of the old and the new); best effort, any process."""
    if tokens < MIN_TOKENS or seconds <= 0:
        return
    rates = _read()
    key = _key(model_sha256, threads)
    measured = tokens / seconds
    old = rates.get(key)
    rates[key] = round(measured if not isinstance(old, (int, float)) else (old + measured) / 2, 2)
    try:
        _path().parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".prefill-rates.", suffix=".tmp", dir=_path().parent)
        with os.fdopen(fd, "w") as f:
            json.dump(rates, f)
        os.replace(tmp, _path())
    except OSError:
        pass
