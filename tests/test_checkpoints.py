"""Checkpointed ingest inside a document (real model): a long document is committed in groups of events; an ingest
interrupted after some groups leaves them queryable (marked partial) and resumes from the last one to exactly the
events of an uninterrupted run; window files do not outlive their checkpoints."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import prose_lines, workspace_for
from episodic_cli.app import app
from episodic_cli.engine.ingest import document_pass
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.documents.sources import discover
from episodic_cli.store import Store

SMALL = SegmentParams(min_tokens=32, max_tokens=96)  # many events from a short text: several groups
EVERY = 4


def ingest(ws, store_dir, path, commit_every=EVERY):
    ws.threads = 1
    st = ws.store_for_writing(SMALL)
    ingestor = ws.ingestor(st, SMALL, "q8_0", commit_every)
    try:
        with st.writer():
            results = list(ingestor.ingest(list(discover([path]))))
            ingestor.finish_run()
        return results
    finally:
        ingestor.close()
        st.close()


def events_of(store_dir):
    with Store.open_existing(store_dir) as st:
        [doc] = st.documents()
        return doc, [(e.ordinal, e.token_start, e.token_end, e.char_start, e.char_end, e.text, e.line_start,
                      e.line_end, e.section) for e in st.events_of(doc.id)]


def ingest_whole(engine, store_dir, path):
    """The events of an uninterrupted ingest of `path` (what an interrupted one must resume to)."""
    [result] = ingest(workspace_for(engine, store_dir), store_dir, path)
    assert result.status == "ingested", result.error
    return events_of(store_dir)


def power_cut_after(monkeypatch, checkpoints: int) -> None:
    """Make the document pass fail right after its `checkpoints`-th committed checkpoint, mid-document
    (`monkeypatch.undo()` restores it)."""
    real_checkpoint = document_pass.DocumentPass._checkpoint
    calls = []

    def crash_after(self, state):
        real_checkpoint(self, state)
        calls.append(state.next_token)
        if len(calls) == checkpoints:
            raise RuntimeError("power cut")

    monkeypatch.setattr(document_pass.DocumentPass, "_checkpoint", crash_after)


@pytest.fixture(scope="module")
def long_text(tmp_path_factory):
    path = tmp_path_factory.mktemp("docs") / "long.txt"
    path.write_text("\n".join(prose_lines(seed=31, n=110)), encoding="utf-8")  # ~1,900 tokens, ~30 events
    return path


@pytest.fixture(scope="module")
def uninterrupted(engine, long_text, tmp_path_factory):
    return ingest_whole(engine, tmp_path_factory.mktemp("whole") / "store", long_text)


def test_a_long_document_commits_in_groups_and_ends_complete(uninterrupted):
    doc, events = uninterrupted
    assert not doc.partial and doc.checkpoint is None and len(events) > 3 * EVERY
    assert [e[0] for e in events] == list(range(len(events)))


def test_a_spooled_text_ingests_and_resumes_to_the_events_of_the_text_held_whole(engine, long_text, uninterrupted,
                                                                                 tmp_path, monkeypatch):
    """A text too long to hold is read from its spool file (engine/documents/text.py) by every part of the pass: tokens,
    event texts, lines, sections, the checkpoint's resume; the events equal those of the text held as a str."""
    from episodic_cli.engine.documents import text as document_text
    from episodic_cli.engine.documents import sources

    monkeypatch.setattr(document_text, "IN_MEMORY_CHARS", 1000)  # the ~9k-character text is spooled
    monkeypatch.setattr(document_text, "READ_CHARS", 777)         # lines and newlines read across block seams
    monkeypatch.setattr(sources, "READ_BYTES", 4093)              # the file decoded in several blocks
    spooled = []
    real_finish = document_text.TextSpool.finish
    monkeypatch.setattr(document_text.TextSpool, "finish", lambda self: spooled.append(real_finish(self)) or spooled[-1])
    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    real_checkpoint = document_pass.DocumentPass._checkpoint
    with monkeypatch.context() as mp:
        power_cut_after(mp, 1)
        [failed] = ingest(ws, store_dir, long_text)
    assert failed.status == "failed" and "marked partial" in failed.error
    assert document_pass.DocumentPass._checkpoint is real_checkpoint
    [resumed] = ingest(ws, store_dir, long_text)
    assert resumed.status == "ingested", resumed.error
    assert len(spooled) == 2 and all(isinstance(t, document_text.SpooledText) for t in spooled)
    doc, events = events_of(store_dir)
    assert events == uninterrupted[1] and doc.n_lines == uninterrupted[0].n_lines
    assert any(e[6] > 1 for e in events)  # line numbers were counted, not all 1


@pytest.mark.parametrize("groups_before_the_crash", [1, 3])
def test_an_interrupted_ingest_resumes_to_the_events_of_an_uninterrupted_one(engine, long_text, uninterrupted,
                                                                              tmp_path, monkeypatch,
                                                                              groups_before_the_crash):
    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    power_cut_after(monkeypatch, groups_before_the_crash)
    [failed] = ingest(ws, store_dir, long_text)
    assert failed.status == "failed" and "marked partial" in failed.error
    doc, kept = events_of(store_dir)
    # The groups are queryable meanwhile. A checkpoint is taken at the first batch boundary (512 tokens) after
    # EVERY events are pending, so a group holds EVERY or more (with these small events, up to ~10 a batch).
    assert doc.partial and len(kept) >= groups_before_the_crash * EVERY
    assert kept == uninterrupted[1][: len(kept)]
    [window] = list((store_dir / "ingest").iterdir())  # the window file of the last checkpoint only
    # It holds only what the pass keeps for the next batch (sink + 640 local cells), not the cells the next batch's
    # slide evicts: at most the 1,280-cell context less one 512-token batch, 23,040 bytes a cell (F16, bundled model).
    assert window.stat().st_size <= (1280 - 512) * 23_040

    monkeypatch.undo()
    [resumed] = ingest(ws, store_dir, long_text)
    assert resumed.status == "ingested", resumed.error
    doc, events = events_of(store_dir)
    assert not doc.partial and doc.checkpoint is None
    assert events == uninterrupted[1]  # same boundaries and texts across the seam
    assert not list((store_dir / "ingest").iterdir())


def test_a_truncated_window_file_is_not_restored_the_document_is_read_again_from_its_start(
        engine, long_text, uninterrupted, tmp_path, monkeypatch):
    """bench/faults/damage.py: a window cut short made the resumed ingest fail ("does not fit this model or context") on
    every run; its checksum in the checkpoint now sends the document back to its start instead."""
    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    power_cut_after(monkeypatch, 1)
    [failed] = ingest(ws, store_dir, long_text)
    assert failed.status == "failed"
    monkeypatch.undo()
    [window] = (store_dir / "ingest").iterdir()
    with open(window, "r+b") as f:
        f.truncate(window.stat().st_size * 2 // 3)
    [resumed] = ingest(ws, store_dir, long_text)
    assert resumed.status == "ingested", resumed.error
    doc, events = events_of(store_dir)
    assert not doc.partial and events == uninterrupted[1]  # read whole again: the uninterrupted run's events
    assert not list((store_dir / "ingest").iterdir())


def test_resuming_is_shown_and_a_changed_file_starts_over(engine, long_text, tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    doc_path = tmp_path / "long.txt"
    doc_path.write_text("\n".join(long_text.read_text(encoding="utf-8").splitlines()[:60]), encoding="utf-8")
    power_cut_after(monkeypatch, 1)
    args = ["ingest", str(doc_path), "--store", str(store_dir), "--min-tokens", "32", "--max-tokens", "96",
            "--commit-every", str(EVERY)]
    assert CliRunner().invoke(app, args).exit_code == 1
    listed = json.loads(CliRunner().invoke(app, ["ls", "--store", str(store_dir), "--json"]).stdout)
    assert listed["documents"][0]["status"] == "partial"
    monkeypatch.undo()
    resumed = CliRunner().invoke(app, args)
    assert resumed.exit_code == 0, resumed.stderr
    assert f"resuming {doc_path} at token " in resumed.stderr

    power_cut_after(monkeypatch, 1)
    doc_path.write_text("A new first line.\n" + doc_path.read_text(encoding="utf-8"), encoding="utf-8")
    assert CliRunner().invoke(app, args).exit_code == 1  # the changed file's first group replaced the old version
    monkeypatch.undo()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and f"resuming {doc_path}" in again.stderr
    doc_path.write_text("Another version.\n" + doc_path.read_text(encoding="utf-8"), encoding="utf-8")
    fresh = CliRunner().invoke(app, args)  # a partial of other content is never resumed
    assert fresh.exit_code == 0 and f"resuming {doc_path}" not in fresh.stderr


def test_kill_9_at_random_moments_then_resume_gives_the_uninterrupted_store(tmp_path):
    """The fast version of bench/faults/kill_campaign.py (which lands 20+ kills): two kills, real processes."""
    import os
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "faults"))
    import kill_campaign

    paths = kill_campaign.make_corpus(tmp_path / "corpus", long_tokens=1500)
    result = kill_campaign.campaign(paths, tmp_path, kills=2, seed=3, env=dict(os.environ))
    assert result["kills"] == 2 and result["final_rc"] == 0, result
    assert result["same_documents"] and result["documents_with_other_events"] == [], result
    assert result["partial_left"] == [] and result["store_unopenable_after_a_kill"] == 0, result
    assert result["ask_rc"] == 0 and result["ask_block_warnings"] == 0, result


def test_a_full_disk_mid_document_stops_keeps_the_committed_groups_and_resumes_once_freed(
        engine, long_text, uninterrupted, tmp_path, monkeypatch):
    import sqlite3

    from episodic_cli.engine.ingest.pipeline import DiskFullError
    from episodic_cli.store import StoreError

    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    real_append = Store.append_events
    calls = []

    def full_on_second_group(self, document_id, events, checkpoint):
        calls.append(1)
        if len(calls) == 2:
            try:
                raise sqlite3.OperationalError("database or disk is full")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"disk full while writing store '{self.path}'; nothing was changed.") from exc
        return real_append(self, document_id, events, checkpoint)

    monkeypatch.setattr(Store, "append_events", full_on_second_group)
    with pytest.raises(DiskFullError, match="disk full: .* MB needed for .* MB free at"):
        ingest(ws, store_dir, long_text)
    doc, kept = events_of(store_dir)
    assert doc.partial and kept == uninterrupted[1][: len(kept)] and len(kept) >= EVERY
    monkeypatch.undo()  # space freed
    [resumed] = ingest(ws, store_dir, long_text)
    assert resumed.status == "ingested"
    assert events_of(store_dir)[1] == uninterrupted[1]
