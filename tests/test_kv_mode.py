"""kv mode end to end on the real model: ingest captures one block per event, `ask` answers from the blocks by
default, `--mode text` still re-reads text, and a damaged block falls back to the event's text with a warning."""
from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from conftest import PDF_QUESTION, TEXT_QUESTION, workspace_for
from episodic_cli.app import app
from episodic_cli.engine.kv_memory import decode_block
from episodic_cli.store import Store
from episodic_cli.store.kv_blocks import KVBlockReader

runner = CliRunner()


def ask_json(store_dir, *extra: str):
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(store_dir), "-k", "1", "--neighbours", "0",
                                 "--json", *extra])
    return result


def test_ingest_captures_one_block_per_event(shared_store):
    with Store.open_existing(shared_store.store_dir) as st:
        events = [e for d in st.documents() for e in st.events_of(d.id)]
        reader = KVBlockReader(st.kv_block_path)
        try:
            for ev in events:
                assert ev.kv_offset is not None and ev.kv_length is not None
                block = reader.read(ev.kv_offset, event_id=ev.ordinal, length=ev.kv_length)
                assert block.n_tokens == ev.token_end - ev.token_start
                parsed = decode_block(block.payload, "q8_0")
                # One cell per token, covering consecutive positions (the event's place in the ingest window; cells
                # come in cache-slot order, which after a window slide is not position order).
                pos = sorted(parsed.positions.tolist())
                assert len(pos) == block.n_tokens and pos == list(range(pos[0], pos[0] + len(pos)))
        finally:
            reader.close()


def test_text_mode_still_answers_from_text(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    result = ask_json(shared_store.store_dir, "--mode", "text")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["mode"] == "text" and out["answer"]


def test_kv_and_text_mode_use_the_same_sources(shared_store, shared_ask, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    text = json.loads(ask_json(shared_store.store_dir, "--mode", "text").stdout)
    kv = json.loads(shared_ask.stdout)
    assert [s["event_id"] for s in kv["sources"]] == [s["event_id"] for s in text["sources"]]
    assert kv["mode"] == "kv" and kv["answer"]


def test_damaged_blocks_fall_back_to_text_with_a_warning(shared_store, tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    store_dir = tmp_path / "damaged"
    shutil.copytree(shared_store.store_dir, store_dir)
    with Store.open_existing(store_dir) as st:
        offsets = [(e.kv_offset, e.kv_length) for d in st.documents() for e in st.events_of(d.id)]
        block_file = st.kv_block_path
    with open(block_file, "r+b") as f:
        for offset, length in offsets:  # flip one payload bit in every block
            f.seek(offset + length // 2)
            byte = f.read(1)[0]
            f.seek(offset + length // 2)
            f.write(bytes([byte ^ 0x10]))
    result = ask_json(store_dir)
    assert result.exit_code == 0, result.stderr
    assert "warning:" in result.stderr and "reading its text instead" in result.stderr
    assert "Traceback" not in result.stderr
    out = json.loads(result.stdout)
    assert out["mode"] == "kv" and out["answer"] and out["sources"]


def kv_answer(ws, st, question: str):
    result, stream = ws.ask(st, question, k=1, neighbours=1, mode="kv")
    for _ in stream:
        pass
    return result.answer


def test_a_follow_up_keeps_the_shared_cache_and_answers_as_from_scratch(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        first = kv_answer(ws, st, TEXT_QUESTION)
        again = kv_answer(ws, st, TEXT_QUESTION)  # same events: the sink and every block stay in the cache
        answerer = ws.answerer("kv")
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
    answerer = ws.answerer("kv")
    answerer.sink_dir = tmp_path / "sinks"
    decoded = []
    prefill = answerer.session.prefill
    answerer.session.prefill = lambda tokens, pos=0: decoded.append(len(tokens)) or prefill(tokens, pos)
    with Store.open_existing(shared_store.store_dir) as st:
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
    from episodic_cli.engine.kv_mode import sink_tokens

    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        got = ws.retrieve(st, TEXT_QUESTION, 1)
        parts = ws.answerer("kv")._plan(TEXT_QUESTION, got, None, None)
        assert list(parts[0].tokens) == list(sink_tokens(engine.model))
        doc = got[0].document
        first = min(st.events_of(doc.id), key=lambda e: e.ordinal)
        reader = KVBlockReader(st.kv_block_path)
        try:
            block = decode_block(reader.read(first.kv_offset, event_id=first.ordinal, length=first.kv_length).payload)
        finally:
            reader.close()
    ws.close()
    assert block.positions.min() == len(parts[0].tokens)  # document token 0 sat right behind the sink
