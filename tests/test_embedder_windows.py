"""Long texts are embedded as windows cut by the embedder's own tokenizer (issue 35, item 2): 256 word pieces with
[CLS] and [SEP], each overlapping the one before by 64, so no piece of an event is dropped. Stores embedded before,
with 160-word windows, keep that identity and keep working, ingest included."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import workspace_for
from episodic_cli.engine.embed.embedder import EMBEDDER_NAME, LEGACY_NAME, WINDOW_OVERLAP, Embedder
from episodic_cli.engine.embed.query_encoder import MAX_SEQ_LENGTH
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.documents.sources import discover
from episodic_cli.store import Store, StoreIdentity

# 150 whitespace words of code, about 600 word pieces: one legacy window, truncated at 256 pieces.
CODE = " ".join(f"self._cache_{i}.update(key_{i}, value_{i})" for i in range(150))
TAIL = " The lighthouse keeper's parrot is named Bartholomew."


@pytest.fixture(scope="module")
def embedder(engine) -> Embedder:
    return engine.embedder


def test_windows_cover_every_piece_of_a_long_text(embedder):
    from tokenizers import Tokenizer

    windows = embedder._windows_of([CODE + TAIL])[0]
    tokenizer = Tokenizer.from_file(str(embedder.path / "tokenizer.json"))
    tokenizer.no_truncation()  # the file's own setting truncates
    full = tokenizer.encode(CODE + TAIL, add_special_tokens=False)
    assert len(full.ids) > 2 * MAX_SEQ_LENGTH  # the case the legacy windows got wrong
    assert all(len(w) <= MAX_SEQ_LENGTH for w in windows)
    cls, sep = windows[0][0], windows[0][-1]
    rebuilt = list(windows[0][1:-1])
    for w in windows[1:]:
        assert w[0] == cls and w[-1] == sep
        body = w[1:-1]
        assert body[:WINDOW_OVERLAP] == rebuilt[-WINDOW_OVERLAP:]  # the overlap repeats the previous window's end
        rebuilt += body[WINDOW_OVERLAP:]
    assert rebuilt == list(full.ids)


def test_the_end_of_a_long_event_counts_in_its_vector(embedder):
    """With 160-word windows a sentence after 256 pieces of code was invisible: the vector did not change."""
    legacy = embedder.named(LEGACY_NAME)
    assert np.array_equal(legacy.embed_texts([CODE + TAIL]), legacy.embed_texts([CODE]))  # the old defect
    with_tail, without = embedder.embed_texts([CODE + TAIL, CODE])
    assert float(with_tail @ without) < 0.9999
    question = embedder.embed_query("What is the lighthouse keeper's parrot called?")
    assert float(question @ with_tail) > float(question @ without)


def test_query_and_batch_agree_on_windowed_texts(embedder):
    texts = [CODE + TAIL, CODE, "short", ""]
    for text, ref in zip(texts, embedder.embed_texts(texts)):
        assert np.abs(embedder.embed_query(text) - ref).max() < 1e-5


def test_an_unknown_embedder_name_is_refused_with_what_to_do():
    from episodic_cli.engine.errors import EpiError

    with pytest.raises(EpiError, match="re-ingest into --store NEW"):
        Embedder(name="all-MiniLM-L6-v2 (4096-piece windows)")


def legacy_store(engine, tmp_path) -> Path:
    """A store whose identity says word windows, with one document ingested into it by this epi."""
    store_dir = tmp_path / "old"
    Store.create_or_open(store_dir, StoreIdentity(embedder=LEGACY_NAME, embed_dim=384)).close()
    doc = tmp_path / "notes.txt"
    doc.write_text((CODE + TAIL + "\n\n") * 2)
    ws = workspace_for(engine, store_dir)
    params = SegmentParams()
    store = ws.store_for_writing(params)  # refused before: the identity named another embedder
    try:
        assert ws.embedder.name == LEGACY_NAME
        ingestor = ws.ingestor(store, params, kv_kind=None)
        assert ingestor.embedder.name == LEGACY_NAME
        with store.writer():
            results = list(ingestor.ingest(discover([doc])))
            ingestor.finish_run()
        ingestor.close()
        assert [r.status for r in results] == ["ingested"]
        assert store.identity.embedder == LEGACY_NAME
    finally:
        store.close()
    return store_dir


def stored_matches(store: Store, embedder: Embedder) -> bool:
    """Every event's stored vector is the one `embedder` gives its text."""
    events = [e for d in store.documents() for e in store.events_of(d.id)]
    for event, expected in zip(events, embedder.embed_texts([e.text for e in events])):
        [(_, score)] = store.search_dense(expected, 1, within={event.id})
        if score < 1 - 1e-5:
            return False
    return True


def test_an_old_store_keeps_word_windows_until_epi_reembed_gives_it_the_new_ones(engine, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from episodic_cli.app import app
    from episodic_cli.engine.embed import reembed as reembed_module
    from episodic_cli.store.summaries import PART, SummaryRecord

    store_dir = legacy_store(engine, tmp_path)
    reading = workspace_for(engine, store_dir)
    with reading.store_for_reading() as st:  # questions embed as the store was embedded
        reading.check_store(st)
        assert reading.embedder.name == LEGACY_NAME
        assert stored_matches(st, reading.embedder)  # word windows, as the store's other vectors
        assert reading.retrieve(st, "What is the parrot called?", 2)
    assert workspace_for(engine, tmp_path / "new").embedder.name == EMBEDDER_NAME

    with Store.open_existing(store_dir) as st, st.writer():
        document = st.documents()[0]
        summary = SummaryRecord(level=PART, key="part:1", label="notes.txt", text="A parrot and a cache.",
                                model="m", content_sha256=document.content_sha256, n_tokens=10,
                                document_id=document.id)
        summary.embedding = engine.embedder.named(LEGACY_NAME).embed_query(summary.embedding_text)
        st.summaries().put(summary)
    runner = CliRunner()

    first = {"n": 0}
    real = Embedder.embed_texts

    def dies_on_second_batch(self, texts, batch_size=32):  # failure injection: Ctrl-C after the first batch
        first["n"] += 1
        if first["n"] > 1:
            raise KeyboardInterrupt
        return real(self, texts, batch_size)

    monkeypatch.setattr(reembed_module, "BATCH", 4)
    monkeypatch.setattr(Embedder, "embed_texts", dies_on_second_batch)
    interrupted = runner.invoke(app, ["reembed", "--store", str(store_dir)])
    assert interrupted.exit_code != 0
    monkeypatch.setattr(Embedder, "embed_texts", real)
    with Store.open_existing(store_dir) as st:  # interrupted: nothing changed
        assert st.identity.embedder == LEGACY_NAME
        assert stored_matches(st, engine.embedder.named(LEGACY_NAME))

    done = runner.invoke(app, ["reembed", "--store", str(store_dir), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["embedder_before"] == LEGACY_NAME and report["embedder"] == EMBEDDER_NAME
    with Store.open_existing(store_dir) as st:
        assert st.identity.embedder == EMBEDDER_NAME
        assert report["embedded"] == sum(d.n_events for d in st.documents()) + 1
        assert stored_matches(st, engine.embedder)
        query = engine.embedder.embed_query(summary.embedding_text)
        assert st.summaries().search_dense(query, 1)[0][1] > 1 - 1e-5  # the summary's vector was made again
    again = runner.invoke(app, ["reembed", "--store", str(store_dir)])
    assert again.exit_code == 0 and "nothing to do" in again.stderr
