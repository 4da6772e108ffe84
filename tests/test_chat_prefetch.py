"""`epi chat` prepares, while the user types, the blocks a follow-up would likely read (issue 36, item 2): the
neighbours of what the last answer read, nearest first, then the most retrieved; a helper process prepares them one
event at a time, with the real model, and leaves with the chat."""
from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from conftest import prose_lines, workspace_for
from episodic_cli.app import app
from episodic_cli.chat_prefetch import ChatPrefetch
from episodic_cli.engine.answer.kv_mode import event_block_key
from episodic_cli.store import Store

runner = CliRunner()


@pytest.fixture()
def cold_store(tmp_path):
    """A store of one document with many events and a KV budget, but no block prepared yet."""
    doc = tmp_path / "ledger.txt"
    doc.write_text("\n".join(prose_lines(7, 50)) + "\nThe harbour master keeps the brass keys in the blue tin.\n"
                   + "\n".join(prose_lines(8, 50)))
    store_dir = tmp_path / "store"
    result = runner.invoke(app, ["ingest", str(doc), "--store", str(store_dir), "--no-kv"])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["config", "--store", str(store_dir), "--kv-budget", "1GB"]).exit_code == 0
    return store_dir


def has_block(ws, st, event_id: int) -> bool:
    from episodic_cli.engine.answer.prefetch import retrieved_event

    return ws.block_keeper(st).has(event_block_key(retrieved_event(st, event_id)))


def test_likely_next_names_the_neighbours_nearest_first_and_prefetch_prepares_them(engine, cold_store):
    ws = workspace_for(engine, cold_store)
    with Store.open_existing(cold_store) as st:
        assert st.documents()[0].n_events >= 6
        read = ws.retrieve(st, "Where does the harbour master keep the keys?", 1, 0)
        [hit] = read
        ids = ws.likely_next(st, read)
        ordinals = {e.id: e.ordinal for e in st.events_of(hit.document.id)}
        distances = [abs(ordinals[i] - hit.event.ordinal) for i in ids]
        assert distances[0] == 0  # the hit itself first: read from text, it has no block either
        assert distances == sorted(distances) and set(distances) == {0, 1, 2}
        assert ws.prefetch(st, ids[:2]) == 2
        assert all(has_block(ws, st, i) for i in ids[:2])
        assert ws.likely_next(st, read) == ids[2:]  # what has a block is not named again
        assert ws.prefetch(st, ids[2:], should_stop=lambda: True) == 0
    ws.close()


def test_the_chat_helper_prepares_ahead_and_leaves_with_the_chat(engine, cold_store):
    ws = workspace_for(engine, cold_store)
    with Store.open_existing(cold_store) as st:
        read = ws.retrieve(st, "Where does the harbour master keep the keys?", 1, 0)
        helper = ChatPrefetch(ws, st)
        ids = helper.ahead(read)
        assert ids and helper.process is not None
        deadline = time.monotonic() + 180
        while not all(has_block(ws, st, i) for i in ids[:2]) and time.monotonic() < deadline:
            assert helper.process.poll() is None, "the helper died"
            time.sleep(0.5)
        assert all(has_block(ws, st, i) for i in ids[:2])
        process = helper.process
        helper.close()  # the chat ends: the helper leaves (after the event it is preparing, if any)
        assert process.poll() is not None and helper.process is None
        health = st.health()
        assert health == [], health
    ws.close()


def _helpers_of(store_dir) -> list[int]:
    """Pids of running prefetch helpers for this store (from /proc: no extra dependency)."""
    from pathlib import Path

    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"episodic_cli.chat_prefetch" in args and str(store_dir).encode() in args:
            found.append(int(cmdline.parent.name))
    return found


def test_epi_chat_with_prefetch_starts_the_helper_after_an_answer_and_ends_it_on_exit(cold_store):
    result = runner.invoke(app, ["chat", "--prefetch", "--store", str(cold_store)],
                           input="Where does the harbour master keep the keys?\n")
    assert result.exit_code == 0, result.output
    assert "sources" in result.output
    assert _helpers_of(cold_store) == []  # the chat ended: so did its helper
    with open(cold_store / "background-job.log", encoding="utf-8") as log:  # started, and stopped without an error
        assert "prefetch stopped" not in log.read()


def test_the_helper_sees_an_order_sent_just_after_another():
    """A pause written right after a prepare arrives in the same read; a buffered line reader kept it where select()
    never reported it, and the helper went on preparing during the answer."""
    import json
    import os

    from episodic_cli.chat_prefetch import OrderReader

    read_end, write_end = os.pipe()
    try:
        reader = OrderReader(read_end)
        os.write(write_end, (json.dumps({"prepare": [3, 4]}) + "\n" + json.dumps({"pause": True}) + "\n").encode())
        assert reader.take(blocking=True) == [{"prepare": [3, 4]}, {"pause": True}]
        assert reader.take(blocking=False) == []
        os.write(write_end, b'{"prepare": ')  # half an order: nothing yet, the rest follows
        assert reader.take(blocking=False) == []
        os.write(write_end, b'[5]}\n')
        assert reader.take(blocking=True) == [{"prepare": [5]}]
        os.close(write_end)
        write_end = -1
        assert reader.take(blocking=True) is None  # the chat ended
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
