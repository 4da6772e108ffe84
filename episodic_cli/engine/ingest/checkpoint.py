"""What a resumed ingest of a long document needs, saved after each committed group of events.

A checkpoint is taken between two batches of the llama.cpp pass, right after a group of events was committed:
- the window (sink + recent tokens): llama.cpp's state of the pass's sequence, the very cells at the very positions,
  in a file `ingest/<document id>-<next token>.window` of the store (written atomically before the SQLite commit that
  names it, so a committed checkpoint always has its file; older files are removed after the commit);
- the pass's counters (`WindowState`), the segmenter's state (the undecided event's start, scored candidates) and the
  surprise values its decisions ahead still read, the number of events committed, and what the checkpoint is only
  valid for (document content, segmentation parameters, the model): JSON in `documents.checkpoint`.
Resuming restores the cells exactly instead of re-reading the window's text, so the tokens after the seam are
predicted from the same cache as in an uninterrupted run (see docs/how-it-works.md for what that buys).
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..llama.backend import WindowState

CHECKPOINT_VERSION = 1
SNAPSHOT_DIR = "ingest"


@dataclass(frozen=True)
class Checkpoint:
    window: WindowState
    n_events: int            # events committed so far (the next ordinal)
    segmenter_start: int
    scored: int
    candidates: list[int]
    surprise_from: int       # surprise[surprise_from : window.next_token + 1] is kept in `surprise`
    surprise: str            # base64 of float32 little-endian values
    valid_for: dict          # content sha256, token count, segmentation parameters, segmenter model
    # SHA-256 of the window file's bytes: a damaged file (a truncated one made the document fail on every run) is
    # not restored, and the document is read again from its start. Empty in checkpoints written before it.
    window_sha256: str = ""

    def to_json(self) -> str:
        data = asdict(self)
        data["version"] = CHECKPOINT_VERSION
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "Checkpoint | None":
        """None for no checkpoint, one of another version, or one that does not parse (the document starts over)."""
        if not text:
            return None
        try:
            data = json.loads(text)
            if data.pop("version", None) != CHECKPOINT_VERSION:
                return None
            data["window"] = WindowState(**data["window"])
            return cls(**data)
        except (ValueError, TypeError, KeyError):
            return None

    @staticmethod
    def pack_surprise(values: np.ndarray) -> str:
        return base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode()

    def unpack_surprise(self) -> np.ndarray:
        return np.frombuffer(base64.b64decode(self.surprise), dtype="<f4")


def snapshot_path(store_dir: Path, document_id: int, next_token: int) -> Path:
    return Path(store_dir) / SNAPSHOT_DIR / f"{document_id}-{next_token}.window"


def write_snapshot(path: Path, blob: bytes) -> None:
    """Atomically (temporary file, fsync, rename, directory fsync): a crash leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_snapshot(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def remove_older_snapshots(keep: Path) -> None:
    """After a checkpoint's commit: the same document's earlier window files."""
    document = keep.name.split("-", 1)[0]
    for path in keep.parent.glob(f"{document}-*"):
        if path != keep:
            path.unlink(missing_ok=True)


def remove_stale_snapshots(store_dir: Path, partial_document_ids: set[int]) -> None:
    """Window files of documents that are not partial any more (finished, replaced, removed), and leftovers of a
    write that a crash interrupted."""
    folder = Path(store_dir) / SNAPSHOT_DIR
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        document = path.name.split("-", 1)[0]
        if path.name.endswith(".tmp") or not document.isdigit() or int(document) not in partial_document_ids:
            path.unlink(missing_ok=True)
