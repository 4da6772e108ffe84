"""The map's summaries on disk (store/summaries.py): written, found by meaning and by words, replaced by key,
removed with their document, and kept by the KV garbage collector while they exist."""
from __future__ import annotations

import numpy as np

from episodic_cli.store import Store
from episodic_cli.store.summaries import DOCUMENT, PART, SummaryRecord, document_key, part_key, summary_block_key
from test_store import IDENTITY, make_doc, unit


def _summary(doc, key: str, text: str, vec: np.ndarray, level: str = PART) -> SummaryRecord:
    return SummaryRecord(level=level, key=key, label="ch. 1", text=text, model="test-model abc", n_tokens=20,
                         content_sha256=doc.content_sha256, document_id=doc.id, first_ordinal=0, last_ordinal=1,
                         line_start=1, line_end=3, embedding=vec)


def test_summaries_are_searchable_replaced_by_key_and_removed_with_their_document(tmp_path):
    rng = np.random.default_rng(7)
    st = Store.create_or_open(tmp_path / "s", IDENTITY)
    doc, events = make_doc("book.txt", ["the heron flew", "the otter swam"], rng)
    doc = st.replace_document(doc, events)
    shelf = st.summaries()
    vecs = unit(rng, 3)
    first = shelf.put(_summary(doc, part_key(doc.id, [["chapter", "1", "Birds"]]), "A heron betrays the otter.",
                               vecs[0]))
    shelf.put(_summary(doc, document_key(doc.id), "A tale of river animals.", vecs[1], DOCUMENT))
    assert shelf.count() == 2
    assert shelf.search_dense(vecs[1], 1)[0][0] == shelf.get(document_key(doc.id)).id
    assert [i for i, _ in shelf.search_lexical("who betrays the otter", 5)] == [first.id]
    # a remade summary replaces the old one, in both indexes
    again = shelf.put(_summary(doc, first.key, "The heron saves the otter.", vecs[2]))
    assert shelf.count() == 2 and again.id != first.id
    assert shelf.search_lexical("betrays", 5) == []
    assert summary_block_key(again.id, doc.content_sha256) in st.live_block_keys()
    assert summary_block_key(first.id, doc.content_sha256) not in st.live_block_keys()
    # the document goes, its map goes with it (rows and FTS rows)
    assert st.remove_document(doc.path)
    assert shelf.count() == 0
    assert shelf.search_lexical("heron", 5) == []
    st.close()


def test_a_reingested_document_loses_its_stale_summaries(tmp_path):
    rng = np.random.default_rng(8)
    st = Store.create_or_open(tmp_path / "s", IDENTITY)
    doc, events = make_doc("a.txt", ["one", "two"], rng)
    doc = st.replace_document(doc, events)
    st.summaries().put(_summary(doc, document_key(doc.id), "old summary", unit(rng, 1)[0], DOCUMENT))
    doc2, events2 = make_doc("a.txt", ["one", "three"], rng)
    st.replace_document(doc2, events2)
    assert st.summaries().count() == 0
    st.close()
