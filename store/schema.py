"""SQLite schema as an ordered list of migrations (recorded in `_migrations`, like simonw/llm).

Never edit or reorder an applied migration: append a new function instead. Changes that make old stores unreadable
bump STORE_FORMAT_VERSION rather than adding a migration. A migration's SQL is written out as it was on the day it
was added, never taken from a module's constant: a later change to that constant would change what an old migration
builds, and a fresh store would no longer equal an upgraded one (tests/test_migrations.py). The row transforms they
call (lexical.fts5_document, checksum.event_checksum) compute what a fresh ingest computes today.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Callable

from . import lexical
from .checksum import CHECKED_COLUMNS, event_checksum

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(conn: sqlite3.Connection) -> None:
    statements = [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE documents (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            path TEXT NOT NULL UNIQUE,
            display_path TEXT NOT NULL,
            kind TEXT NOT NULL,
            content_sha256 TEXT NOT NULL,
            n_tokens INTEGER NOT NULL,
            n_events INTEGER NOT NULL,
            n_pages INTEGER,
            n_lines INTEGER,
            ingest_seconds REAL NOT NULL,
            ingested_at REAL NOT NULL
        )""",
        # AUTOINCREMENT: event ids are hnswlib labels, so they must never be reused after a delete.
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            token_start INTEGER NOT NULL,
            token_end INTEGER NOT NULL,
            char_start INTEGER NOT NULL,
            char_end INTEGER NOT NULL,
            page_start INTEGER,
            page_end INTEGER,
            line_start INTEGER,
            line_end INTEGER,
            surprise_mean REAL NOT NULL,
            surprise_max REAL NOT NULL,
            text TEXT NOT NULL,
            embedding BLOB NOT NULL,
            UNIQUE (document_id, ordinal)
        )""",
        # Own-content FTS5 table (rowid = event id) so the indexed text can carry the parts of snake_case identifiers
        # next to the whole identifier; '_' as a token char keeps identifiers like max_retries one token.
        """CREATE VIRTUAL TABLE events_fts USING fts5(text, tokenize="unicode61 tokenchars '_'")""",
    ]
    for sql in statements:
        conn.execute(sql)


@migration
def m002_event_kv_blocks(conn: sqlite3.Connection) -> None:
    # Where each event's KV block lives in kv/blocks.ekv (None: no block, kv mode falls back to the event's text).
    conn.execute("ALTER TABLE events ADD COLUMN kv_offset INTEGER")
    conn.execute("ALTER TABLE events ADD COLUMN kv_length INTEGER")


@migration
def m003_event_rep_keys(conn: sqlite3.Connection) -> None:
    # Each event's representative keys (rep_keys.py layout); NULL for events stored without a KV block.
    conn.execute("ALTER TABLE events ADD COLUMN rep_keys BLOB")


@migration
def m004_document_segmenter(conn: sqlite3.Connection) -> None:
    # Format 2: the archive is model-independent; each document records which model cut its events (token spans are
    # in that model's tokens). events.kv_offset/kv_length/rep_keys (m002, m003) are no longer used: KV blocks and
    # their representative keys live in the per-model tiers under kv/, and stay NULL.
    conn.execute("ALTER TABLE documents ADD COLUMN segmenter TEXT")


@migration
def m005_event_section(conn: sqlite3.Connection) -> None:
    # Where each event sits in its document's structure (chapter/section headings, enclosing class/function): a small
    # JSON object written at ingest (engine/documents/structure.py, docs/store-format.md). NULL for events stored before it and
    # for events no heading or definition encloses; citations then show the document and pages/lines alone.
    conn.execute("ALTER TABLE events ADD COLUMN section TEXT")


@migration
def m006_document_checkpoints(conn: sqlite3.Connection) -> None:
    # Ingest commits a long document in groups of events: `status` is 'partial' while it is being read (NULL: complete)
    # and `checkpoint` holds what a resumed ingest needs to go on from the last group (engine/ingest/checkpoint.py).
    conn.execute("ALTER TABLE documents ADD COLUMN status TEXT")
    conn.execute("ALTER TABLE documents ADD COLUMN checkpoint TEXT")


@migration
def m007_lexical_identifier_parts_and_places(conn: sqlite3.Connection) -> None:
    # The lexical index splits camelCase identifiers as well as snake_case ones and gains a `place` column (the
    # document's path, the headings or class/function around the event): lexical.py. Rebuilt from the stored events,
    # so a store written before it answers from the new index at once, without re-ingesting.
    conn.execute("DROP TABLE events_fts")
    conn.execute("""CREATE VIRTUAL TABLE events_fts USING fts5(text, place, tokenize="unicode61 tokenchars '_'")""")
    rows = conn.execute("SELECT e.id, e.text, e.section, d.display_path FROM events e "
                        "JOIN documents d ON d.id = e.document_id")
    conn.executemany("INSERT INTO events_fts (rowid, text, place) VALUES (?, ?, ?)",
                     ((event_id, lexical.fts5_document(text), lexical.place_text(shown, section))
                      for event_id, text, section, shown in rows))


@migration
def m008_event_checksums(conn: sqlite3.Connection) -> None:
    # A checksum of each event's text and anchors (checksum.py), checked when the row is read and by `epi doctor`.
    # Rows stored before it get theirs now, from what they hold; a row an older epi writes later has NULL: unchecked.
    conn.execute("ALTER TABLE events ADD COLUMN checksum INTEGER")
    rows = conn.execute(f"SELECT id, {', '.join(CHECKED_COLUMNS)} FROM events").fetchall()
    conn.executemany("UPDATE events SET checksum = ? WHERE id = ?", ((event_checksum(r[1:]), r[0]) for r in rows))


@migration
def m009_summaries(conn: sqlite3.Connection) -> None:
    # The map (summaries.py): an answer model's summaries of parts, documents and collections, searched by overview
    # questions as events are by lookups.
    statements = [
        """CREATE TABLE summaries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id INTEGER REFERENCES documents(id) ON DELETE CASCADE,  -- NULL: a collection's summary
        level TEXT NOT NULL,          -- part | document | collection
        key TEXT NOT NULL UNIQUE,     -- what it covers: document id + section path, or the collection's folder
        label TEXT NOT NULL,          -- how a citation names what it covers: 'ch. 3 "The Betrayal"', 'src/'
        first_ordinal INTEGER, last_ordinal INTEGER,
        page_start INTEGER, page_end INTEGER, line_start INTEGER, line_end INTEGER,
        n_tokens INTEGER NOT NULL,    -- tokens of the document it covers
        model TEXT NOT NULL,          -- the model that wrote it
        content_sha256 TEXT NOT NULL, -- the content it was written from (a collection: a hash of its documents')
        text TEXT NOT NULL,
        embedding BLOB NOT NULL,
        created_at REAL NOT NULL
    )""",
        "CREATE INDEX summaries_document ON summaries(document_id)",
        """CREATE VIRTUAL TABLE summaries_fts USING fts5(text, place, tokenize="unicode61 tokenchars '_'")""",
    ]
    for sql in statements:
        conn.execute(sql)


@migration
def m010_lexical_stemming(conn: sqlite3.Connection) -> None:
    # The lexical tables stem with FTS5's porter stemmer (lexical.py says why). Their rows are copied as they are into
    # tables made with it, so a store written before answers from the stemmed index at once, without re-ingesting.
    for table in ("events_fts", "summaries_fts"):
        rows = conn.execute(f"SELECT rowid, text, place FROM {table}").fetchall()
        conn.execute(f"DROP TABLE {table}")
        conn.execute(f"""CREATE VIRTUAL TABLE {table} USING fts5(text, place,
                         tokenize="porter unicode61 tokenchars '_'")""")
        conn.executemany(f"INSERT INTO {table} (rowid, text, place) VALUES (?, ?, ?)", rows)


def _applied(conn: sqlite3.Connection) -> set[str]:
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='_migrations'").fetchone()
    if not exists:
        return set()
    return {row[0] for row in conn.execute("SELECT name FROM _migrations")}


def pending(conn: sqlite3.Connection) -> list[Migration]:
    """Read-only check, so readers never take the write lock on an up-to-date store."""
    done = _applied(conn)
    return [m for m in MIGRATIONS if m.__name__ not in done]


def migrate(conn: sqlite3.Connection) -> None:
    """Apply pending migrations in one IMMEDIATE transaction (connection must be in autocommit mode)."""
    if not pending(conn):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        for m in pending(conn):  # re-read inside the lock: another process may have migrated meanwhile
            m(conn)
            conn.execute("INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", (m.__name__, time.time()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
