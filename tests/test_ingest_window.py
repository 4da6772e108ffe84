"""The ingest pass's sliding window on the REAL bundled model: it reads the document behind the answer prompt's sink
(the first batch equals one prefill of sink + document; a second document keeps the decoded sink), before each
batch it is cut back to the sink plus the `local` most recent tokens (which tokens it holds is read back from the
cache), it keeps what an undecided event still needs, and its context is sized to what it keeps."""
from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from conftest import license_text
from episodic_cli.engine.errors import EpiError
from episodic_cli.engine.ingest.pipeline import ingest_context
from episodic_cli.engine.llama.backend import INGEST_BATCH, LlamaSession
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.kv import blocks as K
from episodic_cli.engine.kv.keys import rope_params, unrotated_keys
from episodic_cli.engine.kv.keeper import read_window
from episodic_cli.engine.prompt import sink_tokens
from episodic_cli.native import reference

SMALL = SegmentParams(local=96, min_tokens=32, max_tokens=64)
N_TOKENS = 2 * INGEST_BATCH + 76  # three batches: the second and third start after an eviction


@pytest.fixture(scope="module")
def tokens(engine):
    return engine.model.tokenize(license_text())[:N_TOKENS]


@pytest.fixture(scope="module")
def sink(engine):
    return sink_tokens(engine.model)


@pytest.fixture(scope="module")
def session(engine, sink):
    s = _fresh_session(engine, sink)
    yield s
    s.close()


def _pass(session, sink, tokens, keep_back: int | None = None):
    """Run surprise_pass; after each batch record (known, offset, cells held). keep_back: report an undecided event
    starting that many tokens before the end of the batch (None: nothing pending)."""
    seen = []

    def on_decoded(surprise, known):
        held = L.llama_memory_seq_pos_max(session.memory, 0) + 1  # positions are compact: cells held == next position
        seen.append((known, session._offset, held))
        return known if keep_back is None else max(known - keep_back, 0)

    surprise = session.surprise_pass(tokens, sink, SMALL.local, None, on_decoded)
    return surprise, seen


def test_context_is_sink_local_and_one_batch():
    assert ingest_context(SMALL, 16) == 768  # 16 + 96 + 512 = 624, padded to llama.cpp's 256-cell steps
    assert ingest_context(SegmentParams(), 61) == 1280  # the bundled model's 61-token sink + 640 + a 512-token batch
    # an undecided event may reach back max_tokens: the context grows for long events rather than failing them
    assert ingest_context(SegmentParams(local=96, max_tokens=1024), 61) >= 61 + 1024 + INGEST_BATCH


def _fresh_session(engine, sink):
    """An ingest-sized context; one llama.cpp thread (see test_kv_memory: two spin on a busy machine)."""
    return LlamaSession(engine.model, n_ctx=ingest_context(SMALL, len(sink)), n_threads=1, n_seq_max=2)


def _layer0_keys(block, rope) -> np.ndarray:
    """Unrotated layer-0 keys in position order: a function of each token alone (attention mixes tokens only after
    layer 0's K projection), so they say which tokens a window holds, wherever they sit."""
    order = np.argsort(block.positions, kind="stable")
    return unrotated_keys(block.k[0][order], block.positions[order], rope)


def test_first_batch_is_the_model_reading_the_sink_then_the_document(engine, session, sink, tokens):
    tokens = tokens[: INGEST_BATCH + 8]  # the first batch, and a second to show the pass goes on
    surprise, _ = _pass(session, sink, tokens)
    V = engine.model.info.n_vocab
    fresh = _fresh_session(engine, sink)
    try:  # no eviction yet: the first batch must match one prefill of sink + document, token 0 included
        context = np.concatenate([sink, tokens[: INGEST_BATCH - 1]])
        want = np.zeros(len(context), dtype=np.int8)
        want[len(sink) - 1 :] = 1
        fresh.decode(context[:INGEST_BATCH], 0, want[:INGEST_BATCH])
        rows_a = np.ctypeslib.as_array(L.llama_get_logits(fresh.ctx), shape=(int(want[:INGEST_BATCH].sum()), V)).copy()
        fresh.decode(context[INGEST_BATCH:], INGEST_BATCH, want[INGEST_BATCH:])
        rows_b = np.ctypeslib.as_array(L.llama_get_logits(fresh.ctx), shape=(int(want[INGEST_BATCH:].sum()), V)).copy()
    finally:
        fresh.close()
    expected = reference.surprise(np.concatenate([rows_a, rows_b]), tokens[:INGEST_BATCH])
    np.testing.assert_allclose(surprise[:INGEST_BATCH], expected, atol=2e-3)
    again, _ = _pass(session, sink, tokens)  # a second document keeps the decoded sink: same numbers
    np.testing.assert_allclose(again, surprise, atol=2e-3)


def test_each_batch_sees_exactly_the_sink_and_the_local_span(engine, session, sink, tokens):
    _, seen = _pass(session, sink, tokens)
    p, local, n = len(sink), SMALL.local, len(tokens)
    # cells held after each batch: sink + the first batch, then sink + local + the batch, each time
    assert [held for _, _, held in seen] == [p + INGEST_BATCH, p + local + INGEST_BATCH, p + local + 76]
    assert L.llama_memory_seq_pos_min(session.memory, 0) == 0  # positions stay compact from 0
    # Which tokens: the sink, then the last local + 76 tokens of the document (layer-0 keys identify them).
    offset = seen[-1][1]
    assert n - offset == local + 76
    rope = rope_params(engine.model)
    held = np.concatenate([_layer0_keys(K.parse_state_blob(K.capture_block(session, 0, 0, p)), rope),
                           _layer0_keys(read_window(session, offset, n), rope)])
    fresh = _fresh_session(engine, sink)
    try:
        def keys_of(toks):
            fresh.clear()
            fresh.decode(toks, 0)
            return _layer0_keys(K.parse_state_blob(K.capture_block(fresh, 0, 0, len(toks))), rope)

        expected = keys_of(np.concatenate([sink, tokens[offset:]]))
        one_off = keys_of(np.concatenate([sink, tokens[offset - 1 : n - 1]]))
    finally:
        fresh.close()
    tail = slice(p, None)
    assert np.abs(held - expected).max() < 0.1  # F16 rounding of the keys llama.cpp re-rotated when it shifted them
    assert np.abs(held[tail] - one_off[tail]).max() > 1.0  # the check can tell a window off by one token


def test_tokens_an_undecided_event_needs_are_kept(session, sink, tokens):
    _, seen = _pass(session, sink, tokens, keep_back=150)
    held_before_last = seen[-1][2] - 76
    assert held_before_last == len(sink) + 150 - 1  # 150 > local: the window kept the event's tokens
    with pytest.raises(EpiError, match="ingest window too small"):
        _pass(session, sink, tokens, keep_back=10_000)  # an event reaching back past the context cannot be kept


def test_surprise_measured_at_marked_tokens_only_equals_the_full_pass(engine, session, sink, tokens):
    """`measure_at` (the clean cuts, segment.SURPRISE_AT) asks for logits only on the rows predicting marked tokens:
    those values are the full pass's, the rest NaN, and the window the pass leaves is the same."""
    full, seen_full = _pass(session, sink, tokens)
    marks = np.zeros(len(tokens) + 1, dtype=bool)
    marks[::7] = True
    marks[INGEST_BATCH + 1 : 2 * INGEST_BATCH + 1] = False  # a batch with nothing to measure still decodes
    sparse = session.surprise_pass(tokens, sink, SMALL.local, None, lambda s, known: known, measure_at=marks)
    measured = marks[: len(tokens)]
    assert np.isnan(sparse[~measured]).all()
    np.testing.assert_allclose(sparse[measured], full[measured], atol=2e-3)
    assert session._offset == seen_full[-1][1]
