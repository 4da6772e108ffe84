"""The episodic store: one directory holding the archive and its KV tiers.

Layout: store.sqlite3 (the archive: documents, events, embeddings, FTS5; model-independent), index.hnsw (derived,
rebuilt from SQLite whenever it is missing or stale), kv/ (per-model KV block tiers under one disk budget: kv_tier/),
lock (held by the single writer; file_lock.py).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from . import schema
from .checksum import event_checksum
from .damage import DamageAwareConnection
from .file_lock import exclusive_lock, try_acquire
from .index import DenseIndex
from .index import intact as index_intact
from .kv_tier import BLOCK_KINDS, KVSpace, block_key
from . import retrieval_log
from .lexical import PLACE_WEIGHT, fts5_document, fts5_query, place_text
from .summaries import SummaryShelf, summary_block_key
from .records import (
    DEFAULT_KV_BUDGET_BYTES,
    IDENTITY_CHECKED_FIELDS,
    STORE_FORMAT_VERSION,
    DocumentRecord,
    EventRecord,
    StoreBusyError,
    EventDamagedError,
    StoreDamagedError,
    StoreError,
    StoreIdentity,
    StoreMismatchError,
)
from .upgrade.v1 import remove_v1_leftovers, upgrade_v1

log = logging.getLogger(__name__)

DB_NAME = "store.sqlite3"
INDEX_NAME = "index.hnsw"
KV_DIR = "kv"
LOCK_NAME = "lock"
BRIEF_HOLD_RETRIES = 20  # x 50 ms: how long refuse_if_being_written looks again at a lock held briefly

# Rebuild instead of growing forever once tombstones outnumber live vectors (re-ingesting edited documents).
COMPACT_MIN_DELETED = 256
# A writer rewrites the whole index file at most this often (and when it lets go of the store): saving after every
# document made an ingest of many files quadratic (~38 MB per save at 10M tokens). Readers catch up from SQLite.
INDEX_SAVE_INTERVAL_S = 60.0
# The WAL file is truncated back to this size after checkpoints instead of keeping its largest size forever.
WAL_SIZE_LIMIT = 64 << 20
REBUILD_BATCH = 10_000
# A scoped dense search (a chapter, some documents) over at most this many events reads their vectors from SQLite and
# ranks them exactly (~1.5 MB at 384 floats); larger scopes filter the hnswlib search instead.
EXACT_SEARCH_MAX = 1000

_DOC_COLS = (
    "id, path, display_path, kind, content_sha256, n_tokens, n_events, n_pages, n_lines, ingest_seconds, ingested_at, "
    "segmenter, COALESCE(status, 'complete'), checkpoint"
)
_EVENT_COLS = (
    "id, document_id, ordinal, token_start, token_end, char_start, char_end, page_start, page_end, "
    "line_start, line_end, surprise_mean, surprise_max, text, section, checksum"
)

def _is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == 13 or "database or disk is full" in str(exc)  # SQLITE_FULL
    return False


def _describe(identity: StoreIdentity, field: str) -> str:
    return {
        "embedder": f"embedder {identity.embedder}",
        "embed_dim": f"embedding dimension {identity.embed_dim}",
    }[field]


def _advice(stored: StoreIdentity) -> str:
    return f"Use embedder {stored.embedder}, or use --store NEW to build a separate store."


def _identity_from_json(text: str) -> StoreIdentity:
    data = json.loads(text)
    names = {f.name for f in dataclasses.fields(StoreIdentity)}
    return StoreIdentity(**{k: v for k, v in data.items() if k in names})  # ignore keys added by newer versions


def _document(row: tuple) -> DocumentRecord:
    (id_, path, display, kind, sha, n_tokens, n_events, n_pages, n_lines, secs, at, segmenter, status, checkpoint) = row
    return DocumentRecord(
        path=path, display_path=display, kind=kind, content_sha256=sha, n_tokens=n_tokens, n_events=n_events,
        n_pages=n_pages, n_lines=n_lines, ingest_seconds=secs, ingested_at=at, id=id_, segmenter=segmenter,
        status=status, checkpoint=checkpoint,
    )  # fmt: skip


def _row_checksum(row: tuple) -> int:
    """The checksum an _EVENT_COLS row should carry (checksum.py)."""
    (_, doc_id, ordinal, ts, te, cs, ce, ps, pe, ls, le, _, _, text, section, _) = row
    return event_checksum((doc_id, ordinal, ts, te, cs, ce, ps, pe, ls, le, section, text))


def _event(row: tuple) -> EventRecord:
    (id_, doc_id, ordinal, ts, te, cs, ce, ps, pe, ls, le, smean, smax, text, section, _) = row
    return EventRecord(
        ordinal=ordinal, token_start=ts, token_end=te, char_start=cs, char_end=ce, page_start=ps, page_end=pe,
        line_start=ls, line_end=le, surprise_mean=smean, surprise_max=smax, text=text, id=id_, document_id=doc_id,
        section=section,
    )  # fmt: skip


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit mode: transactions are explicit (BEGIN IMMEDIATE) so their boundaries are exactly ours.
    conn = sqlite3.connect(path / DB_NAME, isolation_level=None, timeout=10.0, factory=DamageAwareConnection)
    conn.store_path = path
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
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
        self._writer_lock = exclusive_lock(path / LOCK_NAME)  # held (is_locked) while this object writes
        self._index = DenseIndex.empty(path / INDEX_NAME, identity.embed_dim)
        self._index_loaded = False  # the saved index file has been read (then it is kept up to date in memory)
        self._index_dirty = False   # the in-memory index has changes the file lacks
        # Why the saved index file could not be used when it was read (damaged, unreadable), kept for doctor: the
        # first open already rebuilt and saved it, so doctor's own read finds a good file.
        self.index_rebuilt: str | None = None
        self._index_saved_at = time.monotonic()

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
            format_version = cls._check_format(conn, path)
            schema.migrate(conn)
            if format_version == 1:
                cls._upgrade_from_v1(path, conn)
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
    def _check_format(conn: sqlite3.Connection, path: Path) -> int | None:
        """The store's format version (None: a brand-new database); format 1 is upgraded, others are refused."""
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone():
            return None  # brand-new database
        row = conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
        if row is None or int(row[0]) in (1, STORE_FORMAT_VERSION):
            return None if row is None else int(row[0])
        raise StoreMismatchError(
            f"store '{path}' has format version {row[0]}, made by a newer epi; this epi reads formats 1 and "
            f"{STORE_FORMAT_VERSION}. Upgrade epi, or re-ingest into --store NEW.",
            "format_version", int(row[0]), STORE_FORMAT_VERSION,
        )  # fmt: skip

    @classmethod
    def _upgrade_from_v1(cls, path: Path, conn: sqlite3.Connection) -> None:
        """Format 1 -> 2 in place (upgrade/v1.py), under the writer lock: a store being written by an older epi
        is left alone until it finishes."""
        lock = exclusive_lock(path / LOCK_NAME)
        if not try_acquire(lock):
            raise StoreBusyError(f"store '{path}' needs a one-time upgrade to format {STORE_FORMAT_VERSION}, but "
                                 "another epi process is writing it; retry when it has finished.")
        try:
            row = conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
            if row is not None and int(row[0]) == 1:  # another process may have upgraded it meanwhile
                moved, cold = upgrade_v1(path, conn)
                log.info("store %s upgraded to format %d: %d KV blocks moved into the model's tier, %d left to be "
                         "prepared on use", path, STORE_FORMAT_VERSION, moved, cold)
        finally:
            lock.release()

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
                    f"{_describe(identity, field)} ({field} differs). {_advice(self.identity)}",
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
        """Exclusive, non-blocking writer lock (released by the operating system if the process dies)."""
        if self._writer_lock.is_locked:  # re-entrant: replace_document inside an explicit writer() block
            yield self
            return
        if not try_acquire(self._writer_lock):
            raise StoreBusyError(
                f"another epi process is writing store '{self.path}'; wait for it to finish, or use another --store."
            )
        try:
            self._sync_index()  # another process may have written since we opened
            remove_v1_leftovers(self.path)
            yield self
        finally:
            try:
                if self._index_dirty:
                    self._save_index()
            finally:
                self._writer_lock.release()

    @staticmethod
    def refuse_if_being_written(path: Path) -> None:
        """Fail at once, before anything slow (loading a model), when another process holds the writer lock. A second
        writer refuses rather than waits: the first may run for hours, and an interrupted ingest resumes anyway."""
        if not (Path(path) / LOCK_NAME).is_file():
            return
        probe = exclusive_lock(Path(path) / LOCK_NAME)
        # A background job (episodic_cli/background.py) holds the lock for one summary at a time, a few ms: a probe
        # that meets it looks again before refusing.
        for _ in range(BRIEF_HOLD_RETRIES):
            if try_acquire(probe):
                break
            time.sleep(0.05)
        else:
            raise StoreBusyError(f"another epi process (an ingest, rm or compact) is writing store '{path}'; wait for "
                                 "it to finish, or use another --store.")
        probe.release()

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

    def _vector(self, value, what: str) -> np.ndarray:
        """`value` as this store's float32 vector; ValueError naming `what` unless it is the store's dimension,
        finite and non-zero."""
        dim = self.identity.embed_dim
        vec = np.asarray(value, dtype=np.float32).reshape(-1)
        if vec.shape != (dim,) or not np.all(np.isfinite(vec)) or not np.any(vec):
            raise ValueError(f"{what}: embedding must be {dim} finite, non-zero float32 values")
        return vec

    def _embeddings(self, events: list[EventRecord]) -> np.ndarray:
        """Validate before touching the database, so caller bugs never reach a transaction."""
        out = np.empty((len(events), self.identity.embed_dim), dtype=np.float32)
        for i, ev in enumerate(events):
            if ev.embedding is None:
                raise ValueError(f"event {ev.ordinal} has no embedding")
            out[i] = self._vector(ev.embedding, f"event {ev.ordinal}")
        if len({ev.ordinal for ev in events}) != len(events):
            raise ValueError("event ordinals must be unique within a document")
        return out

    def find_document(self, path: str) -> DocumentRecord | None:
        row = self._conn.execute(f"SELECT {_DOC_COLS} FROM documents WHERE path = ?", (path,)).fetchone()
        return None if row is None else _document(row)

    def replace_document(self, doc: DocumentRecord, events: list[EventRecord]) -> DocumentRecord:
        """A document and all its events in one transaction (readers see the old version or the new one)."""
        vectors = self._embeddings(events)
        with self.writer():
            new = dataclasses.replace(doc, n_events=len(events), ingested_at=time.time(), id=None, status="complete",
                                      checkpoint=None)
            with self._transaction("writing"):
                old_ids = self._delete_rows(doc.path) or []
                new.id = self._insert_document(new)
                event_ids = [self._insert_event(new.id, ev, vec, doc.display_path) for ev, vec in zip(events, vectors)]
            for ev, event_id in zip(events, event_ids):  # only after commit: a failure leaves the caller's objects as-is
                ev.id, ev.document_id = event_id, new.id
            self._update_index(old_ids, np.asarray(event_ids, dtype=np.int64), vectors)
            return new

    # A long document is committed in groups instead (checkpointed ingest): begin_document replaces any earlier
    # version with a 'partial' one at once, append_events adds a group of events together with the state a resumed
    # ingest needs, finish_document marks it complete. Readers see every committed group, marked partial until the end.

    def begin_document(self, doc: DocumentRecord, checkpoint: str | None = None) -> DocumentRecord:
        with self.writer():
            new = dataclasses.replace(doc, n_events=0, ingested_at=time.time(), id=None, status="partial",
                                      checkpoint=checkpoint)
            with self._transaction("writing"):
                old_ids = self._delete_rows(doc.path) or []
                new.id = self._insert_document(new)
            self._update_index(old_ids, np.empty(0, dtype=np.int64), np.empty((0, self.identity.embed_dim)))
            return new

    def append_events(self, document_id: int, events: list[EventRecord], checkpoint: str | None) -> None:
        """One group of a partial document's events and the checkpoint after it, in one transaction."""
        vectors = self._embeddings(events)
        with self.writer():
            with self._transaction("writing"):
                shown = self._conn.execute("SELECT display_path FROM documents WHERE id = ?", (document_id,)).fetchone()
                event_ids = [self._insert_event(document_id, ev, vec, shown[0] if shown else "")
                             for ev, vec in zip(events, vectors)]
                self._conn.execute("UPDATE documents SET n_events = n_events + ?, checkpoint = ? WHERE id = ?",
                                   (len(events), checkpoint, document_id))
            for ev, event_id in zip(events, event_ids):
                ev.id, ev.document_id = event_id, document_id
            self._update_index([], np.asarray(event_ids, dtype=np.int64), vectors)

    def finish_document(self, document_id: int, ingest_seconds: float) -> DocumentRecord:
        with self.writer(), self._transaction("writing"):
            self._conn.execute("UPDATE documents SET status = NULL, checkpoint = NULL, ingest_seconds = ?, "
                               "ingested_at = ? WHERE id = ?", (ingest_seconds, time.time(), document_id))
        return self.get_document(document_id)

    def _insert_document(self, doc: DocumentRecord) -> int:
        cur = self._conn.execute(
            "INSERT INTO documents (path, display_path, kind, content_sha256, n_tokens, n_events, n_pages, n_lines, "
            "ingest_seconds, ingested_at, segmenter, status, checkpoint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (doc.path, doc.display_path, doc.kind, doc.content_sha256, doc.n_tokens, doc.n_events, doc.n_pages,
             doc.n_lines, doc.ingest_seconds, doc.ingested_at, doc.segmenter,
             None if doc.status == "complete" else doc.status, doc.checkpoint),
        )  # fmt: skip
        return cur.lastrowid

    def _insert_event(self, document_id: int, ev: EventRecord, vector: np.ndarray, display_path: str) -> int:
        cur = self._conn.execute(
            "INSERT INTO events (document_id, ordinal, token_start, token_end, char_start, char_end, page_start, "
            "page_end, line_start, line_end, surprise_mean, surprise_max, text, embedding, section, checksum) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (document_id, ev.ordinal, ev.token_start, ev.token_end, ev.char_start, ev.char_end, ev.page_start,
             ev.page_end, ev.line_start, ev.line_end, float(ev.surprise_mean), float(ev.surprise_max), ev.text,
             vector.astype(np.float32).tobytes(), ev.section,
             event_checksum((document_id, ev.ordinal, ev.token_start, ev.token_end, ev.char_start, ev.char_end,
                             ev.page_start, ev.page_end, ev.line_start, ev.line_end, ev.section, ev.text))),
        )  # fmt: skip
        self._conn.execute("INSERT INTO events_fts (rowid, text, place) VALUES (?, ?, ?)",
                           (cur.lastrowid, fts5_document(ev.text), place_text(display_path, ev.section)))
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
        self.summaries().delete_for_document(row[0])  # its map goes with it (a changed file's map is remade)
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

    def index_differences(self, sample: int | None = None) -> tuple[int, list[int]]:
        """Compare the index file's vectors with SQLite's embeddings, every event or a random `sample` of them:
        (events compared, ids whose vector differs). The label sets already match (`_sync_index`); this finds what
        keeps them matching while changing answers: labels swapped between elements, a vector overwritten."""
        ids = np.fromiter(sorted(self._sqlite_event_ids()), dtype=np.int64)
        if sample is not None and len(ids) > sample:
            ids = np.sort(np.random.default_rng().choice(ids, size=sample, replace=False))
        differing: list[int] = []
        for start in range(0, len(ids), REBUILD_BATCH):
            found, vectors = self._vectors_of([int(i) for i in ids[start : start + REBUILD_BATCH]])
            differing += self._index.differing(found, vectors)
        return len(ids), differing

    def replace_embeddings(self, embedder: str, events: dict[int, np.ndarray], summaries: dict[int, np.ndarray]
                           ) -> None:
        """Every event's and summary's vector replaced (each must be given) and the archive's embedder renamed, in one
        transaction: an interrupted run changes nothing. The dense index is then rebuilt from the new vectors."""
        with self.writer():
            event_ids = self._sqlite_event_ids()
            summary_ids = {r[0] for r in self._conn.execute("SELECT id FROM summaries")}
            if set(events) != event_ids or set(summaries) != summary_ids:
                raise ValueError("replace_embeddings needs a vector for every event and every summary of the store")
            event_rows = [(self._vector(v, f"event {i}").tobytes(), i) for i, v in events.items()]
            summary_rows = [(self._vector(v, f"summary {i}").tobytes(), i) for i, v in summaries.items()]
            identity = dataclasses.replace(self.identity, embedder=embedder)
            with self._transaction("re-embedding"):
                self._conn.executemany("UPDATE events SET embedding = ? WHERE id = ?", event_rows)
                self._conn.executemany("UPDATE summaries SET embedding = ? WHERE id = ?", summary_rows)
                self._conn.execute("UPDATE meta SET value = ? WHERE key = 'identity'",
                                   (json.dumps(dataclasses.asdict(identity), sort_keys=True),))
            self.identity = identity
            self._index = self._rebuild_index()
            self._index_loaded = True
            self._index_dirty = True  # saved when the writer lets go

    def rebuild_index(self) -> None:
        """Rebuild the index file from SQLite's embeddings (doctor --repair), under the writer lock."""
        with self.writer():
            self._index = self._rebuild_index()
            self._index_loaded = True
            self._save_index()

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

    def _vectors_of(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        marks = ",".join("?" * len(ids))
        rows = self._conn.execute(f"SELECT id, embedding FROM events WHERE id IN ({marks}) ORDER BY id", ids).fetchall()
        found = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
        return found, vectors

    def _sync_index(self) -> str | None:
        """Make the in-memory index match SQLite; why it had to change, or None. The saved file is read once, then
        brought up to date incrementally (O(events added or removed since it was saved)); it is rebuilt from SQLite
        only when it is missing or unreadable."""
        ids = self._sqlite_event_ids()
        if self._index_loaded and self._index.live_ids() == ids:  # ids are never reused: equal sets, equal contents
            return None
        index_path = self.path / INDEX_NAME
        reason = None
        if not self._index_loaded:
            loaded = DenseIndex.load(index_path, self.identity.embed_dim)
            self._index_loaded = True
            if loaded is None:
                reason = ("missing" if not index_path.exists()
                          else "damaged (its links or checksum are wrong)" if not index_intact(index_path, self.identity.embed_dim)
                          else "unreadable")
                log.info("store %s: dense index %s; rebuilding it from SQLite", self.path, reason)
                if reason != "missing":
                    self.index_rebuilt = reason
                self._index = self._rebuild_index()
                self._save_index()
                return reason
            self._index = loaded
        if self._index.catch_up(ids, self._vectors_of):
            reason = "out of date"
            self._compact_index_if_wasteful()
            self._index_dirty = True
            if not self._writer_lock.is_locked:
                self._save_index()  # a reader saves what it caught up on only when no writer holds the store
        return reason

    def refresh(self) -> None:
        """See what other processes committed since this store was opened (a running `epi chat` between questions:
        an ingest in progress commits document after document)."""
        self._sync_index()

    def _compact_index_if_wasteful(self) -> None:
        if self._index.n_deleted >= max(COMPACT_MIN_DELETED, self._index.n_live):
            self._index = self._rebuild_index()

    def _save_index(self) -> None:
        """Save if we hold (or can get) the writer lock; a reader must not race a writer's save."""
        if not try_acquire(self._writer_lock):  # held by this object's writer(): counted once more
            return  # another process's writer will save its own, newer index
        try:
            self._index.save()
            self._index_dirty = False
            self._index_saved_at = time.monotonic()
        except Exception as e:  # SQLite is the truth: a stale/missing index file is caught up on next open
            log.warning("store %s: could not save the dense index (%s); it will be caught up on next open", self.path, e)
        finally:
            self._writer_lock.release()

    def _update_index(self, removed: list[int], ids: np.ndarray, vectors: np.ndarray) -> None:
        """After a commit: apply the change incrementally, compacting when tombstones dominate; the file is saved
        now and then (INDEX_SAVE_INTERVAL_S) and when the writer lets go of the store."""
        try:
            self._index.remove(removed)
            self._index.add(ids, vectors)
            self._compact_index_if_wasteful()
        except Exception as e:
            log.warning("store %s: incremental index update failed (%s); rebuilding", self.path, e)
            self._index = self._rebuild_index()
        self._index_dirty = True
        if time.monotonic() - self._index_saved_at >= INDEX_SAVE_INTERVAL_S:  # else when the writer lets go
            self._save_index()

    # ----------------------------------------------------------------------------------------------- reading

    def summaries(self) -> SummaryShelf:
        """The map's summaries (summaries.py)."""
        return SummaryShelf(self)

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
        return [self._checked(r) for r in rows]

    def get_events(self, event_ids: list[int], damaged: list[EventDamagedError] | None = None) -> list[EventRecord]:
        """Events in the order of `event_ids`; ids no longer in the store (stale index of a reader) are skipped.
        A damaged event raises EventDamagedError, or with `damaged` is left out and its error appended there."""
        found: dict[int, EventRecord] = {}
        unique = list(dict.fromkeys(int(i) for i in event_ids))
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._conn.execute(f"SELECT {_EVENT_COLS} FROM events WHERE id IN ({marks})", chunk):
                event = self._checked(row, damaged)
                if event is not None:
                    found[row[0]] = event
        return [dataclasses.replace(found[i]) for i in map(int, event_ids) if i in found]

    def event_at(self, document_id: int, ordinal: int, damaged: list[EventDamagedError] | None = None
                 ) -> EventRecord | None:
        """The event at `ordinal` of a document, None if there is none (or, with `damaged`, if it is damaged)."""
        row = self._conn.execute(
            f"SELECT {_EVENT_COLS} FROM events WHERE document_id = ? AND ordinal = ?", (document_id, ordinal)
        ).fetchone()
        return None if row is None else self._checked(row, damaged)

    def _checked(self, row: tuple, damaged: list[EventDamagedError] | None = None) -> EventRecord | None:
        """The event of an _EVENT_COLS row whose checksum matches (NULL: written by an older epi, unchecked);
        EventDamagedError naming it and its document otherwise, so no altered text reaches a quote or an answer.
        With `damaged`, the error is appended there instead and None returned: an answer can go on without it."""
        if row[-1] is not None and row[-1] != _row_checksum(row):
            error = self._damaged_event(row[0], row[1])
            if damaged is None:
                raise error
            if all(e.event_id != error.event_id for e in damaged):
                damaged.append(error)
            return None
        return _event(row)

    def _damaged_event(self, event_id: int, document_id: int) -> EventDamagedError:
        shown = self._conn.execute("SELECT display_path FROM documents WHERE id = ?", (document_id,)).fetchone()
        name = shown[0] if shown else f"document {document_id}"
        return EventDamagedError(
            f"event {event_id} of {name} is damaged in store '{self.path}': its text or place no longer matches its "
            f"checksum. Ingest {name} again (same store) to restore it; `epi doctor` lists every damaged event.",
            event_id, name)

    def damaged_events(self, document_id: int | None = None) -> list[tuple[int, str]]:
        """(event id, document display path) of every event, or every event of one document, whose row no longer
        matches its checksum: what `epi doctor` names, and what makes an unchanged file's ingest read it again."""
        sql = f"SELECT {_EVENT_COLS} FROM events" + ("" if document_id is None else " WHERE document_id = ?")
        rows = self._conn.execute(sql, () if document_id is None else (document_id,))
        bad = [(row[0], row[1]) for row in rows if row[-1] is not None and row[-1] != _row_checksum(row)]
        return [(event_id, self._damaged_event(event_id, doc_id).document) for event_id, doc_id in bad]

    def search_dense(self, query: np.ndarray, k: int, within: set[int] | None = None) -> list[tuple[int, float]]:
        """The k events most similar to `query`; with `within`, only among those event ids (a chapter, a document):
        exact over their stored vectors when they are few, else the index's search with a filter."""
        vec = np.asarray(query, dtype=np.float32).reshape(-1)
        if vec.shape != (self.identity.embed_dim,):
            raise ValueError(f"query must have {self.identity.embed_dim} values, got {vec.shape[0]}")
        if within is None:
            return self._index.search(vec, k)
        if not within or k <= 0:
            return []
        if len(within) <= EXACT_SEARCH_MAX:
            found, vectors = self._vectors_of(sorted(within))
            if not len(found):
                return []
            scores = vectors @ vec
            best = np.argsort(-scores, kind="stable")[:k]
            return [(int(found[i]), float(scores[i])) for i in best]
        return self._index.search(vec, k, allowed=within)

    def search_lexical(self, query: str, k: int, within: set[int] | None = None) -> list[tuple[int, float]]:
        match = fts5_query(query)
        if not match or k <= 0 or (within is not None and not within):
            return []
        if within is None:
            rows = self._conn.execute(
                "SELECT rowid, bm25(events_fts, 1.0, ?) AS s FROM events_fts WHERE events_fts MATCH ? ORDER BY s LIMIT ?",
                (PLACE_WEIGHT, match, k),
            )
        else:  # the ids travel as one JSON array: no limit on how many
            rows = self._conn.execute(
                "SELECT rowid, bm25(events_fts, 1.0, ?) AS s FROM events_fts WHERE events_fts MATCH ? "
                "AND rowid IN (SELECT value FROM json_each(?)) ORDER BY s LIMIT ?",
                (PLACE_WEIGHT, match, json.dumps(sorted(within)), k),
            )
        return [(int(r[0]), -float(r[1])) for r in rows]

    def event_places(self, document_ids: list[int] | None = None) -> list[tuple]:
        """(event id, document id, ordinal, page_start, page_end, line_start, line_end, section) of every event, or
        of the given documents' events: what a question's scope (a chapter, a page, a symbol) is matched against."""
        sql = "SELECT id, document_id, ordinal, page_start, page_end, line_start, line_end, section FROM events"
        if document_ids is None:
            return self._conn.execute(sql).fetchall()
        return self._conn.execute(sql + " WHERE document_id IN (SELECT value FROM json_each(?))",
                                  (json.dumps(sorted(document_ids)),)).fetchall()

    # ------------------------------------------------------------------------------------------ KV tiers

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _set_meta(self, key: str, value: str) -> None:
        with self.writer(), self._transaction("configuring"):
            self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    @property
    def kv_budget(self) -> int:
        """Bytes all KV tiers of this store may hold together (docs/store-format.md, "The KV budget")."""
        value = self._meta("kv_budget_bytes")
        return DEFAULT_KV_BUDGET_BYTES if value is None else int(value)

    def set_kv_budget(self, n_bytes: int) -> None:
        if n_bytes < 0:
            raise ValueError("the KV budget cannot be negative")
        self._set_meta("kv_budget_bytes", str(int(n_bytes)))

    @property
    def kv_block_kind(self) -> str:
        """How new KV blocks are stored (f16, q8_0, q4_0): part of each tier's key."""
        return self._meta("kv_block_kind") or "q8_0"

    def set_kv_block_kind(self, kind: str) -> None:
        if kind not in BLOCK_KINDS:
            raise ValueError(f"unknown KV block kind {kind!r}")
        if kind != self._meta("kv_block_kind"):
            self._set_meta("kv_block_kind", kind)

    def note_retrieved(self, event_ids: list[int]) -> None:
        """Count an answer's retrieved events (store/retrieval_log.py: `epi warm` prepares the most retrieved first)."""
        retrieval_log.record(self.path, event_ids)

    def retrieval_counts(self) -> dict[int, int]:
        return retrieval_log.counts(self.path)

    def kv_space(self) -> KVSpace:
        """The KV tiers; their writers read the budget from the database at each write (see change_kv_budget)."""
        return KVSpace(self.path / KV_DIR, lambda: self.kv_budget)

    def change_kv_budget(self, n_bytes: int) -> int:
        """Record a new KV budget, evicting least recently used blocks down to it first, under the KV space's lock
        that every block write takes: a writer running meanwhile (another process's answer) keeps to the new budget
        from its next block on, and the files never exceed the budget in force. Bytes evicted."""
        if n_bytes < 0:
            raise ValueError("the KV budget cannot be negative")
        return self.kv_space().change_budget(n_bytes, self.set_kv_budget)

    def has_document_content(self, content_sha256: str) -> bool:
        """Whether a stored document has this content (read from the last commit: a removal by another process
        is seen as soon as it is committed)."""
        row = self._conn.execute("SELECT 1 FROM documents WHERE content_sha256 = ? LIMIT 1",
                                 (content_sha256,)).fetchone()
        return row is not None

    def live_block_keys(self) -> set[bytes]:
        """The block key of every event in the archive: what a tier may keep (kv_tier.identity.block_key)."""
        rows = self._conn.execute("SELECT d.content_sha256, e.char_start, e.char_end FROM events e "
                                  "JOIN documents d ON d.id = e.document_id")
        live = {block_key(sha, c0, c1) for sha, c0, c1 in rows}
        # the map's summaries, read from their own blocks (summaries.py)
        summaries = self._conn.execute("SELECT id, content_sha256 FROM summaries")
        return live | {summary_block_key(i, sha) for i, sha in summaries}

    def events_by_block_key(self) -> dict[bytes, tuple[int, str]]:
        """block key -> (event id, document display path), to name the events of damaged blocks."""
        rows = self._conn.execute("SELECT e.id, d.display_path, d.content_sha256, e.char_start, e.char_end "
                                  "FROM events e JOIN documents d ON d.id = e.document_id")
        return {block_key(sha, c0, c1): (event_id, display) for event_id, display, sha, c0, c1 in rows}

    def kv_garbage(self) -> tuple[int, int]:
        """(blocks, bytes) of KV blocks no event names (a document removed while an answer prepared its blocks);
        a block of an ingest not yet committed looks the same, so the caller holds the writer lock."""
        live = self.live_block_keys()
        dead = [f.size for f in self.kv_space().block_files() if f.key not in live]
        return len(dead), sum(dead)

    def remove_leftover_temporaries(self) -> list[tuple[Path, int]]:
        """Remove the temporary index files of saves cut short (kill -9: `.index.hnsw.<pid>.tmp`); (path, size) of
        each. Only a writer saves the index, so under the writer lock none is in use."""
        removed = []
        with self.writer():
            for tmp in self.path.glob(f".{INDEX_NAME}.*.tmp"):
                try:
                    size = tmp.stat().st_size
                    tmp.unlink()
                except FileNotFoundError:
                    continue
                removed.append((tmp, size))
        return removed

    def collect_kv_garbage(self) -> tuple[int, int]:
        """Remove the KV blocks no event of the archive names any more (removed or replaced documents, an ingest
        interrupted before its commit); (blocks, bytes) removed. The caller holds the writer lock."""
        return self.kv_space().collect_garbage(self.live_block_keys())

    def vacuum(self) -> None:
        """Give the space of removed rows back to the filesystem (VACUUM needs the writer lock and free disk about
        the size of the database)."""
        with self.writer():
            try:
                self._conn.execute("VACUUM")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as e:
                if _is_disk_full(e):
                    raise StoreError(f"disk full while compacting store '{self.path}'; nothing was changed.") from e
                raise

    # ---------------------------------------------------------------------------------------------- doctor

    def stats(self) -> dict:
        n_documents, n_tokens = self._conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(n_tokens), 0) FROM documents"
        ).fetchone()
        n_events = self._conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        kv_dir = self.path / KV_DIR
        disk_bytes = sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file() and kv_dir not in f.parents)
        return {
            "path": str(self.path),
            "format_version": STORE_FORMAT_VERSION,
            "n_documents": n_documents,
            "n_events": n_events,
            "n_tokens": n_tokens,
            "disk_bytes": disk_bytes,
            "index_live": self._index.n_live,
            "index_deleted": self._index.n_deleted,
        }

    def health(self) -> list[str]:
        problems: list[str] = []
        result = [r[0] for r in self._conn.execute("PRAGMA integrity_check")]
        if result != ["ok"]:
            problems.append(f"SQLite integrity_check failed: {'; '.join(result[:5])}; re-ingest into --store NEW.")
        try:
            self._conn.execute("INSERT INTO events_fts(events_fts) VALUES ('integrity-check')")
        except (sqlite3.DatabaseError, StoreDamagedError) as e:  # a corrupt FTS5 table is SQLITE_CORRUPT_VTAB
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
        opened_with = self.index_rebuilt  # what this process's open found, before its rebuild was saved
        self._index = DenseIndex.empty(self.path / INDEX_NAME, self.identity.embed_dim)
        self._index_loaded = False
        reason = self._sync_index() or opened_with
        if reason == "out of date":
            problems.append(f"dense index ({INDEX_NAME}) was out of date; brought it up to date from SQLite.")
        elif reason:
            problems.append(f"dense index ({INDEX_NAME}) was {reason}; rebuilt it from SQLite.")
        if not (self.path / KV_DIR).is_dir():
            problems.append(f"{KV_DIR}/ directory was missing; recreated it.")
            (self.path / KV_DIR).mkdir(exist_ok=True)
        return problems
