"""How the two retrieval channels become the hits (engine/retrieval/retrieve.py) on a real store (SQLite FTS5 + hnswlib):
each channel's first choice is a hit even when reciprocal rank fusion alone would rank it below events both
channels find mediocre, and a named code symbol seats its best event first without filling every hit."""
from __future__ import annotations

import numpy as np
import pytest

from episodic_cli.engine.retrieval.retrieve import fuse, retrieve, with_leaders_first
from episodic_cli.store import DocumentRecord, EventRecord, Store, StoreIdentity

DIM = 16


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


@pytest.fixture
def store(tmp_path):
    """Event 0 alone holds the rare identifier but points away from the question; events 1-5 share the question's
    common words and lie near it; event 6 is the question's nearest vector with unrelated words; 30 fillers."""
    rng = np.random.default_rng(1)
    q = _unit(rng.standard_normal(DIM))
    texts, vecs = [], []
    texts.append("AppDirs = PlatformDirs  # kept for appdirs users"), vecs.append(-q)
    for i in range(5):
        texts.append(f"the older name of the class, alias number {i}")
        vecs.append(_unit(q + (0.6 + 0.1 * i) * _unit(rng.standard_normal(DIM))))
    texts.append("completely unrelated words here"), vecs.append(q)
    for i in range(30):
        texts.append(f"filler event {i} about nothing in particular")
        vecs.append(_unit(rng.standard_normal(DIM) - q))
    st = Store.create_or_open(tmp_path / "s", StoreIdentity("e", DIM))
    events = [EventRecord(ordinal=i, token_start=10 * i, token_end=10 * i + 10, char_start=40 * i,
                          char_end=40 * i + 40, page_start=None, page_end=None, line_start=i + 1, line_end=i + 1,
                          surprise_mean=1.0, surprise_max=2.0, text=t, embedding=v)
              for i, (t, v) in enumerate(zip(texts, vecs))]
    st.replace_document(DocumentRecord(path="/abs/m.py", display_path="m.py", kind="code", content_sha256="c" * 64,
                                       n_tokens=10 * len(texts), n_events=len(texts), n_pages=None,
                                       n_lines=len(texts), ingest_seconds=0.1), events)
    yield st, q, [e.id for e in events]
    st.close()


QUESTION = "Which older name is kept as an alias of the class, AppDirs or another?"


def test_each_channels_first_choice_is_a_hit(store):
    st, q, ids = store
    dense, lexical = st.search_dense(q, 20), st.search_lexical(QUESTION, 20)
    assert lexical[0][0] == ids[0] and ids[0] not in {i for i, _ in dense} and dense[0][0] == ids[6]
    assert ids[0] not in [i for i, _ in fuse([dense, lexical])[:3]]  # fusion alone leaves it out of 3 hits
    assert {i for i, _ in with_leaders_first(fuse([dense, lexical]), [dense, lexical])[:2]} == {ids[6], ids[0]}
    hits = {r.event.id for r in retrieve(st, q, QUESTION, k=3, neighbours=0)}
    assert {ids[0], ids[6]} <= hits and len(hits) == 3


def test_a_named_symbol_seats_its_best_event_first_and_leaves_the_rest(store):
    st, q, ids = store
    named = set(ids[7:17])  # ten events "inside the named definition", none of them relevant otherwise
    got = sorted((r for r in retrieve(st, q, QUESTION, k=3, neighbours=0, boosted=named) if r.score is not None),
                 key=lambda r: r.rank)
    assert got[0].event.id in named
    assert {r.event.id for r in got[1:]} == {ids[0], ids[6]}
