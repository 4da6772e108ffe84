"""The episodic store: one directory holding SQLite (source of truth) and a derived hnswlib index.

Layout: store.sqlite3 (metadata, events, embeddings, FTS5), index.hnsw (rebuilt from SQLite whenever it is missing or
stale), kv/ (the KV block file of the current generation: kv_generations), lock (flock held by the single writer).
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from . import schema
from .index import DenseIndex
from .kv_blocks import KVBlockReader
from .kv_compaction import CompactionResult, KVUsage, LiveBlock, copy_live_blocks
from .kv_generations import BLOCK_DIR, block_file_name, orphan_block_files, record_generation, recorded_generation
from .records import (
    IDENTITY_CHECKED_FIELDS,
    STORE_FORMAT_VERSION,
    DocumentRecord,
    EventRecord,
    StoreBusyError,
    StoreError,
    StoreIdentity,
    StoreMismatchError,
)
from .rep_keys import decode_rep_keys, encode_rep_keys

log = logging.getLogger(__name__)

DB_NAME = "store.sqlite3"
INDEX_NAME = "index.hnsw"
KV_DIR = BLOCK_DIR
LOCK_NAME = "lock"

# Rebuild instead of growing forever once tombstones outnumber live vectors (re-ingesting edited documents).
COMPACT_MIN_DELETED = 256
REBUILD_BATCH = 10_000
MAX_QUERY_TERMS = 32

_DOC_COLS = (
    "id, path, display_path, kind, content_sha256, n_tokens, n_events, n_pages, n_lines, ingest_seconds, ingested_at"
)
_EVENT_COLS = (
    "id, document_id, ordinal, token_start, token_end, char_start, char_end, page_start, page_end, "
    "line_start, line_end, surprise_mean, surprise_max, text, kv_offset, kv_length, rep_keys"
)

STOP_WORDS = frozenset(
    """a about all also an and any are as at be been but by can could did do does for from had has have how i if
    in into is it its just me my no not of on or our over should so some than that the their them then there these
    they this those to was we were what when where which who whom why will with would you your
    s t d ll m re ve""".split()
)


def fts5_query(text: str) -> str:
    """Free text -> safe FTS5 query: quoted word/identifier terms joined by OR ('' when nothing is left).

    Terms are \\w+ runs, so they can never contain a quote or FTS5 operator; snake_case identifiers are kept whole
    (they are single tokens in the index) and also split into their parts.
    """
    terms: list[str] = []
    for word in re.findall(r"\w+", text.lower()):
        candidates = [word] + ([p for p in word.split("_") if p] if "_" in word else [])
        for term in candidates:
            if term not in STOP_WORDS and term not in terms:
                terms.append(term)
    return " OR ".join(f'"{t}"' for t in terms[:MAX_QUERY_TERMS])


def fts5_document(text: str) -> str:
    """Text as indexed: the event text plus the parts of its snake_case identifiers, so that `retries` finds
    `max_retries` and a query for `max_retries` ranks the event holding the identifier above ones with just `max`."""
    parts = [p for word in re.findall(r"\w+", text) if "_" in word for p in word.split("_") if p]
    return text + ("\n" + " ".join(parts) if parts else "")


def _is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == 13 or "database or disk is full" in str(exc)  # SQLITE_FULL
    return False


def _remove_block_file(path: Path) -> None:
    """After the switch commits; the directory is synced so that the old file does not come back after a crash."""
    path.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _short(sha: str) -> str:
    return sha[:12] + "…" if len(sha) > 12 else sha


def _describe(identity: StoreIdentity, field: str) -> str:
    return {
        "model_name": f"model {identity.model_name}",
        "model_sha256": f"model {identity.model_name} (sha {_short(identity.model_sha256)})",
        "tokenizer_sha256": f"tokenizer sha {_short(identity.tokenizer_sha256)}",
        "llama_cpp_version": f"llama-cpp-python {identity.llama_cpp_version}",
        "embedder": f"embedder {identity.embedder}",
        "embed_dim": f"embedding dimension {identity.embed_dim}",
    }[field]


def _advice(stored: StoreIdentity, field: str) -> str:
    if field == "llama_cpp_version":
        return f"Install llama-cpp-python=={stored.llama_cpp_version}, or use --store NEW to build a separate store."
    if field in ("embedder", "embed_dim"):
        return f"Use embedder {stored.embedder}, or use --store NEW to build a separate store."
    return f"Use --model {stored.model_name} (the same GGUF file), or use --store NEW to build a separate store."


def _identity_from_json(text: str) -> StoreIdentity:
    data = json.loads(text)
    names = {f.name for f in dataclasses.fields(StoreIdentity)}
    return StoreIdentity(**{k: v for k, v in data.items() if k in names})  # ignore keys added by newer versions


def _document(row: tuple) -> DocumentRecord:
    (id_, path, display, kind, sha, n_tokens, n_events, n_pages, n_lines, secs, at) = row
    return DocumentRecord(
        path=path, display_path=display, kind=kind, content_sha256=sha, n_tokens=n_tokens, n_events=n_events,
        n_pages=n_pages, n_lines=n_lines, ingest_seconds=secs, ingested_at=at, id=id_,
    )  # fmt: skip


def _event(row: tuple) -> EventRecord:
    (id_, doc_id, ordinal, ts, te, cs, ce, ps, pe, ls, le, smean, smax, text, kv_off, kv_len, rep) = row
    return EventRecord(
        ordinal=ordinal, token_start=ts, token_end=te, char_start=cs, char_end=ce, page_start=ps, page_end=pe,
        line_start=ls, line_end=le, surprise_mean=smean, surprise_max=smax, text=text, id=id_, document_id=doc_id,
        kv_offset=kv_off, kv_length=kv_len, rep_keys=decode_rep_keys(rep),
    )  # fmt: skip


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: transactions are explicit (BEGIN IMMEDIATE) so their boundaries are exactly ours.
    conn = sqlite3.connect(path / DB_NAME, isolation_level=None, timeout=10.0)
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")  # readers keep working while a writer commits
    except BaseException:
        conn.close()
        raise
    return conn


class Store:
    def __init__(self, path: Path, conn: sqlite3.Connection, identity: StoreIdentity):
        self.path = path
        self.identity = identity
        self._conn = conn
        self._lock_fd: int | None = None
        self._index = DenseIndex.empty(path / INDEX_NAME, identity.embed_dim)

    # ----------------------------------------------------------------------------------------------- opening

    @classmethod
    def create_or_open(cls, path: Path, identity: StoreIdentity) -> "Store":
        path = Path(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / KV_DIR).mkdir(exist_ok=True)
            (path / LOCK_NAME).touch(exist_ok=True)
        except OSError as e:
            if _is_disk_full(e):
                raise StoreError(f"disk full while creating store '{path}'; nothing was changed.") from e
            raise StoreError(f"cannot create store '{path}' ({e.strerror}); use a writable --store directory.") from e
        return cls._open(path, identity)

    @classmethod
    def open_existing(cls, path: Path) -> "Store":
        path = Path(path)
        if not (path / DB_NAME).is_file():
            raise StoreError(f"no store at {path}; run `epi ingest` first")
        return cls._open(path, None)

    @classmethod
    def _open(cls, path: Path, identity: StoreIdentity | None) -> "Store":
        try:
            conn = _connect(path)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open store '{path}' ({e}); check the path, or use --store NEW.") from e
        try:
            cls._check_format(conn, path)
            schema.migrate(conn)
            stored = cls._recorded_identity(conn, identity)
            if stored is None:
                raise StoreError(f"store '{path}' has no recorded identity; run `epi ingest` first")
            store = cls(path, conn, stored)
            if identity is not None:
                store.check_identity(identity)
            store._sync_index()
            return store
        except sqlite3.Error as e:
            conn.close()
            if _is_disk_full(e):
                raise StoreError(f"disk full while opening store '{path}'; nothing was changed.") from e
            raise StoreError(f"store '{path}' is unreadable ({e}); use --store NEW or re-ingest.") from e
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _check_format(conn: sqlite3.Connection, path: Path) -> None:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone():
            return  # brand-new database
        row = conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
        if row is not None and int(row[0]) != STORE_FORMAT_VERSION:
            raise StoreMismatchError(
                f"store '{path}' has format version {row[0]}; this epi uses format {STORE_FORMAT_VERSION} "
                f"(format_version differs). Re-ingest into --store NEW, or delete '{path}'.",
                "format_version", int(row[0]), STORE_FORMAT_VERSION,
            )  # fmt: skip

    @staticmethod
    def _recorded_identity(conn: sqlite3.Connection, identity: StoreIdentity | None) -> StoreIdentity | None:
        row = conn.execute("SELECT value FROM meta WHERE key='identity'").fetchone()
        if row is None and identity is not None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # OR IGNORE: a concurrent creator may have won the race; its identity is then the recorded one.
                values = [
                    ("format_version", str(STORE_FORMAT_VERSION)),
                    ("identity", json.dumps(dataclasses.asdict(identity), sort_keys=True)),
                    ("created_at", str(time.time())),
                ]
                conn.executemany("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", values)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            row = conn.execute("SELECT value FROM meta WHERE key='identity'").fetchone()
        return None if row is None else _identity_from_json(row[0])

    def check_identity(self, identity: StoreIdentity) -> None:
        for field in IDENTITY_CHECKED_FIELDS:
            stored, requested = getattr(self.identity, field), getattr(identity, field)
            if stored != requested:
                raise StoreMismatchError(
                    f"store '{self.path}' was built with {_describe(self.identity, field)}; this run uses "
                    f"{_describe(identity, field)} ({field} differs). {_advice(self.identity, field)}",
                    field, stored, requested,
                )  # fmt: skip

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------------------------- writing

    @contextmanager
    def writer(self) -> Iterator["Store"]:
        """Exclusive, non-blocking writer lock (flock: released by the kernel if the process dies)."""
        if self._lock_fd is not None:  # re-entrant: replace_document inside an explicit writer() block
            yield self
            return
        fd = self._try_lock()
        if fd is None:
            raise StoreBusyError(
                f"another epi process is writing store '{self.path}'; wait for it to finish, or use another --store."
            )
        self._lock_fd = fd
        try:
            self._sync_index()  # another process may have written since we opened
            self._remove_kv_orphans()
            yield self
        finally:
            self._lock_fd = None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _try_lock(self) -> int | None:
        fd = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    @contextmanager
    def _transaction(self, what: str) -> Iterator[None]:
        """One IMMEDIATE transaction; any failure rolls back, and disk-full becomes a user-facing StoreError."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise StoreBusyError(f"store '{self.path}' is locked by another process; retry later.") from e
            raise
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException as e:
            if self._conn.in_transaction:  # SQLite may already have rolled back (e.g. on SQLITE_FULL)
                self._conn.execute("ROLLBACK")
            if _is_disk_full(e):
                raise StoreError(
                    f"disk full while {what} store '{self.path}'; nothing was changed. Free some space and retry."
                ) from e
            raise

    def _embeddings(self, events: list[EventRecord]) -> np.ndarray:
        """Validate before touching the database, so caller bugs never reach a transaction."""
        dim = self.identity.embed_dim
        out = np.empty((len(events), dim), dtype=np.float32)
        for i, ev in enumerate(events):
            if ev.embedding is None:
                raise ValueError(f"event {ev.ordinal} has no embedding")
            vec = np.asarray(ev.embedding, dtype=np.float32).reshape(-1)
            if vec.shape != (dim,) or not np.all(np.isfinite(vec)) or not np.any(vec):
                raise ValueError(f"event {ev.ordinal}: embedding must be {dim} finite, non-zero float32 values")
            out[i] = vec
        if len({ev.ordinal for ev in events}) != len(events):
            raise ValueError("event ordinals must be unique within a document")
        return out

    def find_document(self, path: str) -> DocumentRecord | None:
        row = self._conn.execute(f"SELECT {_DOC_COLS} FROM documents WHERE path = ?", (path,)).fetchone()
        return None if row is None else _document(row)

    def replace_document(self, doc: DocumentRecord, events: list[EventRecord]) -> DocumentRecord:
        vectors = self._embeddings(events)
        with self.writer():
            new = dataclasses.replace(doc, n_events=len(events), ingested_at=time.time(), id=None)
            with self._transaction("writing"):
                old_ids = self._delete_rows(doc.path) or []
                cur = self._conn.execute(
                    "INSERT INTO documents (path, display_path, kind, content_sha256, n_tokens, n_events, n_pages, "
                    "n_lines, ingest_seconds, ingested_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (new.path, new.display_path, new.kind, new.content_sha256, new.n_tokens, new.n_events,
                     new.n_pages, new.n_lines, new.ingest_seconds, new.ingested_at),
                )  # fmt: skip
                new.id = cur.lastrowid
                event_ids = [self._insert_event(new.id, ev, vec) for ev, vec in zip(events, vectors)]
            for ev, event_id in zip(events, event_ids):  # only after commit: a failure leaves the caller's objects as-is
                ev.id, ev.document_id = event_id, new.id
            self._update_index(old_ids, np.asarray(event_ids, dtype=np.int64), vectors)
            return new

    def _insert_event(self, document_id: int, ev: EventRecord, vector: np.ndarray) -> int:
        cur = self._conn.execute(
            "INSERT INTO events (document_id, ordinal, token_start, token_end, char_start, char_end, page_start, "
            "page_end, line_start, line_end, surprise_mean, surprise_max, text, embedding, kv_offset, kv_length, "
            "rep_keys) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (document_id, ev.ordinal, ev.token_start, ev.token_end, ev.char_start, ev.char_end, ev.page_start,
             ev.page_end, ev.line_start, ev.line_end, float(ev.surprise_mean), float(ev.surprise_max), ev.text,
             vector.astype(np.float32).tobytes(), ev.kv_offset, ev.kv_length, encode_rep_keys(ev.rep_keys)),
        )  # fmt: skip
        self._conn.execute(
            "INSERT INTO events_fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, fts5_document(ev.text))
        )
        return cur.lastrowid

    def _delete_rows(self, path: str) -> list[int] | None:
        """Delete a document, its events and their FTS rows; its former event ids, or None if absent."""
        row = self._conn.execute("SELECT id FROM documents WHERE path = ?", (path,)).fetchone()
        if row is None:
            return None
        ids = [r[0] for r in self._conn.execute("SELECT id FROM events WHERE document_id = ?", (row[0],))]
        self._conn.execute(
            "DELETE FROM events_fts WHERE rowid IN (SELECT id FROM events WHERE document_id = ?)", (row[0],)
        )
        self._conn.execute("DELETE FROM events WHERE document_id = ?", (row[0],))
        self._conn.execute("DELETE FROM documents WHERE id = ?", (row[0],))
        return ids

    def remove_document(self, path: str) -> bool:
        with self.writer():
            with self._transaction("removing from"):
                old_ids = self._delete_rows(path)
            if old_ids is None:
                return False
            self._update_index(old_ids, np.empty(0, dtype=np.int64), np.empty((0, self.identity.embed_dim)))
            return True

    # ------------------------------------------------------------------------------------------ dense index

    def _sqlite_event_ids(self) -> set[int]:
        return {r[0] for r in self._conn.execute("SELECT id FROM events")}

    def _rebuild_index(self) -> DenseIndex:
        n = self._conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        index = DenseIndex.empty(self.path / INDEX_NAME, self.identity.embed_dim, capacity=2 * n)
        cur = self._conn.execute("SELECT id, embedding FROM events ORDER BY id")
        while rows := cur.fetchmany(REBUILD_BATCH):
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
            index.add(ids, vectors)
        return index

    def _sync_index(self) -> str | None:
        """Make the in-memory index match SQLite, rebuilding (and saving) if needed; why it was rebuilt, or None."""
        ids = self._sqlite_event_ids()
        if self._index.live_ids() == ids:  # ids are never reused, so equal id sets mean equal contents
            return None
        index_path = self.path / INDEX_NAME
        loaded = DenseIndex.load_if_consistent(index_path, self.identity.embed_dim, ids)
        if loaded is not None:
            self._index = loaded
            return None
        reason = "missing" if not index_path.exists() else "unreadable or out of date"
        log.info("store %s: dense index %s; rebuilding it from SQLite", self.path, reason)
        self._index = self._rebuild_index()
        self._save_index()
        return reason

    def _save_index(self) -> None:
        """Save if we hold (or can get) the writer lock; a reader must not race a writer's save."""
        fd = None if self._lock_fd is not None else self._try_lock()
        if self._lock_fd is None and fd is None:
            return  # the writer will save its own, newer index
        try:
            self._index.save()
        except Exception as e:  # SQLite is the truth: a stale/missing index file is rebuilt on next open
            log.warning("store %s: could not save the dense index (%s); it will be rebuilt on next open", self.path, e)
        finally:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _update_index(self, removed: list[int], ids: np.ndarray, vectors: np.ndarray) -> None:
        """After a commit: apply the change incrementally, compacting when tombstones dominate."""
        try:
            self._index.remove(removed)
            self._index.add(ids, vectors)
            if self._index.n_deleted >= max(COMPACT_MIN_DELETED, self._index.n_live):
                self._index = self._rebuild_index()
        except Exception as e:
            log.warning("store %s: incremental index update failed (%s); rebuilding", self.path, e)
            self._index = self._rebuild_index()
        self._save_index()

    # ----------------------------------------------------------------------------------------------- reading

    def documents(self) -> list[DocumentRecord]:
        rows = self._conn.execute(f"SELECT {_DOC_COLS} FROM documents ORDER BY display_path, path")
        return [_document(r) for r in rows]

    def get_document(self, document_id: int) -> DocumentRecord:
        row = self._conn.execute(f"SELECT {_DOC_COLS} FROM documents WHERE id = ?", (document_id,)).fetchone()
        if row is None:
            raise KeyError(f"no document with id {document_id} in store '{self.path}'")
        return _document(row)

    def events_of(self, document_id: int) -> list[EventRecord]:
        rows = self._conn.execute(
            f"SELECT {_EVENT_COLS} FROM events WHERE document_id = ? ORDER BY ordinal", (document_id,)
        )
        return [_event(r) for r in rows]

    def get_events(self, event_ids: list[int]) -> list[EventRecord]:
        """Events in the order of `event_ids`; ids no longer in the store (stale index of a reader) are skipped."""
        found: dict[int, EventRecord] = {}
        unique = list(dict.fromkeys(int(i) for i in event_ids))
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE id IN ({marks})", chunk):
                found[row[0]] = _event(row)
        return [dataclasses.replace(found[i]) for i in map(int, event_ids) if i in found]

    def event_at(self, document_id: int, ordinal: int) -> EventRecord | None:
        row = self._conn.execute(
            f"SELECT {_EVENT_COLS} FROM events WHERE document_id = ? AND ordinal = ?", (document_id, ordinal)
        ).fetchone()
        return None if row is None else _event(row)

    def search_dense(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        vec = np.asarray(query, dtype=np.float32).reshape(-1)
        if vec.shape != (self.identity.embed_dim,):
            raise ValueError(f"query must have {self.identity.embed_dim} values, got {vec.shape[0]}")
        return self._index.search(vec, k)

    def search_lexical(self, query: str, k: int) -> list[tuple[int, float]]:
        match = fts5_query(query)
        if not match or k <= 0:
            return []
        rows = self._conn.execute(
            "SELECT rowid, bm25(events_fts) AS s FROM events_fts WHERE events_fts MATCH ? ORDER BY s LIMIT ?",
            (match, k),
        )
        return [(int(r[0]), -float(r[1])) for r in rows]

    # ------------------------------------------------------------------------------------------ KV blocks

    @property
    def kv_block_path(self) -> Path:
        """The current KV block file; compaction moves the blocks into the file of the next generation."""
        return self.path / block_file_name(recorded_generation(self._conn))

    def kv_usage(self) -> KVUsage:
        path = self.kv_block_path
        if not path.is_file():
            return KVUsage(0, 0, 0)
        try:
            with KVBlockReader(path) as reader:
                header_bytes = reader.first_block_offset
        except StoreError:  # an unreadable header: every byte of the file is waste
            header_bytes = 0
        block_bytes = self._conn.execute("SELECT COALESCE(SUM(kv_length), 0) FROM events "
                                         "WHERE kv_offset IS NOT NULL").fetchone()[0]
        return KVUsage(path.stat().st_size, header_bytes, block_bytes)

    def compact_kv_blocks(self, progress: Callable[[int], None] | None = None) -> CompactionResult:
        """Copy the live blocks into the file of the next generation, then switch to it in the transaction that
        rewrites every event's offset. A crash before the commit leaves the old file current and the new one an
        orphan; after it, the old file is the orphan; the next writer deletes orphans. A block that fails its check
        is dropped and its event answered from text. `progress(n)` is told the bytes of each block copied."""
        with self.writer():
            generation = recorded_generation(self._conn)
            old, new = self.path / block_file_name(generation), self.path / block_file_name(generation + 1)
            if not old.is_file():
                return CompactionResult(0, 0, 0, 0)
            bytes_before = old.stat().st_size
            rows = self._conn.execute("SELECT id, ordinal, kv_offset, kv_length FROM events "
                                      "WHERE kv_offset IS NOT NULL ORDER BY kv_offset")
            blocks = [LiveBlock(*row) for row in rows]
            try:
                copied = copy_live_blocks(old, new, blocks, progress)
                with self._transaction("compacting the KV blocks of"):
                    self._conn.executemany("UPDATE events SET kv_offset = ?, kv_length = ? WHERE id = ?",
                                           [(off, n, event_id) for event_id, (off, n) in copied.locations.items()])
                    self._conn.executemany("UPDATE events SET kv_offset = NULL, kv_length = NULL WHERE id = ?",
                                           [(event_id,) for event_id in copied.dropped])
                    record_generation(self._conn, generation + 1)
            except BaseException as e:
                if recorded_generation(self._conn) == generation:  # not switched: the new file is nobody's
                    new.unlink(missing_ok=True)
                if _is_disk_full(e):
                    raise StoreError(f"disk full while compacting the KV blocks of store '{self.path}'; nothing was "
                                     "changed. Free some space and retry.") from e
                raise
            try:
                _remove_block_file(old)
            except OSError as e:  # the switch is committed: the old file is an orphan that the next writer removes
                log.warning("store %s: could not remove the old block file %s (%s)", self.path, old, e)
            return CompactionResult(bytes_before, new.stat().st_size, len(copied.locations), len(copied.dropped))

    def _remove_kv_orphans(self) -> None:
        """Block files of other generations are left by an interrupted compaction; only the writer may delete them,
        since a compaction in progress owns the file of the next generation."""
        for orphan in orphan_block_files(self.path, recorded_generation(self._conn)):
            try:
                orphan.unlink()
                log.info("store %s: removed %s, left by an interrupted compaction", self.path, orphan.name)
            except FileNotFoundError:
                pass
            except OSError as e:  # waste, not damage: writing may go on
                log.warning("store %s: could not remove the leftover block file %s (%s)", self.path, orphan, e)

    # ---------------------------------------------------------------------------------------------- doctor

    def stats(self) -> dict:
        n_documents, n_tokens = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(n_tokens), 0) FROM documents"
        ).fetchone()
        n_events = self._conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        disk_bytes = sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
        kv = self.kv_usage()
        return {
            "path": str(self.path),
            "format_version": STORE_FORMAT_VERSION,
            "n_documents": n_documents,
            "n_events": n_events,
            "n_tokens": n_tokens,
            "disk_bytes": disk_bytes,
            "index_live": self._index.n_live,
            "index_deleted": self._index.n_deleted,
            "kv_file_bytes": kv.file_bytes,
            "kv_live_bytes": kv.live_bytes,
            "kv_dead_bytes": kv.dead_bytes,
        }

    def health(self) -> list[str]:
        problems: list[str] = []
        result = [r[0] for r in self._conn.execute("PRAGMA integrity_check")]
        if result != ["ok"]:
            problems.append(f"SQLite integrity_check failed: {'; '.join(result[:5])}; re-ingest into --store NEW.")
        try:
            self._conn.execute("INSERT INTO events_fts(events_fts) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as e:
            problems.append(f"lexical index (FTS5) check failed ({e}); re-ingest into --store NEW.")
        n_fts, n_unindexed = self._conn.execute(
            "SELECT (SELECT COUNT(*) FROM events_fts), "
            "(SELECT COUNT(*) FROM events WHERE id NOT IN (SELECT rowid FROM events_fts))"
        ).fetchone()
        if n_unindexed or n_fts != self._conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]:
            problems.append("lexical index (FTS5) rows differ from the events; re-ingest into --store NEW.")
        bad = [
            r[0]
            for r in self._conn.execute(
                "SELECT display_path FROM documents d "
                "WHERE n_events != (SELECT COUNT(*) FROM events e WHERE e.document_id = d.id)"
            )
        ]
        if bad:
            problems.append(f"{len(bad)} document(s) have a wrong event count (e.g. {bad[0]}); re-ingest them.")
        n_bad = self._conn.execute(
            "SELECT COUNT(*) FROM events WHERE length(embedding) != ?", (4 * self.identity.embed_dim,)
        ).fetchone()[0]
        if n_bad:
            problems.append(f"{n_bad} event embedding(s) have the wrong size; re-ingest into --store NEW.")
        # Check the file on disk, not our in-memory copy: that is what the next `epi ask` will load.
        self._index = DenseIndex.empty(self.path / INDEX_NAME, self.identity.embed_dim)
        reason = self._sync_index()
        if reason:
            problems.append(f"dense index ({INDEX_NAME}) was {reason}; rebuilt it from SQLite.")
        if not (self.path / KV_DIR).is_dir():
            problems.append(f"{KV_DIR}/ directory was missing; recreated it.")
            (self.path / KV_DIR).mkdir(exist_ok=True)
        return problems
