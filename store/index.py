"""hnswlib cosine index over event embeddings: a derived cache that can always be rebuilt from SQLite."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import hnswlib
import numpy as np

M = 16
EF_CONSTRUCTION = 200
MIN_EF = 64
MIN_CAPACITY = 1024
CATCH_UP_BATCH = 10_000
# float32 round-off of normalizing a 384-d unit vector twice is ~1e-7; a damaged or moved vector differs by far more.
VECTOR_TOLERANCE = 1e-4


class DenseIndex:
    def __init__(self, path: Path, dim: int, index: hnswlib.Index, deleted: set[int]):
        self.path = path
        self.dim = dim
        self._index = index
        # hnswlib cannot list its deleted labels, so we track them (and re-derive them on load).
        self._deleted = deleted

    @classmethod
    def empty(cls, path: Path, dim: int, capacity: int = 0) -> "DenseIndex":
        index = hnswlib.Index(space="cosine", dim=dim)
        index.init_index(max_elements=max(MIN_CAPACITY, capacity), ef_construction=EF_CONSTRUCTION, M=M)
        return cls(path, dim, index, set())

    @classmethod
    def load(cls, path: Path, dim: int) -> "DenseIndex | None":
        """The saved index, or None if it is missing, unreadable or of another dimension. Which of its labels are
        deleted is learnt by `catch_up` (hnswlib cannot list them)."""
        if not path.is_file():
            return None
        index = hnswlib.Index(space="cosine", dim=dim)
        try:
            index.load_index(str(path))
        except (RuntimeError, MemoryError, OSError, ValueError):
            return None
        return cls(path, dim, index, set())

    def catch_up(self, expected_ids: set[int],
                 vectors_of: Callable[[list[int]], tuple[np.ndarray, np.ndarray]]) -> int:
        """Make the live labels equal `expected_ids` (SQLite's event ids) by adding what is missing and deleting
        what is gone: O(changes), not O(archive), so a saved index that lags the database (a writer saves it only
        now and then; a crash before a save) costs its readers only the events added or removed since. Event ids
        are never reused, so a label SQLite no longer has is a removed event. Returns how many labels changed."""
        labels = set(self._index.get_ids_list())
        changed = 0
        for label in labels - expected_ids - self._deleted:
            try:
                self._index.mark_deleted(label)
                changed += 1
            except RuntimeError:  # saved already marked deleted
                pass
            self._deleted.add(label)
        missing = sorted(expected_ids - labels)
        for start in range(0, len(missing), CATCH_UP_BATCH):
            ids, vectors = vectors_of(missing[start : start + CATCH_UP_BATCH])
            self.add(ids, vectors)
        return changed + len(missing)

    @property
    def n_live(self) -> int:
        return self._index.get_current_count() - len(self._deleted)

    @property
    def n_deleted(self) -> int:
        return len(self._deleted)

    def live_ids(self) -> set[int]:
        return set(self._index.get_ids_list()) - self._deleted

    def differing(self, ids: np.ndarray, vectors: np.ndarray) -> list[int]:
        """Which of `ids` the index holds with another vector than `vectors` (SQLite's): a label moved to another
        element, a vector overwritten. hnswlib keeps cosine vectors normalized, so they are compared normalized."""
        if not len(ids):
            return []
        held = np.asarray(self._index.get_items(ids, return_type="numpy"), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        expected = vectors / np.where(norms > 0, norms, 1)
        bad = np.abs(held - expected).max(axis=1) > VECTOR_TOLERANCE
        return [int(i) for i in ids[bad]]

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        needed = self._index.get_current_count() + len(ids)
        if needed > self._index.get_max_elements():
            self._index.resize_index(max(needed, 2 * self._index.get_max_elements()))
        self._index.add_items(vectors, ids)

    def remove(self, ids: list[int]) -> None:
        present = set(self._index.get_ids_list())
        for label in ids:
            if label in present and label not in self._deleted:
                self._index.mark_deleted(label)
                self._deleted.add(label)

    def search(self, query: np.ndarray, k: int, allowed: set[int] | None = None) -> list[tuple[int, float]]:
        """The k nearest live labels; with `allowed`, only labels in it (hnswlib's filtered search)."""
        k = min(k, self.n_live if allowed is None else len(allowed))
        if k <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(1, self.dim)
        keep = None if allowed is None else allowed.__contains__
        ef = max(MIN_EF, 2 * k)
        while k > 0:
            self._index.set_ef(ef)
            try:
                labels, distances = self._index.knn_query(q, k=k, filter=keep)
                break
            except RuntimeError:
                # Many deleted neighbours can leave fewer than k results reachable: widen the search, then give up k.
                if ef < self._index.get_current_count():
                    ef = self._index.get_current_count()
                else:
                    k -= 1
        else:
            return []
        return [(int(label), 1.0 - float(d)) for label, d in zip(labels[0], distances[0])]

    def save(self) -> None:
        """Write to a temporary file and rename, so readers never see a half-written index."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self._index.save_index(str(tmp))
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
