"""A part longer than the whole-scope context (engine/retrieval/whole_scope.py): the events that match the question
best are read in document order, and the map's summary of the part stands in for the rest; a part that fits is read
whole. Real SQLite and hnswlib, seeded vectors; no model."""
from __future__ import annotations

import numpy as np

from episodic_cli.engine.retrieval.whole_scope import read_scope
from episodic_cli.store import Store
from episodic_cli.store.summaries import PART, SummaryRecord, part_key
from test_store import IDENTITY, make_doc, unit


def test_a_part_that_does_not_fit_reads_its_best_events_in_order_and_a_summary_of_the_rest(tmp_path):
    rng = np.random.default_rng(11)
    texts = [f"passage {i} about the mill" for i in range(10)]
    texts[6] = "the miller betrayed his brother at the mill"
    st = Store.create_or_open(tmp_path / "s", IDENTITY)
    doc, events = make_doc("book.txt", texts, rng)  # 10 events of 10 tokens
    doc = st.replace_document(doc, events)
    ids = {e.id for e in st.events_of(doc.id)}
    query = events[6].embedding
    whole = read_scope(st, ids, query, "betrayed brother", room=200)
    assert whole.complete and [r.event.ordinal for r in whole.events] == list(range(10))
    assert whole.described("ch. 1") == "read all of ch. 1, 100 tokens"

    st.summaries().put(SummaryRecord(level=PART, key=part_key(doc.id, [["chapter", "1", ""]]), label="ch. 1",
                                     text="The miller betrays his brother.", model="m", content_sha256=doc.content_sha256,
                                     n_tokens=100, document_id=doc.id, first_ordinal=0, last_ordinal=9,
                                     embedding=unit(rng, 1)[0]))
    part = read_scope(st, ids, query, "betrayed brother", room=48, tokens_of=lambda t: 8)
    own = [r for r in part.events if r.summary is None]
    assert not part.complete and part.read_tokens == 30 and len(own) == 3  # three quarters of the room
    assert 6 in [r.event.ordinal for r in own]  # the best-matching event is among those read
    assert [r.event.ordinal for r in own] == sorted(r.event.ordinal for r in own)  # in document order
    assert [r.summary.label for r in part.events if r.summary is not None] == ["ch. 1"]
    assert part.described("ch. 1") == "read 30 of 100 tokens of ch. 1, and 1 summary of the rest"
    st.close()
