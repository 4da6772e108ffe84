"""The engine end to end on the REAL bundled model and embedder: ingest, retrieval with citations, re-ingest,
replace, remove, per-document atomicity, event bounds, and the store's model check. Inputs stay small."""
from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest
from typer.testing import CliRunner

from conftest import (
    PDF_FACT,
    PDF_FACT_PAGE,
    PDF_QUESTION,
    TEXT_FACT,
    TEXT_FACT_LINE,
    TEXT_QUESTION,
    prose_lines,
    workspace_for,
)
from episodic_cli.app import app
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.documents.sources import discover, load_document
from episodic_cli.store import Store, StoreIdentity
from episodic_cli.store import episodic_store

SMALL = SegmentParams(min_tokens=32, max_tokens=96)


def _events_by_doc(store_dir):
    with Store.open_existing(store_dir) as st:
        return {d.path: (d, st.events_of(d.id)) for d in st.documents()}


def _ingest(ws, paths, params=SMALL):
    """Run the real ingest pipeline (what `epi ingest` does) and return the results."""
    st = ws.store_for_writing(params)
    ingestor = ws.ingestor(st, params)
    try:
        with st.writer():
            return list(ingestor.ingest(list(discover(paths))))
    finally:
        ingestor.close()
        st.close()


def _write_prose(path, seed, n_lines=6, extra=""):
    path.write_text("\n".join(prose_lines(seed, n_lines)) + ("\n" + extra if extra else "") + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------ the shared, ingested store


def test_shared_ingest_reports_both_documents(shared_store):
    recs = shared_store.records()
    assert [r["status"] for r in recs] == ["ingested", "ingested"]
    assert [r["path"] for r in recs] == [str(shared_store.pdf), str(shared_store.text)]
    assert all(r["tokens"] > 500 and r["events"] >= 2 for r in recs)


def test_pdf_fact_is_retrieved_and_cited_on_its_page(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        retrieved = ws.retrieve(st, PDF_QUESTION, k=3, neighbours=0)
    hits = [r for r in retrieved if "Orla Venn hid the brass key" in " ".join(r.event.text.split())]
    assert hits, [r.event.text[:80] for r in retrieved]
    ev = hits[0].event
    assert hits[0].score is not None  # found as a hit, not only as a neighbour
    assert hits[0].document.display_path == str(shared_store.pdf)
    assert ev.page_start <= PDF_FACT_PAGE <= ev.page_end
    assert ev.line_start is None and ev.line_end is None
    # The fact's own characters sit on page 3 of the extracted document, inside this event's char span.
    doc = load_document(shared_store.pdf)
    at = doc.text.index(PDF_FACT)
    assert ev.char_start <= at and at + len(PDF_FACT) <= ev.char_end
    assert doc.locate(at, at + len(PDF_FACT))[:2] == (PDF_FACT_PAGE, PDF_FACT_PAGE)


def test_text_fact_is_retrieved_and_cited_at_its_lines(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        retrieved = ws.retrieve(st, TEXT_QUESTION, k=3, neighbours=0)
    hits = [r for r in retrieved if TEXT_FACT in r.event.text]
    assert hits, [r.event.text[:80] for r in retrieved]
    ev = hits[0].event
    assert hits[0].score is not None
    assert ev.page_start is None
    assert ev.line_start <= TEXT_FACT_LINE <= ev.line_end
    lines = shared_store.text.read_text(encoding="utf-8").split("\n")
    assert TEXT_FACT in lines[TEXT_FACT_LINE - 1]
    # The cited line span is exactly the lines the event's text covers.
    cited = "\n".join(lines[ev.line_start - 1 : ev.line_end])
    assert ev.text.strip() in cited
    assert lines[ev.line_start - 1].strip() and lines[ev.line_end - 1].strip()


def test_ask_json_cites_the_text_fact(shared_store, shared_ask):
    assert shared_ask.exit_code == 0, shared_ask.stderr
    out = json.loads(shared_ask.stdout)
    cited = [s for s in out["sources"] if TEXT_FACT in s["text"]]
    assert cited, out["sources"]
    assert cited[0]["document"] == str(shared_store.text)
    assert cited[0]["page_start"] is None
    assert cited[0]["line_start"] <= TEXT_FACT_LINE <= cited[0]["line_end"]
    assert cited[0]["score"] is not None
    assert isinstance(out["text"], str) and out["text"].strip()


def test_events_tile_each_document_and_never_span_two(shared_store):
    """A file boundary is an event boundary: each document's events concatenate to exactly its text."""
    by_doc = _events_by_doc(shared_store.store_dir)
    assert len(by_doc) == 2
    for path, (doc, events) in by_doc.items():
        text = load_document(path).text
        assert [e.ordinal for e in events] == list(range(len(events)))
        assert "".join(e.text for e in events) == text
        assert events[0].char_start == 0 and events[-1].char_end == len(text)
        assert events[0].token_start == 0 and events[-1].token_end == doc.n_tokens
        for a, b in zip(events, events[1:]):
            assert a.char_end == b.char_start and a.token_end == b.token_start
        assert doc.n_events == len(events)
    pdf_text = load_document(shared_store.pdf).text
    text_text = load_document(shared_store.text).text
    for path, (_, events) in by_doc.items():
        other = text_text if path == str(shared_store.pdf) else pdf_text
        assert not any(e.text.strip() and e.text.strip()[:40] in other for e in events if len(e.text.strip()) > 40)


def test_event_token_spans_respect_default_bounds(shared_store):
    p = SegmentParams()
    for _, (doc, events) in _events_by_doc(shared_store.store_dir).items():
        sizes = [e.token_end - e.token_start for e in events]
        assert max(sizes) <= p.max_tokens, sizes
        assert min(sizes) >= p.min_tokens, sizes  # both documents are far longer than 2 x min_tokens
        with Store.open_existing(shared_store.store_dir) as st:
            assert st.identity.segmentation["max_tokens"] == p.max_tokens


# ------------------------------------------------------------------------------- small stores of their own


def test_reingest_unchanged_changed_and_rm(engine, tmp_path):
    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    a = _write_prose(tmp_path / "a.txt", seed=11)
    b = _write_prose(tmp_path / "b.txt", seed=12)

    first = _ingest(ws, [a, b])
    assert [r.status for r in first] == ["ingested", "ingested"]
    before = _events_by_doc(store_dir)
    for _, (_, events) in before.items():
        sizes = [e.token_end - e.token_start for e in events]
        assert len(events) >= 2 and max(sizes) <= SMALL.max_tokens and min(sizes) >= SMALL.min_tokens, sizes

    again = _ingest(ws, [a, b])
    assert [r.status for r in again] == ["unchanged", "unchanged"]
    assert [(r.tokens, r.events) for r in again] == [(r.tokens, r.events) for r in first]
    after = _events_by_doc(store_dir)
    assert {p: [e.id for e in ev] for p, (_, ev) in after.items()} == {p: [e.id for e in ev] for p, (_, ev) in before.items()}

    # Change a: its events are replaced (old ids gone, new text present); b is untouched.
    old_a_ids = [e.id for e in before[str(a.resolve())][1]]
    _write_prose(a, seed=13, extra="The new tide table was signed by Captain Ferro Lindqvist.")
    changed = _ingest(ws, [a, b])
    assert [r.status for r in changed] == ["ingested", "unchanged"]
    now = _events_by_doc(store_dir)
    with Store.open_existing(store_dir) as st:
        assert st.get_events(old_a_ids) == []
        new_ids = {e.id for e in now[str(a.resolve())][1]}
        assert not new_ids & set(old_a_ids)
        assert any("Ferro Lindqvist" in e.text for e in now[str(a.resolve())][1])
        assert [e.id for e in now[str(b.resolve())][1]] == [e.id for e in before[str(b.resolve())][1]]
        assert not {i for i, _ in st.search_dense(engine.embedder.embed_query("tide table"), 50)} & set(old_a_ids)
        assert st.stats()["n_documents"] == 2

    # rm through the CLI: the document, its events and its index entries are gone.
    result = CliRunner().invoke(app, ["rm", str(a), "--store", str(store_dir)])
    assert result.exit_code == 0, result.output
    with Store.open_existing(store_dir) as st:
        assert [d.path for d in st.documents()] == [str(b.resolve())]
        assert st.get_events(sorted(new_ids)) == []
        assert not {i for i, _ in st.search_dense(engine.embedder.embed_query("tide table"), 50)} & new_ids
        assert st.search_lexical("Lindqvist", 10) == []


def test_failed_document_is_rolled_back_others_kept_and_rerun_resumes(engine, tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    files = [_write_prose(tmp_path / f"{name}.txt", seed=20 + i) for i, name in enumerate(["one", "two", "three"])]
    second = str(files[1].resolve())

    real_insert = episodic_store.Store._insert_event
    calls = {"n": 0}

    def flaky_insert(self, document_id, ev, vector, *more):
        # An I/O error on the 2nd event of the 2nd document: its first event is already written. (A full disk
        # stops the whole run instead: tests/test_faults.py.)
        row = self._conn.execute("SELECT path FROM documents WHERE id = ?", (document_id,)).fetchone()
        if row[0] == second and ev.ordinal == 1:
            calls["n"] += 1
            raise sqlite3.OperationalError("disk I/O error")
        return real_insert(self, document_id, ev, vector, *more)

    monkeypatch.setattr(episodic_store.Store, "_insert_event", flaky_insert)
    results = _ingest(ws, files)
    assert calls["n"] == 1
    assert [r.status for r in results] == ["ingested", "failed", "ingested"]
    assert "disk I/O error" in results[1].error and "nothing of this file was stored" in results[1].error
    assert "\n" not in results[1].error
    stored = _events_by_doc(store_dir)
    assert set(stored) == {str(files[0].resolve()), str(files[2].resolve())}
    with Store.open_existing(store_dir) as st:
        # Nothing of the failed document survived the rollback: no document row, no events, no FTS rows.
        n_events = st._conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        assert n_events == sum(len(ev) for _, ev in stored.values())
        assert st._conn.execute("SELECT COUNT(*) FROM events_fts").fetchone()[0] == n_events
        assert st.health() == []

    monkeypatch.setattr(episodic_store.Store, "_insert_event", real_insert)
    rerun = _ingest(ws, files)
    assert [r.status for r in rerun] == ["unchanged", "ingested", "unchanged"]
    assert len(_events_by_doc(store_dir)) == 3


def test_embedder_failure_fails_only_that_document(engine, tmp_path, monkeypatch):
    """A per-document failure raised by a pipeline stage (EpiError class) is reported, and the run goes on."""
    from episodic_cli.engine.embed.embedder import Embedder
    from episodic_cli.engine.errors import EpiError

    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    files = [_write_prose(tmp_path / f"{name}.txt", seed=30 + i, n_lines=3) for i, name in enumerate("xyz")]
    real = Embedder.embed_texts
    seen = {"n": 0}

    def flaky(self, texts, batch_size=32):
        seen["n"] += 1
        if seen["n"] == 2:
            raise EpiError("embedder ran out of memory")
        return real(self, texts, batch_size)

    monkeypatch.setattr(Embedder, "embed_texts", flaky)
    results = _ingest(ws, files)
    assert [r.status for r in results] == ["ingested", "failed", "ingested"]
    assert results[1].error == "embedder ran out of memory"
    assert set(_events_by_doc(store_dir)) == {str(files[0].resolve()), str(files[2].resolve())}
    monkeypatch.setattr(Embedder, "embed_texts", real)
    assert [r.status for r in _ingest(ws, files)] == ["unchanged", "ingested", "unchanged"]


def test_store_built_with_another_embedder_is_refused(engine, tmp_path):
    """The archive binds only the embedder (its vectors are the index); another chat model is welcome."""
    store_dir = tmp_path / "other-embedder-store"
    real = engine.identity(SegmentParams())
    fake = dataclasses.replace(real, embedder="another-embedder")
    assert isinstance(fake, StoreIdentity)
    Store.create_or_open(store_dir, fake).close()

    result = CliRunner().invoke(app, ["ask", "what is this?", "--store", str(store_dir)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error:") and "embedder differs" in err
    assert result.stdout == ""
