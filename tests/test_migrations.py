"""Migrations are frozen: an old store upgraded in two steps (by two later epis) equals the same store upgraded in
one, and its schema equals a new store's, row for row and statement for statement. A migration that read a module's
live constant (m007 took today's stemmed lexical table, which m010 then rebuilt) is caught here."""
from __future__ import annotations

import sqlite3
import struct

from episodic_cli.store import schema
from episodic_cli.store.checksum import CHECKED_COLUMNS


def _old_store(path, upto: str) -> sqlite3.Connection:
    """A store as the epi that stopped at migration `upto` left it, with a document and two events in it."""
    conn = sqlite3.connect(path, isolation_level=None)
    names = [m.__name__ for m in schema.MIGRATIONS]
    older = schema.MIGRATIONS[: names.index(upto) + 1]
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for m in older:
        m(conn)
        conn.execute("INSERT INTO _migrations VALUES (?, 0)", (m.__name__,))
    conn.execute("INSERT INTO documents (path, display_path, kind, content_sha256, n_tokens, n_events, n_pages, "
                 "n_lines, ingest_seconds, ingested_at) VALUES ('/d/a.py', 'a.py', 'code', 'ab', 20, 2, NULL, 9, 1, 0)")
    vector = struct.pack("<4f", 0.1, 0.2, 0.3, 0.4)
    for i, text in enumerate(["def parseHTTPHeader(max_retries): classes used", "the keeper's lanterns"]):
        conn.execute("INSERT INTO events (document_id, ordinal, token_start, token_end, char_start, char_end, "
                     "line_start, line_end, surprise_mean, surprise_max, text, embedding) "
                     "VALUES (1, ?, ?, ?, ?, ?, 1, 4, 1.0, 2.0, ?, ?)", (i, 10 * i, 10 * i + 10, 40 * i, 40 * i + 40,
                                                                      text, vector))
        conn.execute("INSERT INTO events_fts (rowid, text) VALUES (?, ?)", (i + 1, text))
    return conn


def _upgrade(conn: sqlite3.Connection, upto: str | None, monkeypatch) -> None:
    """What the epi whose last migration is `upto` (None: today's) does when it opens the store."""
    names = [m.__name__ for m in schema.MIGRATIONS]
    with monkeypatch.context() as mp:
        if upto is not None:
            mp.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[: names.index(upto) + 1])
        schema.migrate(conn)


def _dump(conn: sqlite3.Connection) -> list[str]:
    """Every statement that rebuilds the database, the migrations' applied times left out."""
    conn.execute("UPDATE _migrations SET applied_at = 0")
    return list(conn.iterdump())


def _schema(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall())


def test_an_old_store_upgraded_twice_equals_one_upgraded_once(tmp_path, monkeypatch):
    once = _old_store(tmp_path / "once.sqlite3", "m006_document_checkpoints")
    twice = _old_store(tmp_path / "twice.sqlite3", "m006_document_checkpoints")
    _upgrade(once, None, monkeypatch)
    _upgrade(twice, "m008_event_checksums", monkeypatch)
    _upgrade(twice, None, monkeypatch)
    assert _dump(once) == _dump(twice)
    assert not schema.pending(once)

    # and a store upgraded from its start has the tables, columns and SQL a new store has
    new = sqlite3.connect(tmp_path / "new.sqlite3", isolation_level=None)
    schema.migrate(new)
    assert _schema(once) == _schema(new)

    # what the migrations rebuilt from the rows: identifier parts and places indexed, words stemmed, checksums set
    hits = once.execute("SELECT rowid FROM events_fts WHERE events_fts MATCH 'header AND class'").fetchall()
    assert hits == [(1,)]
    rows = once.execute(f"SELECT checksum, {', '.join(CHECKED_COLUMNS)} FROM events").fetchall()
    assert all(r[0] is not None for r in rows)


def test_each_migration_names_its_sql_literally():
    """No migration builds a table from a module's constant (which a later change would move under it)."""
    import inspect

    for m in schema.MIGRATIONS:
        source = inspect.getsource(m)
        assert "CREATE_TABLE" not in source and "CREATE_STATEMENTS" not in source and "TOKENIZE" not in source, \
            m.__name__
