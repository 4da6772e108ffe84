"""The map: summaries written by an answer model, one per part of a document (a chapter, a section, a code file's
whole) and one per section inside a part (a chapter's sections), one per document from its parts' summaries, and
one per collection (the documents under one ingested folder) from its documents'. Stored beside the events,
searched by overview questions (dense: exact over the stored vectors, they are few; lexical: FTS5), removed with
their document (ON DELETE CASCADE, and `delete_for_document` for the FTS rows), and known stale when the document's
content changed since (`content_sha256`; a collection's: its documents' hashes, `current_collections`).

A summary is not an event: it has no KV block, no ordinal and no neighbours, so nothing that walks a document's
events (ingest, warm, doctor, the KV garbage collector) ever meets one.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import time
from dataclasses import dataclass

import numpy as np

from .kv_tier import block_key
from .lexical import fts5_document, fts5_query
from .records import DocumentRecord

# A section is one heading below a part (a chapter's sections): summarised beside its part, not into it.
SECTION, PART, DOCUMENT, COLLECTION = "section", "part", "document", "collection"

# The tables (summaries, summaries_fts) are made by schema.py's migrations m009 and m010.

_COLS = ("id, document_id, level, key, label, first_ordinal, last_ordinal, page_start, page_end, line_start, "
         "line_end, n_tokens, model, content_sha256, text, embedding, created_at")


@dataclass
class SummaryRecord:
    level: str
    key: str
    label: str
    text: str
    model: str
    content_sha256: str
    n_tokens: int
    document_id: int | None = None
    first_ordinal: int | None = None
    last_ordinal: int | None = None
    page_start: int | None = None
    page_end: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    embedding: np.ndarray | None = None
    id: int | None = None
    created_at: float = 0.0

    @property
    def embedding_text(self) -> str:
        """What a summary's vector is made from: its label names the part, which the text itself may not."""
        return f"{self.label}: {self.text}"


def part_key(document_id: int, path: list | None) -> str:
    """A part's key: its document and its section path ([] for a document read as one part)."""
    return f"part:{document_id}:{json.dumps(path or [], ensure_ascii=False)}"


def summary_path(summary: SummaryRecord) -> list | None:
    """The section path a part's or section's summary covers (part_key's), [] for a document read as one part; None
    for a document's or a collection's summary."""
    kind, _, rest = summary.key.partition(":")
    return json.loads(rest.partition(":")[2]) if kind == "part" else None


def document_key(document_id: int) -> str:
    return f"document:{document_id}"


def collection_key(folder: str) -> str:
    return f"collection:{folder}"


def collection_sha(content_sha256s: list[str]) -> str:
    """What a collection's summary was written from: its documents' contents, in order."""
    return hashlib.sha256("\n".join(sorted(content_sha256s)).encode()).hexdigest()


def collections(documents: list[DocumentRecord]) -> dict[str, list[DocumentRecord]]:
    """Folder -> its documents, for the collections' summaries: the deepest folder holding every document (what the
    archive is), and each folder right under it holding two documents or more (a codebase beside a book, say)."""
    docs = [d for d in documents if d.status == "complete"]
    if len(docs) < 2:
        return {}
    dirs = [posixpath.dirname(d.display_path.replace(os.sep, "/")) for d in docs]
    try:
        common = posixpath.commonpath(dirs) if all(x.startswith("/") for x in dirs) or not any(
            x.startswith("/") for x in dirs) else ""
    except ValueError:
        common = ""
    out = {(common.rstrip("/") + "/") if common else "./": docs}
    children: dict[str, list[DocumentRecord]] = {}
    for d, folder in zip(docs, dirs):
        rest = folder[len(common):].lstrip("/")
        if rest:
            child = posixpath.join(common, rest.split("/")[0]) if common else rest.split("/")[0]
            children.setdefault(child.rstrip("/") + "/", []).append(d)
    out.update({f: m for f, m in children.items() if len(m) >= 2 and len(m) < len(docs)})
    return out


def current_collections(documents) -> dict[str, str]:
    """The collections' keys the documents make now, each with the content hash its summary must have been written
    from: a collection summary under another key, or with another hash, describes documents that changed or went."""
    return {collection_key(folder): collection_sha([d.content_sha256 for d in members])
            for folder, members in collections(documents).items()}


def summary_block_key(summary_id: int, content_sha256: str) -> bytes:
    """The key of a summary's KV block in an answer model's tier: negative character spans never name an event."""
    return block_key(content_sha256, -int(summary_id), -1)


def _record(row: tuple) -> SummaryRecord:
    return SummaryRecord(id=row[0], document_id=row[1], level=row[2], key=row[3], label=row[4], first_ordinal=row[5],
                         last_ordinal=row[6], page_start=row[7], page_end=row[8], line_start=row[9], line_end=row[10],
                         n_tokens=row[11], model=row[12], content_sha256=row[13], text=row[14],
                         embedding=np.frombuffer(row[15], dtype=np.float32), created_at=row[16])


class SummaryShelf:
    """The summaries of one store (its connection); writes go through the store's writer lock and transactions."""

    def __init__(self, store):
        self.store = store
        self._conn = store._conn

    def put(self, summary: SummaryRecord, place: str = "") -> SummaryRecord | None:
        """Add a summary, replacing any earlier one of the same key (a remade map); None, and nothing written, when
        its document was removed or changed since the summary was made from it."""
        vec = np.asarray(summary.embedding, dtype=np.float32).reshape(-1)
        if vec.shape != (self.store.identity.embed_dim,) or not np.all(np.isfinite(vec)):
            raise ValueError("a summary needs a finite embedding of the store's dimension")
        with self.store.writer(), self.store._transaction("writing a summary to"):
            if summary.document_id is not None:  # removed or changed (an ingest beside `epi map`) since it was read
                row = self._conn.execute("SELECT content_sha256 FROM documents WHERE id = ?",
                                         (summary.document_id,)).fetchone()
                if row is None or row[0] != summary.content_sha256:
                    return None
            self._delete_where("key = ?", (summary.key,))
            cur = self._conn.execute(
                f"INSERT INTO summaries ({_COLS.replace('id, ', '', 1)}) VALUES ({', '.join('?' * 16)})",
                (summary.document_id, summary.level, summary.key, summary.label, summary.first_ordinal,
                 summary.last_ordinal, summary.page_start, summary.page_end, summary.line_start, summary.line_end,
                 summary.n_tokens, summary.model, summary.content_sha256, summary.text, vec.tobytes(), time.time()))
            self._conn.execute("INSERT INTO summaries_fts (rowid, text, place) VALUES (?, ?, ?)",
                               (cur.lastrowid, fts5_document(summary.text), f"{summary.label} {place}".strip()))
        summary.id = cur.lastrowid
        return summary

    def get(self, key: str) -> SummaryRecord | None:
        row = self._conn.execute(f"SELECT {_COLS} FROM summaries WHERE key = ?", (key,)).fetchone()
        return None if row is None else _record(row)

    def of_document(self, document_id: int) -> list[SummaryRecord]:
        rows = self._conn.execute(f"SELECT {_COLS} FROM summaries WHERE document_id = ? ORDER BY first_ordinal, id",
                                  (document_id,))
        return [_record(r) for r in rows]

    def all(self, level: str | None = None) -> list[SummaryRecord]:
        sql = f"SELECT {_COLS} FROM summaries" + (" WHERE level = ?" if level else "") + " ORDER BY id"
        return [_record(r) for r in self._conn.execute(sql, (level,) if level else ())]

    def count(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM summaries").fetchone()[0]

    def delete_for_document(self, document_id: int) -> None:
        """Inside the caller's transaction: the FTS rows first (the CASCADE removes the summaries' own rows)."""
        self._delete_where("document_id = ?", (document_id,))

    def delete(self, key: str) -> None:
        self.delete_keys([key])

    def delete_keys(self, keys: list[str]) -> None:
        if not keys:
            return
        with self.store.writer(), self.store._transaction("removing summaries from"):
            for key in keys:
                self._delete_where("key = ?", (key,))

    def _delete_where(self, condition: str, args: tuple) -> None:
        self._conn.execute(f"DELETE FROM summaries_fts WHERE rowid IN (SELECT id FROM summaries WHERE {condition})",
                           args)
        self._conn.execute(f"DELETE FROM summaries WHERE {condition}", args)

    # -- search ---------------------------------------------------------------------------------------------------

    def search_dense(self, query: np.ndarray, k: int, level: str | None = None) -> list[tuple[int, float]]:
        """The k summaries most similar to `query` (exact: a map holds one summary per chapter or file)."""
        sql = "SELECT id, embedding FROM summaries" + (" WHERE level = ?" if level else "")
        rows = self._conn.execute(sql, (level,) if level else ()).fetchall()
        if not rows or k <= 0:
            return []
        vectors = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
        scores = vectors @ np.asarray(query, dtype=np.float32).reshape(-1)
        best = np.argsort(-scores, kind="stable")[:k]
        return [(int(rows[i][0]), float(scores[i])) for i in best]

    def search_lexical(self, query: str, k: int) -> list[tuple[int, float]]:
        match = fts5_query(query)
        if not match or k <= 0:
            return []
        rows = self._conn.execute("SELECT rowid, bm25(summaries_fts) AS s FROM summaries_fts WHERE summaries_fts "
                                  "MATCH ? ORDER BY s LIMIT ?", (match, k))
        return [(int(r[0]), -float(r[1])) for r in rows]
