"""kv mode end to end on the real model: ingest captures one block per event into the model's tier, `ask` answers
from the blocks by default, `--mode text` still re-reads text, and a damaged block is prepared again from the event's
text with a warning, which repairs it."""
from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from conftest import PDF_QUESTION, TEXT_QUESTION, tier_block, tier_block_paths, workspace_for
from episodic_cli.app import app
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.kv.blocks import decode_block
from episodic_cli.store import Store

runner = CliRunner()


def ask_json(store_dir, *extra: str):
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(store_dir), "-k", "1", "--neighbours", "0",
                                 "--json", "--whole", *extra])  # whole events: these tests are about the blocks
    return result


def test_ingest_captures_one_block_per_event(shared_store):
    with Store.open_existing(shared_store.store_dir) as st:
        pairs = [(e, d) for d in st.documents() for e in st.events_of(d.id)]
        assert len(tier_block_paths(st.path)) == len(pairs)  # one tier (the bundled model), one block per event
        for ev, doc in pairs:
            block = tier_block(st, ev, doc)
            assert block is not None and block.n_tokens == ev.token_end - ev.token_start
            assert block.rep_keys is not None and block.rep_keys.shape[1] == 4  # representative keys move with it
            parsed = decode_block(block.payload, "q8_0")
            # One cell per token, covering consecutive positions (the event's place in the ingest window; cells
            # come in cache-slot order, which after a window slide is not position order).
            pos = sorted(parsed.positions.tolist())
            assert len(pos) == block.n_tokens and pos == list(range(pos[0], pos[0] + len(pos)))


def test_text_mode_still_answers_from_text(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    result = ask_json(shared_store.store_dir, "--mode", "text")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["mode"] == "text" and out["text"]


def test_kv_and_text_mode_use_the_same_sources(shared_store, shared_ask, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    text = json.loads(ask_json(shared_store.store_dir, "--mode", "text").stdout)
    kv = json.loads(shared_ask.stdout)
    assert [s["event_id"] for s in kv["sources"]] == [s["event_id"] for s in text["sources"]]
    assert kv["mode"] == "kv" and kv["text"]


def test_damaged_blocks_are_prepared_from_text_with_a_warning_which_repairs_them(shared_store, tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    store_dir = tmp_path / "damaged"
    shutil.copytree(shared_store.store_dir, store_dir)
    for path in tier_block_paths(store_dir):  # flip one payload bit in every block
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
    result = ask_json(store_dir)
    assert result.exit_code == 0, result.stderr
    assert "warning:" in result.stderr and "preparing it again from the text" in result.stderr
    assert "Traceback" not in result.stderr
    out = json.loads(result.stdout)
    assert out["mode"] == "kv" and out["text"] and out["sources"]
    assert out["kv_loaded_tokens"] == 0 and out["kv_prefilled_tokens"] > 0
    assert 0 < out["timings"]["progress_s"] <= out["timings"]["prefill_s"]  # shown before the preparing starts
    again = ask_json(store_dir)  # the damaged block was rebuilt from the text: it loads now, with no warning
    assert again.exit_code == 0 and "warning" not in again.stderr
    out = json.loads(again.stdout)
    assert out["kv_prefilled_tokens"] == 0 and out["kv_loaded_tokens"] > 0


def kv_answer(ws, st, question: str):
    # the blocks, not sentences; every one read, however long preparing the cold ones takes
    result, stream = ws.ask(st, question, AskOptions(k=1, neighbours=1, mode="kv", narrow=False, cold_seconds=None))
    for _ in stream:
        pass
    return result.answer


def test_a_follow_up_keeps_the_shared_cache_and_answers_as_from_scratch(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        first = kv_answer(ws, st, TEXT_QUESTION)
        again = kv_answer(ws, st, TEXT_QUESTION)  # same events: the sink and every block stay in the cache
        answerer = ws.answerer("kv", st)
        tail = len(answerer._plan(TEXT_QUESTION, ws.retrieve(st, TEXT_QUESTION, 1), None, None)[-1].tokens)
        assert first.reused_tokens == 0
        assert again.reused_tokens == again.prompt_tokens - tail > 0
        other = kv_answer(ws, st, PDF_QUESTION)  # other events: only the sink is shared
        assert 0 < other.reused_tokens < again.reused_tokens
        answerer.reset()
        fresh = kv_answer(ws, st, TEXT_QUESTION)
    ws.close()
    assert fresh.reused_tokens == 0
    assert again.text == first.text == fresh.text


def test_the_sink_block_is_stored_once_and_rebuilt_when_damaged(engine, shared_store, tmp_path):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        answerer = ws.answerer("kv", st)
        answerer.sink_dir = tmp_path / "sinks"
        decoded = []
        prefill = answerer.session.prefill
        answerer.session.prefill = lambda tokens, pos=0: decoded.append(len(tokens)) or prefill(tokens, pos)
        built = kv_answer(ws, st, TEXT_QUESTION)  # decodes the sink and the question part, stores the sink
        (sink,) = (tmp_path / "sinks").iterdir()
        assert len(decoded) == 2 and decode_block(sink.read_bytes(), "f16").n_cells == decoded[0]
        answerer.reset()
        decoded.clear()
        loaded = kv_answer(ws, st, TEXT_QUESTION)  # the sink comes from disk: only the question part is decoded
        assert len(decoded) == 1
        sink.write_bytes(b"not a block")
        answerer.reset()
        decoded.clear()
        rebuilt = kv_answer(ws, st, TEXT_QUESTION)
        assert len(decoded) == 2 and decode_block(sink.read_bytes(), "f16").n_cells > 0
    ws.close()
    assert built.text == loaded.text == rebuilt.text


def test_blocks_follow_the_sink_they_were_computed_behind(engine, shared_store):
    """The ingest pass reads every document behind kv mode's sink: the answer's first part is those very tokens, and a
    document's first block was captured at the positions right behind it."""
    from episodic_cli.engine.prompt import sink_tokens

    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        got = ws.retrieve(st, TEXT_QUESTION, 1)
        parts = ws.answerer("kv", st)._plan(TEXT_QUESTION, got, None, None)
        assert list(parts[0].tokens) == list(sink_tokens(engine.model))
        doc = got[0].document
        first = min(st.events_of(doc.id), key=lambda e: e.ordinal)
        block = decode_block(tier_block(st, first, doc).payload)
    ws.close()
    assert block.positions.min() == len(parts[0].tokens)  # document token 0 sat right behind the sink
