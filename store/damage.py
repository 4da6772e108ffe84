"""A SQLite connection that turns SQLite's "the file is damaged" errors into one StoreDamagedError naming the store.

A damaged page can surface from any query at any row (a cursor reads pages as it goes), so the translation sits
under every query instead of around each command; the commands then end with one line, never a traceback.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .records import StoreDamagedError

# Primary result codes (the low byte of an extended code): SQLITE_CORRUPT and SQLITE_NOTADB.
DAMAGE_CODES = (11, 26)


def is_damage(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF in DAMAGE_CODES


def damaged_error(path: Path, exc: BaseException) -> StoreDamagedError:
    return StoreDamagedError(
        f"store '{path}' is damaged: its database file says \"{exc}\". Nothing was changed; `epi doctor --store "
        f"{path}` says what can still be read. Re-ingest the documents into --store NEW to rebuild it.")


class _Cursor(sqlite3.Cursor):
    store_path: Path

    def _damage(self, exc: sqlite3.DatabaseError) -> BaseException:
        return damaged_error(self.store_path, exc) if is_damage(exc) else exc

    def execute(self, *args):
        try:
            return super().execute(*args)
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from exc

    def executemany(self, *args):
        try:
            return super().executemany(*args)
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from exc

    def __next__(self):
        try:
            return super().__next__()
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from exc

    def fetchone(self):
        try:
            return super().fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from exc

    def fetchmany(self, *args):
        try:
            return super().fetchmany(*args)
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from exc

    def fetchall(self):
        try:
            return super().fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._damage(exc) from exc


class DamageAwareConnection(sqlite3.Connection):
    """sqlite3.connect(..., factory=DamageAwareConnection); `store_path` names the store in the message."""

    store_path: Path = Path(".")

    def cursor(self, factory=_Cursor):
        cur = super().cursor(factory)
        cur.store_path = self.store_path
        return cur

    # Connection.execute does not go through cursor(): route it there so its rows are translated too.
    def execute(self, sql, parameters=()):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql, parameters):
        return self.cursor().executemany(sql, parameters)


def readable_parts(path: Path, db_name: str) -> list[str]:
    """What can still be read from a damaged store, document by document, reading it without changing it: what
    doctor shows so that a user knows which documents to re-ingest (and that the rest still answers)."""
    try:
        conn = sqlite3.connect(f"{(path / db_name).as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [f"the database cannot be opened at all ({exc})"]
    try:
        try:
            docs = conn.execute("SELECT id, display_path FROM documents ORDER BY display_path").fetchall()
        except sqlite3.DatabaseError as exc:
            return [f"the list of documents is unreadable ({exc})"]
        lines = []
        for doc_id, display in docs:
            try:
                n = conn.execute("SELECT COUNT(*), SUM(length(text)), SUM(length(embedding)) FROM events "
                                 "WHERE document_id = ?", (doc_id,)).fetchone()[0]
                lines.append(f"{display}: {n} events readable")
            except sqlite3.DatabaseError as exc:
                lines.append(f"{display}: its events are unreadable ({exc}); re-ingest it")
        return lines or ["no documents recorded"]
    finally:
        conn.close()
