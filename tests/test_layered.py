"""Layered kv mode on the real model: the queries it reads out of llama.cpp's graph, the pool it assembles, the
blocks each layer selects, and `--layered` on the command line. The patch's own exactness (hiding a sequence equals
never loading it) is tested in test_layer_visibility.py."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import TEXT_QUESTION, assert_one_line_error, license_text, tier_block_paths, workspace_for
from episodic_cli.app import app
from episodic_cli.engine.llama import layer_visibility
from episodic_cli.engine.answer.text_mode import Answer
from episodic_cli.engine import ask_options
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.errors import EpiError
from episodic_cli.engine.kv.keys import rope_params, unrotated_keys
from episodic_cli.engine.kv.blocks import capture_block, load_block
from episodic_cli.engine.answer.layered import LayeredAnswerer, lane_places
from episodic_cli.engine.llama.backend import LlamaSession
from episodic_cli.engine.llama.query_capture import QueryCapture
from episodic_cli.store import Store

runner = CliRunner()
needs_patch = pytest.mark.skipif(not layer_visibility.available(), reason="llama.cpp without epi's patch")


def capture_session(model):
    import llama_cpp as L

    rope = rope_params(model)
    capture = QueryCapture(model.info.n_layer, int(L.llama_model_n_head(model.ptr)), rope.head_dim)
    return capture, LlamaSession(model, n_ctx=1024, n_seq_max=2, eval_callback=capture.callback,
                                  eval_user_data=capture.user_data), rope


def test_captured_queries_are_each_layers_rope_queries(bundled_model):
    """A lone token's query does not depend on its position once the rotation is undone (it attends only to
    itself), so reading it at positions 0 and 300 must agree in every layer: this checks the tensor mirror, the
    node chosen (post-RoPE `Qcur-<layer>`) and the layer numbering together. Tolerance: ggml rotates in float32 and
    so does the undoing (measured: under 2e-5 of each row's largest value at position 300); 1e-3 of it leaves room
    and still fails on a wrong node or a rotated read (those differ by up to the whole scale)."""
    capture, session, rope = capture_session(bundled_model)
    token = bundled_model.tokenize("Paris")[:1]
    rows = []
    for pos in (0, 300):
        session.clear()
        capture.arm()
        session.decode(token, pos)
        capture.disarm()
        q = capture.queries()
        assert q.shape == (bundled_model.info.n_layer, 1, q.shape[2]) and q.shape[2] % rope.head_dim == 0
        rows.append(unrotated_keys(q, np.array([pos]), rope))
    session.close()
    scale = np.abs(rows[0]).max(axis=2, keepdims=True)
    assert (np.abs(rows[0] - rows[1]) < 1e-3 * scale + 1e-6).all()  # measured: under 2e-5 of the scale
    assert not np.allclose(rows[0][1:], rows[0][:-1])  # each layer its own query


def test_a_disarmed_capture_changes_no_logit_and_captures_nothing(bundled_model):
    capture, watched, _ = capture_session(bundled_model)
    plain = LlamaSession(bundled_model, n_ctx=1024, n_seq_max=2)
    tokens = bundled_model.tokenize("The quick brown fox jumps over the lazy dog.")
    watched.decode(tokens, 0)
    plain.decode(tokens, 0)
    assert np.array_equal(watched.last_logits(), plain.last_logits())
    capture.arm()
    capture.disarm()
    watched.decode(bundled_model.tokenize(" Then"), len(tokens))
    with pytest.raises(EpiError):  # nothing read reads as an error (a model without Qcur nodes), not as no query
        capture.queries()
    watched.close()
    plain.close()


@needs_patch
def test_layered_with_every_block_visible_answers_as_kv_mode_whole(engine, shared_store):
    """Same events, all visible in every layer: the same greedy answer as plain kv mode. Layered runs with flash
    attention on, kv mode with it off, so their logits differ by the two kernels' rounding (test_kv_memory.py
    measures it on blocks); with flash attention off too the logits are identical (test_layer_visibility.py)."""
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        got = ws.retrieve(st, TEXT_QUESTION, 2)
        plain, layered = Answer(), Answer()
        ws.answerer("kv", st, layered=True).budget = 10**9
        for answerer, answer in ((ws.answerer("kv", st), plain), (ws.answerer("kv", st, layered=True), layered)):
            for _ in answerer.stream(TEXT_QUESTION, got, None, time.perf_counter(), answer, max_tokens=24):
                pass
        assert ws.answerer("kv", st, layered=True).session.flash_attn
        assert not ws.answerer("kv", st).session.flash_attn
    ws.close()
    assert layered.layered.pool_blocks == len([r for r in got if r.n_tokens])
    assert set(layered.layered.visible_blocks) == {layered.layered.pool_blocks}
    assert plain.text and layered.text == plain.text


@needs_patch
def test_each_layer_sees_at_most_its_budget_and_the_question_still_answers(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        got = ws.retrieve(st, TEXT_QUESTION, 6, pool=True)
        answerer = ws.answerer("kv", st, layered=True)
        smallest = min(r.n_tokens for r in got)
        answerer.budget = max(smallest, sum(r.n_tokens for r in got) // 3)
        answer = Answer()
        for _ in answerer.stream(TEXT_QUESTION, got, None, time.perf_counter(), answer, max_tokens=16):
            pass
        budget = answerer.budget
    ws.close()
    report = answer.layered
    assert report.pool_blocks >= 3 and len(report.visible_tokens) == engine.model.info.n_layer
    assert max(report.visible_tokens) <= budget < report.pool_tokens
    assert min(report.visible_blocks) >= 1 and max(report.visible_blocks) < report.pool_blocks
    assert answer.text.strip()


@needs_patch
def test_the_question_is_read_with_the_anchors_and_its_last_token_again_under_the_selection(engine, shared_store):
    """The probe decodes the question with the anchors visible; the answer keeps those cells and decodes only the
    question's last token again under each layer's selection. When every layer selects exactly the anchors (the
    probe's own view) that gives the logits of decoding the whole question again, within the flash kernels' rounding
    (a one-token step against a batch; test_flash_decode.py): a question cell lost or doubled in the cache, or the
    last token at the wrong position, would move them far more. When the layers select more, the last token reads
    it: the logits move."""
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        pool = ws.retrieve(st, TEXT_QUESTION, 6, pool=True)
        (best,) = ws.retrieve(st, TEXT_QUESTION, 1, neighbours=0)
        assert best.event.id in {r.event.id for r in pool} and len(pool) >= 3
        answerer = ws.answerer("kv", st, layered=True)
        answerer.anchors = {best.event.id}
        logits, reports = {}, {}
        for case, reread, budget in (("reread", True, best.n_tokens), ("kept", False, best.n_tokens),
                                     ("kept, all selected", False, 10**9)):
            answerer.reread_question, answerer.budget = reread, budget
            answerer.reset()
            answer = Answer()
            for _ in answerer.stream(TEXT_QUESTION, pool, None, time.perf_counter(), answer, max_tokens=0):
                pass
            logits[case], reports[case] = answerer.session.last_logits().copy(), answer.layered
    ws.close()
    assert set(reports["kept"].visible_tokens) == {best.n_tokens}  # every layer: the anchor alone
    assert set(reports["kept, all selected"].visible_blocks) == {len(pool)}
    assert np.isfinite(logits["kept"]).all()
    assert np.abs(logits["kept"] - logits["reread"]).max() < 0.1
    assert logits["kept"].argmax() == logits["reread"].argmax()
    assert np.abs(logits["kept, all selected"] - logits["kept"]).max() > 0.5


@needs_patch
def test_the_anchors_leave_every_layer_a_share_of_its_budget_to_choose(engine, shared_store, monkeypatch):
    """Retrieval's own events, which every layer sees first, fill at most LAYERED_ANCHOR_TOKENS of a layer's budget:
    uncapped, the default k=5 and its neighbours filled the whole budget and no layer chose a block. This store holds
    ~3k tokens, so the budgets are scaled down with it (the anchors' cap, a layer's budget)."""
    from episodic_cli.engine import ask_run

    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        events = ws.retrieve(st, TEXT_QUESTION, 50, pool=True)
        cap = sorted(r.n_tokens for r in events)[-1] + 1  # room for the best hit, whatever its size, and little more
        monkeypatch.setattr(ask_run, "LAYERED_ANCHOR_TOKENS", cap)
        answerer = ws.answerer("kv", st, layered=True)
        answerer.budget = 2 * cap
        result, stream = ws.ask(st, TEXT_QUESTION, AskOptions(layered=True), should_stop=lambda: True)  # the default k
        for _ in stream:
            pass
    ws.close()
    report = result.answer.layered
    anchored = [i for i, event_id in enumerate(report.event_ids) if event_id in answerer.anchors]
    chosen = np.delete(report.visible, anchored, axis=1)
    sizes = {r.event.id: r.n_tokens for r in result.retrieved}
    assert 0 < sum(sizes[report.event_ids[i]] for i in anchored) <= cap < report.pool_tokens
    assert report.visible[:, anchored].all()  # every layer sees the anchors
    assert chosen.any(axis=1).all()  # and every layer chose something besides them


@needs_patch
def test_a_follow_up_with_a_smaller_pool_leaves_no_cell_in_the_old_block_sequences(engine, shared_store):
    """Chat: the second question's pool is smaller; every block sequence it does not use must be empty (a cell left
    in one would stay allocated, and a later pool could hide or show it by mistake)."""
    import llama_cpp as L

    from episodic_cli.engine.answer.layered import FIRST_BLOCK_SEQ
    from episodic_cli.engine.budgets import MAX_POOL

    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        answerer = ws.answerer("kv", st, layered=True)
        first, second = Answer(), Answer()
        for _ in answerer.stream(TEXT_QUESTION, ws.retrieve(st, TEXT_QUESTION, 6, pool=True), None,
                                 time.perf_counter(), first, max_tokens=2):
            pass
        for _ in answerer.stream(TEXT_QUESTION, ws.retrieve(st, TEXT_QUESTION, 1, neighbours=0), None,
                                 time.perf_counter(), second, max_tokens=2):
            pass
        memory = answerer.session.memory
        used = sum(L.llama_memory_seq_pos_max(memory, FIRST_BLOCK_SEQ + i) >= 0 for i in range(MAX_POOL))
    ws.close()
    assert first.layered.pool_blocks > second.layered.pool_blocks == 1
    assert used == 1


def test_lanes_pack_blocks_back_from_the_question_and_share_positions_only_beyond_the_window():
    first, span = 100, 1000
    assert lane_places([300, 200, 400], first, 900) == [100, 400, 600]  # span = the pool: in order, as kv mode
    assert lane_places([300, 200, 400], first, span) == [200, 500, 700]  # a wider span: moved up to the question
    sizes = [250, 400, 300, 500, 450, 100]
    places = lane_places(sizes, first, span)
    assert places == [450, 700, 300, 600, 550, 1000]
    ends = [p + n for p, n in zip(places, sizes)]
    assert all(first <= p and e <= first + span for p, e in zip(places, ends))
    assert ends[-1] == first + span  # the best block ends right before the question
    for i in range(len(sizes) - 1):  # each block runs into the next one, or ends its lane right before the question
        assert ends[i] == places[i + 1] or ends[i] == first + span
    lanes = 1 + sum(ends[i] != places[i + 1] for i in range(len(sizes) - 1))
    assert lanes == 3  # 100+450 | 500+300 | 400+250, packed from the back
    with pytest.raises(ValueError):
        lane_places([1001], first, span)


@needs_patch
def test_blocks_sharing_positions_hidden_in_every_layer_are_exactly_absent(bundled_model):
    """Two blocks at the same positions (two lanes), each in a sequence of its own and in sequence 0: hiding one in
    every layer gives exactly (max abs diff 0.0) the logits of the other loaded alone at those positions, with flash
    attention on as the layered context runs it: llama.cpp keeps cells of equal positions apart, and the question
    follows the highest position. With both shown, both count (the logits differ from either alone)."""
    import llama_cpp as L

    text = bundled_model.tokenize(license_text())
    sink, a, b = text[:16], text[300:348], text[900:948]
    question = bundled_model.tokenize(" Question: what does the license say about patents? Answer:")
    session = LlamaSession(bundled_model, n_ctx=512, n_seq_max=5, flash_attn=True)
    s = len(sink)
    blobs = []
    for block in (a, b):  # each block computed behind the sink alone, then captured
        session.clear()
        session.prefill(sink, 0)
        session.prefill(block, s)
        blobs.append(capture_block(session, 0, s, s + len(block)))

    def logits(loaded: list[int], hidden: list[int]) -> np.ndarray:
        session.clear()
        session.prefill(sink, 0)
        for i in loaded:
            load_block(session, blobs[i], 2 + i, s)
            L.llama_memory_seq_cp(session.memory, 2 + i, 0, -1, -1)
        layer_visibility.set_hidden_seqs(session.ctx, -1, [2 + i for i in hidden])
        try:
            session.prefill(question, s + len(a))
            return session.last_logits().copy()
        finally:
            layer_visibility.clear(session.ctx)

    alone_a, alone_b = logits([0], []), logits([1], [])
    both_hide_b, both_hide_a, both = logits([0, 1], [1]), logits([0, 1], [0]), logits([0, 1], [])
    session.close()
    assert np.abs(both_hide_b - alone_a).max() == 0.0
    assert np.abs(both_hide_a - alone_b).max() == 0.0
    assert np.abs(both - alone_a).max() > 0.1 and np.abs(both - alone_b).max() > 0.1


def lanes_answerer(ws, st, window: int = 1536, budget: int = 600) -> LayeredAnswerer:
    """A layered answerer whose answer context is small, so the shared store's pool (~3.5k tokens) needs lanes."""
    return LayeredAnswerer(ws.model, window, ws.block_keeper(st), budget, pool_tokens=6000, n_threads=ws.threads)


@needs_patch
def test_a_pool_larger_than_the_window_is_laid_in_lanes_below_it_and_answers(engine, shared_store):
    """More blocks than the answer context's positions hold: they are loaded in lanes sharing positions, every
    position stays below the window (the model's trained length), each layer sees at most its budget, the answer
    is the model's own; asking again keeps every block where it was (chat) and answers the same."""
    import llama_cpp as L

    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        got = ws.retrieve(st, TEXT_QUESTION, 20, pool=True)
        answerer = lanes_answerer(ws, st)
        first, again = Answer(), Answer()
        for answer in (first, again):
            for _ in answerer.stream(TEXT_QUESTION, got, None, time.perf_counter(), answer, max_tokens=16):
                pass
        last_position = L.llama_memory_seq_pos_max(answerer.session.memory, 0)
        answerer.close()
    ws.close()
    report = first.layered
    assert report.pool_tokens > 1536 and report.lanes >= 3
    assert last_position < 1536
    assert max(report.visible_tokens) <= 600 and min(report.visible_blocks) >= 1
    assert first.text.strip() and again.text == first.text
    assert first.kv_loaded_tokens == report.pool_tokens and first.reused_tokens == 0
    assert again.kv_loaded_tokens == 0 and again.reused_tokens > report.pool_tokens  # the blocks, and the sink


@needs_patch
def test_cold_pool_blocks_are_prepared_in_their_lanes_and_kept_for_the_next_answer(engine, shared_store, tmp_path):
    """A tier that lost its blocks: the layered pool prepares each event from its text (behind the sink, in its own
    sequence), offers it to the tier, and the next answer loads every one of them."""
    import shutil

    store_dir = tmp_path / "cold"
    shutil.copytree(shared_store.store_dir, store_dir)
    for path in tier_block_paths(store_dir):
        path.unlink()
    ws = workspace_for(engine, store_dir)
    with Store.open_existing(store_dir) as st:
        got = ws.retrieve(st, TEXT_QUESTION, 20, pool=True)
        first, second = Answer(), Answer()
        for answer in (first, second):
            answerer = lanes_answerer(ws, st)
            for _ in answerer.stream(TEXT_QUESTION, got, None, time.perf_counter(), answer, max_tokens=8):
                pass
            answerer.close()
    ws.close()
    assert first.layered.lanes >= 3
    assert first.kv_loaded_tokens == 0 and first.kv_prefilled_tokens == first.layered.pool_tokens
    assert second.kv_prefilled_tokens == 0 and second.kv_loaded_tokens == first.layered.pool_tokens
    assert first.text.strip() and second.text.strip()


@needs_patch
def test_ask_layered_json_reports_the_pool_and_each_layer(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--layered",
                                 "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    layered = out["layered"]
    assert layered["pool_blocks"] == len([s for s in out["sources"] if s["text"]]) >= 1
    assert len(layered["visible_blocks"]) == len(layered["visible_tokens"]) > 0
    assert layered["load_s"] > 0 and layered["probe_s"] > 0  # where the first token's time went
    assert out["narrowed"] is False and out["kv_loaded_tokens"] + out["kv_prefilled_tokens"] > 0


@needs_patch
def test_ask_layered_pool_sets_the_pool_size(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    # this store holds ~3k tokens, less than the smallest pool a user may ask for: lower the bound to see --pool act
    monkeypatch.setattr(ask_options, "POOL_TOKENS_RANGE", (1000, 48_000))
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--layered",
                                 "--pool", "1200", "--json"])
    assert result.exit_code == 0, result.output
    layered = json.loads(result.stdout)["layered"]
    assert 0 < layered["pool_tokens"] <= 1200 and layered["lanes"] == 1


@pytest.mark.parametrize("pool", ["1200", "48001", "-5"])
def test_ask_pool_outside_its_range_says_what_to_do(shared_store, monkeypatch, pool):
    """A pool no larger than a layer's budget would be seen whole by every layer: refused in one line, like a pool
    too large to load."""
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--layered",
                                 "--pool", pool])
    assert_one_line_error(result, f"--pool {pool}", "4,096-48,000")


def test_ask_pool_without_layered_says_what_to_do(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--pool", "20000"])
    assert_one_line_error(result, "--pool", "--layered")


def test_ask_layered_without_the_patch_says_what_to_do(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    monkeypatch.setattr(layer_visibility, "available", lambda: False)  # failure injection: an unpatched build
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--layered"])
    assert_one_line_error(result, "--layered", "install.sh")


def test_ask_layered_in_text_mode_is_refused(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--layered",
                                 "--mode", "text"])
    assert_one_line_error(result, "--layered", "kv mode")
