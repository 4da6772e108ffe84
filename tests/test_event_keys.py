"""Boundary refinement and representative keys on the REAL bundled model: keys read from llama.cpp's cache are
position-free once unrotated, an event's block cut from the refinement read is the block a direct read gives, and an
ingest with refinement stores clean-cut events whose representative keys are their own tokens' keys. Inputs stay
small (one ~200-token text, ingested twice)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import license_text, tier_block, tier_block_paths, workspace_for
from episodic_cli.engine.kv import blocks as K
from episodic_cli.engine.kv.keys import representative_keys, rope_params, similarity_keys, unrotated_keys
from episodic_cli.engine.llama.backend import LlamaSession
from episodic_cli.engine.ingest.segment import SegmentParams, clean_cut_mask
from episodic_cli.engine.documents.sources import discover
from episodic_cli.store import Store

SMALL = SegmentParams(min_tokens=32, max_tokens=96, refine="modularity")


@pytest.fixture(scope="module")
def session(engine):
    s = LlamaSession(engine.model, n_ctx=512, n_threads=1, n_seq_max=2)  # one thread: see test_kv_memory
    yield s
    s.close()


def _window(session, tokens, p0) -> K.ParsedBlock:
    session.clear()
    session.prefill(tokens, p0)
    return K.parse_state_blob(K.capture_block(session, 0, p0, p0 + len(tokens)))


def test_unrotated_keys_do_not_depend_on_position(engine, session):
    rope = rope_params(engine.model)
    tokens = engine.model.tokenize(license_text())[100:164]
    at0, at300 = _window(session, tokens, 0), _window(session, tokens, 300)
    raw_gap = np.abs(at0.k.astype(np.float32) - at300.k.astype(np.float32)).max()
    gap = np.abs(unrotated_keys(at0.k, at0.positions, rope) - unrotated_keys(at300.k, at300.positions, rope)).max()
    assert raw_gap > 1.0 and gap < 0.1, (raw_gap, gap)  # f16 rounding of the rotated keys is all that is left
    assert np.abs(similarity_keys(at0, rope) - similarity_keys(at300, rope)).max() < 0.1


def test_block_cut_from_a_window_read_equals_a_direct_read(engine, session):
    import llama_cpp as L

    tokens = engine.model.tokenize(license_text())[100:174]
    session.clear()
    session.prefill(tokens[:64], 0)
    # As the ingest window does: free cells in the middle, so the next tokens land there, out of position order.
    L.llama_memory_seq_rm(session.memory, 0, 10, 20)
    session.prefill(tokens[64:], 64)
    window = K.parse_state_blob(K.capture_block(session, 0, 0, 74))
    assert not np.all(np.diff(window.positions) > 0)
    direct = K.capture_block(session, 0, 30, 70)
    assert K.build_state_blob(window.cells_in(30, 70)) == direct


def _ingest(ws, path, kv_kind):
    ws.threads = 1  # as in `session`: two spinning threads crawl on a busy machine
    st = ws.store_for_writing(SMALL)
    ingestor = ws.ingestor(st, SMALL, kv_kind)
    try:
        with st.writer():
            [result] = ingestor.ingest(list(discover([path])))
        assert result.status == "ingested", result.error
        doc = st.documents()[0]
        return [(ev, tier_block(st, ev, doc)) for ev in st.events_of(doc.id)]
    finally:
        ingestor.close()
        st.close()


def test_refined_ingest_stores_clean_cuts_and_own_representative_keys(engine, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("\n".join(license_text().split("\n")[:22]), encoding="utf-8")
    ws = workspace_for(engine, tmp_path / "store")
    stored = _ingest(ws, path, "f16")
    events = [ev for ev, _ in stored]

    table = engine.model.pieces()
    tokens = engine.model.tokenize(path.read_text(encoding="utf-8"))
    clean = clean_cut_mask([table[t] for t in tokens])
    assert [e.token_start for e in events[1:]] == [e.token_end for e in events[:-1]]
    assert events[-1].token_end == len(tokens) and len(events) >= 3
    for ev in events[:-1]:
        assert SMALL.min_tokens <= ev.token_end - ev.token_start <= SMALL.max_tokens
        assert clean[ev.token_end], ev  # lines are short here, so every allowed range holds a clean cut

    rope = rope_params(engine.model)
    n_layer, n_embd_k = engine.model.info.n_layer, engine.model.info.n_head_kv * rope.head_dim
    for ev, stored_block in stored:  # the representative keys live with the block, in the model's tier
        rep_keys = stored_block.rep_keys
        assert rep_keys.shape == (n_layer, 4, n_embd_k) and rep_keys.dtype == np.float16
        block = K.decode_block(stored_block.payload, "f16")
        assert block.n_cells == ev.token_end - ev.token_start
        own = unrotated_keys(block.k, block.positions, rope).astype(np.float16)  # the event's tokens' keys
        for layer in range(n_layer):
            for key in rep_keys[layer]:
                assert (own[layer] == key).all(axis=1).any(), (ev.ordinal, layer)
        assert np.array_equal(rep_keys, representative_keys(block, rope))

    # Without KV blocks the same keys are read for refinement (the same events), and none are stored.
    text_store = tmp_path / "text-store"
    text_events = [ev for ev, _ in _ingest(workspace_for(engine, text_store), path, None)]
    assert [(e.token_start, e.token_end) for e in text_events] == [(e.token_start, e.token_end) for e in events]
    assert tier_block_paths(text_store) == []


def test_store_from_before_rep_keys_migrates(tmp_path, monkeypatch):
    from episodic_cli.store import StoreIdentity, schema

    identity = StoreIdentity("e", 4)
    with monkeypatch.context() as mp:
        mp.setattr(schema, "MIGRATIONS", [m for m in schema.MIGRATIONS if m.__name__ != "m003_event_rep_keys"])
        old = Store.create_or_open(tmp_path / "s", identity)
        old._conn.execute("INSERT INTO documents (path, display_path, kind, content_sha256, n_tokens, n_events, "
                          "n_pages, n_lines, ingest_seconds, ingested_at) VALUES ('p', 'p', 'text', 's', 1, 1, NULL, "
                          "1, 0, 0)")
        old._conn.execute("INSERT INTO events (document_id, ordinal, token_start, token_end, char_start, char_end, "
                          "line_start, line_end, surprise_mean, surprise_max, text, embedding) "
                          "VALUES (1, 0, 0, 1, 0, 1, 1, 1, 1.0, 2.0, 'x', ?)", (np.ones(4, np.float32).tobytes(),))
        old.close()
    with Store.open_existing(tmp_path / "s") as st:
        [got] = st.events_of(1)
    assert got.text == "x"
