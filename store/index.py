"""hnswlib cosine index over event embeddings: a derived cache that can always be rebuilt from SQLite."""

from __future__ import annotations

import os
import struct
import time
import zlib
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
# The index file's CRC-32 and size, beside it: hnswlib loads a file whose bytes were swapped or overwritten and then
# crashes the process in a search (its links point anywhere), so a file that differs from its sum is not loaded.
SUM_SUFFIX = ".crc32"


def sum_path(path: Path) -> Path:
    return path.with_name(path.name + SUM_SUFFIX)


def data_sum(data: bytes) -> str:
    """'<crc32> <size>' of an index file's bytes (~0.1 s for the ~80 MB index of a 10M-token archive)."""
    return f"{zlib.crc32(data):08x} {len(data)}"


def recorded_sum(path: Path) -> str | None:
    """The sum saved beside the index file; None when there is none (an index saved by an older epi)."""
    try:
        return sum_path(path).read_text().strip()
    except FileNotFoundError:
        return None
    except OSError:
        return ""


def intact(path: Path, dim: int) -> bool:
    """Whether the index file matches its sum (when one is recorded) and is well formed. Read twice before saying
    no: a writer replaces the sum, then the file."""
    for attempt in range(2):
        try:
            recorded, data = recorded_sum(path), path.read_bytes()
        except OSError:
            return False
        if (recorded is None or recorded == data_sum(data)) and well_formed(data, dim):
            return True
        if attempt == 0:
            time.sleep(0.05)
    return False


_HEADER = struct.Struct("<6Q i I 3Q d Q")  # hnswlib 0.8's saveIndex header (hnswalg.h)


def well_formed(data: bytes, dim: int) -> bool:
    """Whether an hnswlib index file's header, element records and links are consistent: every link count within its
    level's maximum, every link an element of the index, the levels as the header says. hnswlib checks none of it
    and follows a damaged link out of its arrays (a segmentation fault in the next search)."""
    if len(data) < _HEADER.size:
        return False
    (offset0, max_elements, count, per_element, label_offset, data_offset, max_level, entry, max_m, max_m0, _m, _mult,
     _ef) = _HEADER.unpack_from(data, 0)
    if (offset0 != 0 or data_offset != 4 * (max_m0 + 1) or label_offset != data_offset + 4 * dim
            or per_element != label_offset + 8 or count > max_elements or max_m0 > 1 << 16 or max_m > 1 << 16):
        return False
    level0_end = _HEADER.size + count * per_element
    if len(data) < level0_end:
        return False
    if count == 0:
        return len(data) == level0_end
    if not 0 <= max_level < 64 or entry >= count:
        return False
    level0 = np.frombuffer(data, dtype=np.uint32, count=count * per_element // 4, offset=_HEADER.size)
    level0 = level0.reshape(count, per_element // 4)
    n_links = level0[:, 0] & 0xFFFF
    links = level0[:, 1 : max_m0 + 1]
    if (n_links > max_m0).any() or (links[np.arange(max_m0) < n_links[:, None]] >= count).any():
        return False
    per_level = 4 * (max_m + 1)
    at, top = level0_end, -1
    for i in range(count):
        if at + 4 > len(data):
            return False
        size = int.from_bytes(data[at : at + 4], "little")
        at += 4
        if size % per_level or size // per_level > max_level or at + size > len(data):
            return False
        if size:
            lists = np.frombuffer(data, dtype=np.uint32, count=size // 4, offset=at).reshape(-1, max_m + 1)
            n = lists[:, 0] & 0xFFFF
            if (n > max_m).any() or (lists[:, 1:][np.arange(max_m) < n[:, None]] >= count).any():
                return False
        if i == entry:
            top = size // per_level
        at += size
    return at == len(data) and top == max_level


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
        for _ in range(3):  # the file checked is the file loaded, unless a writer replaced it meanwhile: again
            try:
                before = os.stat(path)
            except OSError:
                return None
            if not intact(path, dim):
                return None
            index = hnswlib.Index(space="cosine", dim=dim)
            try:
                index.load_index(str(path))
                after = os.stat(path)
            except (RuntimeError, MemoryError, OSError, ValueError):
                return None
            if (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns):
                return cls(path, dim, index, set())
        return None

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
        """Write to a temporary file and rename, so readers never see a half-written index; its sum goes first (a
        crash between the two leaves a file that differs from it: rebuilt from SQLite at the next open)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        sum_tmp = self.path.with_name(f".{self.path.name}{SUM_SUFFIX}.{os.getpid()}.tmp")
        try:
            self._index.save_index(str(tmp))
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            sum_tmp.write_text(data_sum(tmp.read_bytes()) + "\n")
            os.replace(sum_tmp, sum_path(self.path))
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
            sum_tmp.unlink(missing_ok=True)
