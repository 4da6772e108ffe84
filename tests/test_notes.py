"""Notes, then the answer (engine/answer/notes.py): a part cut into chunks without splitting an event, empty notes
left out, and the whole path run for real with the bundled model on a small book (one note per chunk, the answer
read from the notes, the chapter's own events cited)."""
from __future__ import annotations

import pytest

from conftest import prose_lines
from episodic_cli.engine import workspace as workspace_module
from episodic_cli.engine.answer.notes import NOTE_ID_BASE, chunks, is_empty_note, note_sources
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.documents.structure import decode
from episodic_cli.engine.retrieval.retrieve import RetrievedEvent
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import DocumentRecord, EventRecord, Store

pytestmark = pytest.mark.usefixtures("whole_parts_read_by_small_models")


def _event(i: int, n_tokens: int) -> RetrievedEvent:
    doc = DocumentRecord(path="b.txt", display_path="b.txt", kind="text", content_sha256="x", n_tokens=0, n_events=0,
                         n_pages=None, n_lines=None, ingest_seconds=0.0, id=1)
    ev = EventRecord(ordinal=i, token_start=0, token_end=n_tokens, char_start=0, char_end=1, page_start=None,
                     page_end=None, line_start=i, line_end=i, surprise_mean=0.0, surprise_max=0.0, text=f"event {i}",
                     id=i + 1, document_id=1)
    return RetrievedEvent(ev, doc, None, None)


def test_chunks_keep_order_never_split_an_event_and_fold_a_short_tail():
    events = [_event(i, 400) for i in range(7)]  # 2,800 tokens
    runs = chunks(events, 1000)
    assert [r.event.ordinal for run in runs for r in run] == list(range(7))
    assert [len(run) for run in runs] == [2, 2, 3]  # 800 + 800 + 800 + 400: the short tail joins the run before
    assert [len(run) for run in chunks([_event(i, 900) for i in range(3)], 1000)] == [1, 1, 1]  # 1,800 > 1,500
    assert len(chunks([_event(0, 5000)], 1000)) == 1  # an event longer than a chunk is its own chunk, whole


def test_an_empty_note_is_left_out_of_the_answers_sources():
    assert is_empty_note("Nothing.") and is_empty_note("none") and is_empty_note("No mention of it.")
    assert not is_empty_note("Nothing is said of the storm until Oskar betrays Tomas to the harbour guard.")
    events = [_event(i, 300) for i in range(4)]
    sources, excerpts = note_sources([(events[:2], "Oskar betrays Tomas."), (events[2:], "nothing")])
    assert len(sources) == 1 and sources[0].event.id == NOTE_ID_BASE
    assert excerpts[NOTE_ID_BASE] == "Notes on part 1 of 1: Oskar betrays Tomas."
    assert (sources[0].event.line_start, sources[0].event.line_end) == (0, 1)


FACT = "In the storm the miller Oskar Brandt betrayed his brother Tomas to the harbour guard."


@pytest.fixture(scope="module")
def small_book_store(tmp_path_factory):
    from typer.testing import CliRunner

    from episodic_cli.app import app

    root = tmp_path_factory.mktemp("notes")
    lines = prose_lines(seed=7, n=60)
    lines.insert(30, FACT)
    book = root / "book.txt"
    book.write_text("CHAPTER 1\nThe Harbour\n\n" + "\n".join(prose_lines(seed=3, n=10)) +
                    "\n\nCHAPTER 2\nThe Storm\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    store = root / "store"
    result = CliRunner().invoke(app, ["ingest", str(book), "--store", str(store), "--no-map"])
    assert result.exit_code == 0, result.output
    return store


def test_a_whole_question_with_notes_reads_each_chunk_then_answers_from_the_notes(small_book_store, monkeypatch):
    monkeypatch.setattr(workspace_module, "NOTES_CHUNK_TOKENS", 256)  # a small book still has several chunks
    ws = Workspace(store=str(small_book_store))
    try:
        with Store.open_existing(ws.store_dir) as st:
            result, stream = ws.ask(st, "Who betrayed whom in chapter 2?", AskOptions(whole_method="notes"))
            text = "".join(stream)
            chapter = [e for e in st.events_of(st.documents()[0].id)
                       if any(n[0] == "chapter" and n[1] == "2" for n in (decode(e.section) or {}).get("path", []))]
        assert result.kind.value == "whole" and "with notes on each part" in result.reading
        assert [r.event.id for r in result.retrieved] == [e.id for e in chapter]  # cited: the chapter's own events
        n_tokens = sum(e.token_end - e.token_start for e in chapter)
        assert len(result.notes) == len(chunks(result.retrieved, 256)) >= 2, (n_tokens, result.notes)
        assert all(note.strip() for note in result.notes)
        assert text.strip() and result.answer.text.strip() == text.strip()
    finally:
        ws.close()
