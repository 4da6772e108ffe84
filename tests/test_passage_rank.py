"""The third retrieval channel (engine/retrieval/passage_rank.py) on a real store (SQLite FTS5 + hnswlib): the one
sentence that answers a question, inside a long event about other things, makes that event a hit, where the two
whole-event channels rank it below short events that share the question's common words."""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from episodic_cli.engine.retrieval.passage_rank import best_sentence_ranking
from episodic_cli.engine.retrieval.retrieve import retrieve
from episodic_cli.store import DocumentRecord, EventRecord, Store, StoreIdentity

DIM = 16
QUESTION = "Which hashing function does HashMap use by default?"
ANSWER = "By default, HashMap uses a hashing function called SipHash that resists denial-of-service attacks."
LONG_TOPIC = ("Ownership rules apply to the values a map holds. A vector grows as elements are pushed. Strings are "
              "stored as UTF-8 bytes. Iterating over a collection borrows it. ")


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


@pytest.fixture
def store(tmp_path):
    """Event 0: twelve sentences about other collections, then the answer; its vector a little farther from the
    question than those of events 1-6, short ones that say "HashMap" and "default"; event 7 is the nearest vector
    (dense's leader); 20 fillers."""
    rng = np.random.default_rng(3)
    q = _unit(rng.standard_normal(DIM))
    texts = [LONG_TOPIC * 3 + ANSWER]
    vecs = [_unit(q + 1.2 * _unit(rng.standard_normal(DIM)))]
    for i in range(6):
        texts.append(f"A HashMap is created empty by default, example {i}. Insert keys into the HashMap.")
        vecs.append(_unit(q + (0.5 + 0.1 * i) * _unit(rng.standard_normal(DIM))))
    texts.append("completely unrelated words here")
    vecs.append(q)
    for i in range(20):
        texts.append(f"filler event {i} about nothing in particular")
        vecs.append(_unit(rng.standard_normal(DIM) - q))
    st = Store.create_or_open(tmp_path / "s", StoreIdentity("e", DIM))
    events = [EventRecord(ordinal=i, token_start=100 * i, token_end=100 * i + 100, char_start=1000 * i,
                          char_end=1000 * i + len(t), page_start=None, page_end=None, line_start=i + 1,
                          line_end=i + 1, surprise_mean=1.0, surprise_max=2.0, text=t, embedding=v)
              for i, (t, v) in enumerate(zip(texts, vecs))]
    st.replace_document(DocumentRecord(path="/abs/book.txt", display_path="book.txt", kind="text",
                                       content_sha256="d" * 64, n_tokens=100 * len(texts), n_events=len(texts),
                                       n_pages=None, n_lines=len(texts), ingest_seconds=0.1), events)
    yield st, q, [e.id for e in events]
    st.close()


def test_the_answering_sentence_ranks_its_long_event_first(store):
    st, _, ids = store
    ranking = best_sentence_ranking(QUESTION, st.get_events(ids))
    assert ranking[0][0] == ids[0]
    assert ids[-1] not in {i for i, _ in ranking}  # a filler shares no word with the question: not ranked at all


def test_the_third_channel_makes_the_long_event_a_hit(store):
    st, q, ids = store
    dense, lexical = st.search_dense(q, 20), st.search_lexical(QUESTION, 20)
    assert ids[0] not in {i for i, _ in dense[:5]} and ids[0] not in {i for i, _ in lexical[:5]}
    hits = lambda **kw: {r.event.id for r in retrieve(st, q, QUESTION, k=5, neighbours=0, **kw)}  # noqa: E731
    assert ids[0] not in hits()  # the two whole-event channels leave it out
    with_passages = hits(passage_ranking=partial(best_sentence_ranking, QUESTION))
    assert ids[0] in with_passages
    assert {dense[0][0], lexical[0][0]} <= with_passages  # each whole-event channel's leader stays a hit
