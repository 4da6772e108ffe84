"""KV block file compaction: live blocks survive byte for byte at their new offsets, the file shrinks, the switch is
atomic against crashes (simulated in a subprocess at each step) and a full disk, readers follow the switch, and stores
made before compaction existed keep working. Blocks are synthetic (KVBlockWriter + Store rows, no model) except in the
one end-to-end CLI test."""
from __future__ import annotations

import errno
import json
import sqlite3
import subprocess
import sys
import zlib

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import prose_lines, workspace_for
from test_kv_blocks import HEADER
from test_store import IDENTITY, make_doc
from episodic_cli.app import app
from episodic_cli.engine.segment import SegmentParams
from episodic_cli.engine.sources import discover
from episodic_cli.store import Store, StoreError
from episodic_cli.store import episodic_store, kv_blocks
from episodic_cli.store.kv_blocks import BlockType, KVBlockReader, KVBlockWriter
from episodic_cli.store.kv_compaction import KVUsage
from episodic_cli.store.kv_current import CurrentBlockReader, current_block_path
from episodic_cli.store.kv_generations import GENERATION_KEY

runner = CliRunner()
GEN0, GEN1 = "kv/blocks.ekv", "kv/blocks.1.ekv"


def payload(name: str, version: int, ordinal: int, size: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(f"{name}/{version}/{ordinal}".encode()))
    return rng.integers(0, 256, size, dtype=np.uint8)


def ingest(store: Store, name: str, version: int, n_events: int = 4, size: int = 3000):
    """What `epi ingest` does to the store, with synthetic blocks: append under the writer lock, sync, commit."""
    doc, events = make_doc(name, [f"{name} v{version} event {j}" for j in range(n_events)],
                           np.random.default_rng(version))
    with store.writer():
        with KVBlockWriter(store.kv_block_path, HEADER) as writer:
            for ev in events:
                ev.kv_offset, ev.kv_length = writer.append(ev.ordinal, BlockType.Q8_0, 10,
                                                           payload(name, version, ev.ordinal, size))
        store.replace_document(doc, events)
    return events


def live_blocks(store: Store) -> dict[int, tuple[int, bytes]]:
    """event id -> (offset, raw block bytes) for every event with a block."""
    data = store.kv_block_path.read_bytes()
    return {e.id: (e.kv_offset, data[e.kv_offset: e.kv_offset + e.kv_length])
            for d in store.documents() for e in store.events_of(d.id) if e.kv_offset is not None}


def kv_files(store_dir) -> list[str]:
    return sorted(p.name for p in (store_dir / "kv").iterdir())


@pytest.fixture
def store(tmp_path):
    """Three documents, one re-ingested and one removed: about half of the block file is dead."""
    s = Store.create_or_open(tmp_path / "st", IDENTITY)
    for name in ("a.txt", "b.txt", "c.txt"):
        ingest(s, name, 1)
    ingest(s, "a.txt", 2)
    assert s.remove_document("/abs/b.txt")
    yield s
    s.close()


def test_compaction_keeps_every_live_block_and_shrinks_the_file(store):
    before = live_blocks(store)
    usage = store.kv_usage()
    assert usage.file_bytes == store.kv_block_path.stat().st_size
    assert usage.dead_bytes == 2 * 4 * (kv_blocks.BLOCK_HEADER.size + 3000)  # a.txt v1 and b.txt
    stats = store.stats()
    assert (stats["kv_file_bytes"], stats["kv_live_bytes"], stats["kv_dead_bytes"]) == (
        usage.file_bytes, usage.live_bytes, usage.dead_bytes)

    copied: list[int] = []
    result = store.compact_kv_blocks(progress=copied.append)

    assert sum(copied) == usage.block_bytes and len(copied) == 8
    assert store.kv_block_path == store.path / GEN1 and kv_files(store.path) == ["blocks.1.ekv"]
    assert (result.bytes_before, result.bytes_after) == (usage.file_bytes, usage.live_bytes)
    assert result.reclaimed_bytes == usage.dead_bytes and (result.blocks_kept, result.blocks_dropped) == (8, 0)
    after = live_blocks(store)
    assert after.keys() == before.keys()
    assert all(after[i][1] == before[i][1] for i in before)  # the same bytes, verbatim
    assert any(after[i][0] != before[i][0] for i in before)  # at new offsets
    assert store.kv_usage() == KVUsage(usage.live_bytes, usage.header_bytes, usage.block_bytes)
    with KVBlockReader(store.kv_block_path, HEADER) as reader:
        for d in store.documents():
            for e in store.events_of(d.id):
                block = reader.read(e.kv_offset, event_id=e.ordinal, length=e.kv_length)
                np.testing.assert_array_equal(block.payload, payload(d.display_path, 2 if d.display_path == "a.txt" else 1,
                                                                      e.ordinal))
    assert store.health() == []

    ingest(store, "d.txt", 1)  # ingest appends to the new generation's file
    assert kv_files(store.path) == ["blocks.1.ekv"] and len(live_blocks(store)) == 12
    with Store.open_existing(store.path) as again:
        assert again.kv_block_path == store.path / GEN1 and live_blocks(again) == live_blocks(store)


def test_a_store_made_before_compaction_keeps_working(tmp_path):
    s = Store.create_or_open(tmp_path / "st", IDENTITY)
    ingest(s, "a.txt", 1)
    ingest(s, "a.txt", 2)
    conn = sqlite3.connect(s.path / "store.sqlite3")
    assert conn.execute("SELECT value FROM meta WHERE key = ?", (GENERATION_KEY,)).fetchone() is None
    conn.close()
    assert s.kv_block_path == current_block_path(s.path) == s.path / GEN0
    event = s.events_of(s.documents()[0].id)[1]
    with CurrentBlockReader(s.path, HEADER) as reader:
        assert reader.read(event.kv_offset, event.ordinal, event.kv_length).payload.tobytes() == \
            payload("a.txt", 2, 1).tobytes()
    before = live_blocks(s)
    s.compact_kv_blocks()
    assert current_block_path(s.path) == s.path / GEN1 and kv_files(s.path) == ["blocks.1.ekv"]
    ingest(s, "a.txt", 3)
    s.compact_kv_blocks()
    assert kv_files(s.path) == ["blocks.2.ekv"] and len(live_blocks(s)) == len(before)
    s.close()
    assert current_block_path(tmp_path / "nowhere") == tmp_path / "nowhere" / GEN0  # no store yet: the default


def test_a_corrupt_block_is_dropped_and_its_event_falls_back_to_text(store):
    events = {e.id: e for d in store.documents() for e in store.events_of(d.id)}
    victim = next(iter(events.values()))
    with open(store.kv_block_path, "r+b") as f:
        f.seek(victim.kv_offset + victim.kv_length - 1)
        byte = f.read(1)[0]
        f.seek(victim.kv_offset + victim.kv_length - 1)
        f.write(bytes([byte ^ 0x01]))
    before = live_blocks(store)
    result = store.compact_kv_blocks()
    assert (result.blocks_kept, result.blocks_dropped) == (7, 1)
    after = live_blocks(store)
    assert victim.id not in after and store.get_events([victim.id])[0].kv_offset is None
    assert store.get_events([victim.id])[0].kv_length is None
    assert all(after[i][1] == before[i][1] for i in after)


def _fail_block_writes(monkeypatch, after_calls: int) -> None:
    real, calls = kv_blocks.os.pwrite, {"n": 0}

    def pwrite(fd, data, offset):
        calls["n"] += 1
        if calls["n"] > after_calls:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(kv_blocks.os, "pwrite", pwrite)


def _fail_sqlite_commit(monkeypatch) -> None:
    def full(conn, generation):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(episodic_store, "record_generation", full)


@pytest.mark.parametrize("fail", ["header", "block", "sqlite"])
def test_a_full_disk_leaves_the_store_as_it_was(store, monkeypatch, fail):
    before, path, file_bytes = live_blocks(store), store.kv_block_path, store.kv_block_path.read_bytes()
    if fail == "sqlite":
        _fail_sqlite_commit(monkeypatch)
    else:
        _fail_block_writes(monkeypatch, after_calls=0 if fail == "header" else 5)
    with pytest.raises(StoreError, match="disk full while compacting .*nothing was changed") as err:
        store.compact_kv_blocks()
    assert "\n" not in str(err.value)
    monkeypatch.undo()
    assert store.kv_block_path == path and path.read_bytes() == file_bytes
    assert kv_files(store.path) == ["blocks.ekv"]  # the new file is gone
    assert live_blocks(store) == before
    with store.writer():  # the lock was released
        pass
    assert store.compact_kv_blocks().reclaimed_bytes > 0  # and it works once there is room


CRASH = """
import os, sys
from episodic_cli.store import Store, episodic_store, kv_blocks

def crash(*args, **kwargs):
    os._exit(3)

step = sys.argv[2]
if step == "mid-copy":
    real, calls = kv_blocks.KVBlockWriter.append, []
    def append(self, *args):
        calls.append(1)
        return crash() if len(calls) == 3 else real(self, *args)
    kv_blocks.KVBlockWriter.append = append
elif step == "before-commit":
    episodic_store.record_generation = crash  # inside the open transaction
elif step == "after-commit":
    episodic_store._remove_block_file = crash
with Store.open_existing(sys.argv[1]) as st:
    st.compact_kv_blocks()
"""


@pytest.mark.parametrize("step,current,orphan", [("mid-copy", GEN0, GEN1), ("before-commit", GEN0, GEN1),
                                                 ("after-commit", GEN1, GEN0)])
def test_a_crash_at_any_step_leaves_one_current_file_and_an_orphan_the_next_writer_removes(store, step, current,
                                                                                            orphan):
    before = live_blocks(store)
    store_dir = store.path
    store.close()
    done = subprocess.run([sys.executable, "-c", CRASH, str(store_dir), step], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    with Store.open_existing(store_dir) as st:
        assert st.kv_block_path == store_dir / current and (store_dir / orphan).is_file()
        after = live_blocks(st)  # every live block is readable where SQLite says it is
        assert {i: raw for i, (_, raw) in after.items()} == {i: raw for i, (_, raw) in before.items()}
        with st.writer():
            pass
        assert not (store_dir / orphan).exists() and (store_dir / current).is_file()
        st.compact_kv_blocks()  # and compaction works again
        assert {i: raw for i, (_, raw) in live_blocks(st).items()} == {i: raw for i, (_, raw) in before.items()}


def test_readers_holding_the_old_file(store):
    """A plain reader keeps reading the old (deleted) file at the old offsets until it is reopened; the answerer's
    CurrentBlockReader follows the switch at its next read."""
    old_path = store.kv_block_path
    before = live_blocks(store)
    events = [e for d in store.documents() for e in store.events_of(d.id)]
    with KVBlockReader(old_path, HEADER) as pinned, CurrentBlockReader(store.path, HEADER) as following:
        store.compact_kv_blocks()
        assert not old_path.exists()
        moved = {e.id: e for e in store.get_events([e.id for e in events])}
        for e in events:
            raw = before[e.id][1]
            assert pinned.read(e.kv_offset, e.ordinal, e.kv_length).payload.tobytes() == raw[32:]
            new = moved[e.id]
            assert following.read(new.kv_offset, new.ordinal, new.kv_length).payload.tobytes() == raw[32:]
        assert following.path == store.path / GEN1


@pytest.mark.parametrize("file_mib,dead_mib,worth", [(100, 60, False), (200, 65, False), (130, 66, True),
                                                     (1000, 400, False), (1000, 600, True)])
def test_automatic_compaction_needs_half_the_file_and_64_mib_dead(file_mib, dead_mib, worth):
    usage = KVUsage(file_mib << 20, 100, ((file_mib - dead_mib) << 20) - 100)
    assert usage.dead_bytes == dead_mib << 20 and usage.worth_compacting is worth


def test_a_writer_whose_file_was_compacted_away_refuses_to_sync(store):
    """An ingest that opened the block file before another process compacted it must not commit its offsets."""
    with KVBlockWriter(store.kv_block_path, HEADER) as late:
        store.compact_kv_blocks()
        late.append(0, BlockType.Q8_0, 1, b"x")
        with pytest.raises(StoreError, match="replaced by a compaction"):
            late.sync()


# ------------------------------------------------------------------------------------------------------ CLI


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_cli_ls_shows_the_waste_and_compact_reclaims_it(store):
    listing = json.loads(invoke("ls", "--store", store.path, "--json").stdout)
    assert listing["kv_dead_bytes"] > 0 and listing["kv_file_bytes"] > listing["kv_live_bytes"] > 0
    shown = invoke("ls", "--store", store.path)
    assert "epi compact" in shown.stdout

    result = invoke("compact", "--store", store.path, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out == {"store": str(store.path), "compacted": True, "bytes_before": listing["kv_file_bytes"],
                   "bytes_after": listing["kv_live_bytes"], "reclaimed_bytes": listing["kv_dead_bytes"],
                   "blocks_dropped": 0}
    again = invoke("compact", "--store", store.path)
    assert again.exit_code == 0 and "nothing to reclaim" in again.stderr
    assert "epi compact" not in invoke("ls", "--store", store.path).stdout


def test_cli_compact_on_a_full_disk_is_one_line_error(store, monkeypatch):
    _fail_block_writes(monkeypatch, after_calls=3)
    result = invoke("compact", "--store", store.path)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().count("\n") == 0 and "disk full while compacting" in result.stderr
    assert kv_files(store.path) == ["blocks.ekv"]


def test_cli_rm_compacts_once_dead_blocks_dominate(tmp_path):
    with Store.create_or_open(tmp_path / "st", IDENTITY) as s:
        ingest(s, "big.txt", 1, n_events=17, size=4 << 20)  # 68 MiB, soon dead
        kept = {e.id for e in ingest(s, "small.txt", 1)}
        small = {i: block for i, block in live_blocks(s).items() if i in kept}
    result = invoke("rm", "big.txt", "--store", tmp_path / "st")
    assert result.exit_code == 0, result.output
    assert "compacted the KV block file: reclaimed 68.0 MB" in result.stderr
    with Store.open_existing(tmp_path / "st") as s:
        assert s.kv_block_path == s.path / GEN1 and kv_files(s.path) == ["blocks.1.ekv"]
        assert {i: raw for i, (_, raw) in live_blocks(s).items()} == {i: raw for i, (_, raw) in small.items()}


def _ingest_with_model(ws, path, params):
    """What `epi ingest` does, on the session's loaded model: writer lock first, then the block file is opened."""
    st = ws.store_for_writing(params)
    try:
        with st.writer():
            ingestor = ws.ingestor(st, params)
            try:
                (result,) = ingestor.ingest(discover([path]))
            finally:
                ingestor.close()
    finally:
        st.close()
    assert result.status == "ingested", result.error


def test_end_to_end_reingest_compact_and_ask_in_kv_mode(engine, tmp_path):
    """The real model: ingest, edit, re-ingest, `epi compact`, and kv mode still answers from the moved blocks."""
    doc = tmp_path / "harbour.txt"
    fact = "The harbour master keeps the spare lighthouse key in the blue tin."
    params = SegmentParams(min_tokens=32, max_tokens=96)
    ws = workspace_for(engine, tmp_path / "st")
    warnings: list[str] = []
    ws.warn = warnings.append
    doc.write_text("\n".join(prose_lines(3, 8) + [fact]) + "\n", encoding="utf-8")
    _ingest_with_model(ws, doc, params)
    doc.write_text("\n".join(prose_lines(4, 8) + [fact]) + "\n", encoding="utf-8")
    _ingest_with_model(ws, doc, params)
    dead = json.loads(invoke("ls", "--store", ws.store_dir, "--json").stdout)["kv_dead_bytes"]
    assert dead > 0  # far below the automatic threshold

    compacted = json.loads(invoke("compact", "--store", ws.store_dir, "--json").stdout)
    assert compacted["compacted"] and compacted["reclaimed_bytes"] == dead
    assert kv_files(ws.store_dir) == ["blocks.1.ekv"]
    try:
        with Store.open_existing(ws.store_dir) as st:
            result, stream = ws.ask(st, "Where is the spare lighthouse key kept?", k=1, mode="kv")
            for _ in stream:
                pass
    finally:
        ws.close()
    assert warnings == []  # every block was found at its new offset and passed its check
    assert result.mode == "kv" and result.answer.text.strip()
    assert any(fact in r.event.text for r in result.retrieved)
