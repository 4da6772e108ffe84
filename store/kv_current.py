"""The current KV block file of a store, for code that holds a store directory rather than an open Store (the kv-mode
answerer, which reads blocks for as long as a chat lasts, across compactions made by other processes)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from .episodic_store import DB_NAME
from .kv_blocks import KVBlock, KVBlockReader, KVFileHeader
from .kv_generations import block_file_name, recorded_generation
from .records import StoreError

_OPEN_ATTEMPTS = 3  # a compaction may delete the file between looking it up and opening it; it is then looked up again


def _connect_for_reading(store_dir: Path) -> sqlite3.Connection:
    db = Path(store_dir).resolve() / DB_NAME
    try:
        # mode=rw, not ro: a read-only connection to a WAL database fails while no other has created its -shm file.
        # This one only reads; mode=rw just never creates a missing database.
        return sqlite3.connect(db.as_uri() + "?mode=rw", uri=True, isolation_level=None, timeout=10.0)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open store '{store_dir}' ({e}); check the path, or use --store NEW.") from e


def _generation_path(store_dir: Path, conn: sqlite3.Connection) -> Path:
    try:
        return Path(store_dir) / block_file_name(recorded_generation(conn))
    except sqlite3.Error as e:
        raise StoreError(f"store '{store_dir}' is unreadable ({e}); use --store NEW or re-ingest.") from e


def current_block_path(store_dir: str | os.PathLike) -> Path:
    """Where the store's blocks are now (the file need not exist: a store ingested with --no-kv has none)."""
    store_dir = Path(store_dir)
    if not (store_dir / DB_NAME).is_file():
        return store_dir / block_file_name(0)
    conn = _connect_for_reading(store_dir)
    try:
        return _generation_path(store_dir, conn)
    finally:
        conn.close()


class CurrentBlockReader:
    """A KVBlockReader that follows compaction: before each read it looks up the current generation and reopens if
    it changed, so offsets read from SQLite meet the file they belong to. Left open: a compaction committing in the
    moment between reading an event's row and reading its block. The old offset is then read in the new file, where
    the block found there almost always fails its check (the event is answered from text, with a warning); only a
    block of the same ordinal and size starting exactly there would pass."""

    def __init__(self, store_dir: str | os.PathLike, expected: KVFileHeader | None = None):
        self.store_dir = Path(store_dir)
        self.expected = expected
        self._conn = _connect_for_reading(self.store_dir)
        try:
            self._reader = self._open_current()
        except BaseException:
            self._conn.close()
            raise

    def _open_current(self) -> KVBlockReader:
        for _ in range(_OPEN_ATTEMPTS - 1):
            try:
                return KVBlockReader(_generation_path(self.store_dir, self._conn), self.expected)
            except FileNotFoundError:
                continue
        return KVBlockReader(_generation_path(self.store_dir, self._conn), self.expected)

    @property
    def path(self) -> Path:
        return self._reader.path

    @property
    def header(self) -> KVFileHeader:
        return self._reader.header

    def read(self, offset: int, event_id: int | None = None, length: int | None = None) -> KVBlock:
        """As KVBlockReader.read, in the file that is current now."""
        if _generation_path(self.store_dir, self._conn) != self._reader.path:
            reader = self._open_current()
            self._reader.close()
            self._reader = reader
        return self._reader.read(offset, event_id, length)

    def close(self) -> None:
        self._reader.close()
        self._conn.close()

    def __enter__(self) -> CurrentBlockReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
