"""The KV tier without a model: block files, the budget (counted from the files), LRU eviction, admission, clean-up,
and the upgrade of a format-1 store. The real-model side (capture, lazy materialisation, a second model) is in
test_kv_models.py."""
from __future__ import annotations

import json
import os
import random
import sqlite3
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

from episodic_cli.store import Store, StoreIdentity
from episodic_cli.store.kv_tier import Admission, BlockCorruptError, BlockType, KVSpace, TierConfig, block_key
from episodic_cli.store.kv_tier.block_file import HEADER_BYTES, read_block_file, write_block_file

CONFIG = TierConfig(model_name="Test Model", model_sha256="ab" * 32, llama_cpp_version="0.3.36", type_k="f16",
                    type_v="f16", flash_attn=False, n_layer=2, n_head_kv=1, head_dim=32, block_kind="q8_0")
OTHER = TierConfig(**{**CONFIG.__dict__, "model_name": "Other", "model_sha256": "cd" * 32})


def payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def key(i: int) -> bytes:
    return block_key("f" * 64, i, i + 1)


def files_bytes(kv_dir) -> int:
    return sum(p.stat().st_size for p in kv_dir.glob("*/blocks/*/*") if p.is_file())


# ------------------------------------------------------------------------------------------------ block files


def test_block_file_round_trip_with_rep_keys(tmp_path):
    rep = np.arange(2 * 4 * 8, dtype=np.float16).reshape(2, 4, 8)
    size = write_block_file(tmp_path / "a.ekvb", key(1), BlockType.Q8_0, 7, payload(1000), rep)
    assert size == (tmp_path / "a.ekvb").stat().st_size == HEADER_BYTES + 1000 + 12 + rep.nbytes
    block = read_block_file(tmp_path / "a.ekvb", key(1))
    assert block.block_type == BlockType.Q8_0 and block.n_tokens == 7
    assert block.payload.tobytes() == payload(1000) and np.array_equal(block.rep_keys, rep)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "other-key", "empty"])
def test_damaged_block_files_are_refused(tmp_path, damage):
    path = tmp_path / "a.ekvb"
    write_block_file(path, key(1), BlockType.F16, 3, payload(500), None)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[300] ^= 1
    elif damage == "truncate":
        data = data[:-10]
    elif damage == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(BlockCorruptError):
        read_block_file(path, key(2) if damage == "other-key" else key(1))


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        write_block_file(tmp_path / "blocks" / "a.ekvb", key(1), BlockType.F16, 3, payload(500), None)
    assert list((tmp_path / "blocks").iterdir()) == []


# ------------------------------------------------------------------------------------------------ the budget


def test_blocks_are_kept_while_the_budget_allows_and_ingest_never_evicts(tmp_path):
    space = KVSpace(tmp_path / "kv", budget_bytes=3 * (HEADER_BYTES + 1000))
    tier = space.tier(CONFIG)
    outcomes = [tier.offer(key(i), BlockType.Q8_0, 1, payload(1000, i), None, on_use=False) for i in range(5)]
    assert outcomes == [Admission.WRITTEN] * 3 + [Admission.NO_BUDGET] * 2
    assert files_bytes(tmp_path / "kv") == space.used_bytes() <= space.budget
    assert tier.offer(key(0), BlockType.Q8_0, 1, payload(1000, 0), None, on_use=False) == Admission.PRESENT


def test_a_full_tier_admits_a_block_on_its_second_use_evicting_the_least_recently_used(tmp_path):
    space = KVSpace(tmp_path / "kv", budget_bytes=3 * (HEADER_BYTES + 1000))
    tier = space.tier(CONFIG)
    for i in range(3):
        tier.offer(key(i), BlockType.Q8_0, 1, payload(1000, i), None, on_use=True)
        os.utime(tier.path_of(key(i)), (1000 + i, 1000 + i))  # block 0 is the least recently used ...
    tier.touch(key(0))                                          # ... until an answer loads it
    assert tier.offer(key(9), BlockType.Q8_0, 1, payload(1000), None, on_use=True) == Admission.DEFERRED
    assert tier.read(key(9)) is None
    assert tier.offer(key(9), BlockType.Q8_0, 1, payload(1000), None, on_use=True) == Admission.WRITTEN
    assert tier.read(key(9)) is not None and tier.read(key(0)) is not None
    assert tier.read(key(1)) is None  # the least recently used went
    assert files_bytes(tmp_path / "kv") <= space.budget


def test_a_block_larger_than_the_budget_is_refused_and_budget_zero_keeps_nothing(tmp_path):
    space = KVSpace(tmp_path / "kv", budget_bytes=0)
    tier = space.tier(CONFIG)
    for _ in range(2):
        assert tier.offer(key(1), BlockType.Q8_0, 1, payload(10), None, on_use=True) == Admission.NO_BUDGET
    assert files_bytes(tmp_path / "kv") == 0


def test_the_count_comes_from_the_files_and_follows_other_processes(tmp_path):
    budget = 4 * (HEADER_BYTES + 1000)
    a, b = KVSpace(tmp_path / "kv", budget), KVSpace(tmp_path / "kv", budget)
    a.tier(CONFIG).offer(key(1), BlockType.Q8_0, 1, payload(1000), None, on_use=False)
    b.tier(OTHER).offer(key(2), BlockType.Q8_0, 1, payload(1000), None, on_use=False)  # the budget covers every tier
    assert a.used_bytes() == b.used_bytes() == files_bytes(tmp_path / "kv")
    # Files appear or vanish behind our back (a crash, a user): the next count under the lock sees them.
    (tmp_path / "kv" / "space.stamp").unlink()
    stray = next((tmp_path / "kv").glob("*/blocks/*/*.ekvb"))
    stray.with_name("x.ekvb.123.tmp").write_bytes(b"half a block")  # left by a crash mid-write: removed
    stray.unlink()
    assert a.used_bytes() == files_bytes(tmp_path / "kv") == HEADER_BYTES + 1000
    assert not list((tmp_path / "kv").glob("*/blocks/*/*.tmp"))


def test_the_space_lock_is_reentrant_within_an_object_and_excludes_other_processes(tmp_path):
    space = KVSpace(tmp_path / "kv", 10**6)
    probe = ("import sys; from filelock import FileLock, Timeout\n"
             "try:\n    FileLock(sys.argv[1]).acquire(timeout=0)\nexcept Timeout:\n    sys.exit(3)")

    def other_process_gets_it() -> bool:
        rc = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "kv" / "space.lock")], timeout=60).returncode
        assert rc in (0, 3)
        return rc == 0

    with space._locked():
        with space._locked():  # nested in the same object: counted, not a deadlock
            assert not other_process_gets_it()
        assert not other_process_gets_it()  # still held until the outermost release
        space.tier(CONFIG).offer(key(1), BlockType.Q8_0, 1, payload(10), None, on_use=False)  # takes it inside too
    assert other_process_gets_it()


def test_lowering_the_budget_evicts_at_once_and_garbage_is_collected(tmp_path):
    space = KVSpace(tmp_path / "kv", 10**6)
    tier = space.tier(CONFIG)
    for i in range(4):
        tier.offer(key(i), BlockType.Q8_0, 1, payload(1000, i), None, on_use=False)
    space.budget = 2 * (HEADER_BYTES + 1000)
    space.shrink_to_budget()
    assert files_bytes(tmp_path / "kv") <= space.budget
    left = {f.key for f in space.block_files()}
    before = files_bytes(tmp_path / "kv")
    assert space.collect_garbage(live_keys=set()) == (len(left), before)
    assert files_bytes(tmp_path / "kv") == 0


def test_the_budget_is_never_exceeded_under_a_random_sequence_of_work(tmp_path):
    rng = random.Random(7)
    budget = 20_000
    space = KVSpace(tmp_path / "kv", budget)
    tiers = [space.tier(CONFIG), space.tier(OTHER)]
    live: set[bytes] = set()
    for step in range(400):
        action = rng.random()
        if action < 0.6:  # an ingest capture or an answer's cold block
            i = rng.randrange(60)
            tier = rng.choice(tiers)
            tier.offer(key(i), BlockType.Q8_0, 1, payload(rng.randrange(500, 6000), i), None,
                       on_use=rng.random() < 0.5)
            live.add(key(i))
        elif action < 0.8:  # an answer loads a block
            tier = rng.choice(tiers)
            i = rng.randrange(60)
            if tier.read(key(i)) is not None:
                tier.touch(key(i))
        elif action < 0.9:  # documents removed
            live -= {key(i) for i in rng.sample(range(60), 5)}
            space.collect_garbage(live)
        else:  # the budget changes
            space.budget = rng.choice([5_000, 20_000, 40_000])
            space.shrink_to_budget()
            budget = space.budget
        on_disk = files_bytes(tmp_path / "kv")
        assert on_disk <= budget, f"step {step}: {on_disk} bytes of blocks against a budget of {budget}"
        assert on_disk == space.used_bytes()


def test_store_layer_does_not_import_llama_cpp():
    code = "import sys, episodic_cli.store, episodic_cli.store.kv_tier; print('llama_cpp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


# ------------------------------------------------------------------------------------------ format 1 -> 2


def _write_v1_block_file(path, header: dict, blocks: list[tuple[int, int, bytes]]) -> list[tuple[int, int]]:
    """A format-1 block file exactly as epi 0.1 wrote it (store/upgrade/v1_blocks.py documents the layout)."""
    body = json.dumps(header, sort_keys=True).encode()
    data = struct.pack("<8sII", b"EPIKVBLK", 1, len(body)) + body + struct.pack("<I", zlib.crc32(body))
    where = []
    for ordinal, n_tokens, block_payload in blocks:
        fields = struct.pack("<4sHHqIQI", b"EKVB", 1, 8, ordinal, n_tokens, len(block_payload), 0)[:-4]
        crc = zlib.crc32(block_payload, zlib.crc32(fields))
        where.append((len(data), 32 + len(block_payload)))
        data += fields + struct.pack("<I", crc) + block_payload
    path.write_bytes(data)
    return where


def test_a_format_1_store_is_upgraded_in_place_without_losing_anything(tmp_path):
    from test_store import make_doc  # the archive tests' document/event builder

    store_dir = tmp_path / "old"
    identity = StoreIdentity(embedder="all-MiniLM-L6-v2", embed_dim=4)
    with Store.create_or_open(store_dir, identity) as st:
        doc, events = make_doc("book.txt", ["first", "second", "third"], np.random.default_rng(0), dim=4)
        st.replace_document(doc, events)
        rows = st._conn.execute("SELECT e.id, e.ordinal, e.char_start, e.char_end, d.content_sha256 FROM events e "
                                "JOIN documents d ON d.id = e.document_id ORDER BY e.ordinal").fetchall()
    # Turn it into what epi 0.1 left: format 1, the model in the identity, one block file, offsets in the rows.
    header = {"model_sha256": "ab" * 32, "llama_cpp_version": "0.3.36", "type_k": "f16", "type_v": "f16",
              "flash_attn": False, "n_layer": 2, "n_head_kv": 1, "head_dim": 32}
    blocks = [(ordinal, 5, payload(700, ordinal)) for _, ordinal, *_ in rows]
    blocks[2] = (2, 5, payload(700, 99))  # damaged below
    where = _write_v1_block_file(store_dir / "kv" / "blocks.ekv", header, blocks)
    data = bytearray((store_dir / "kv" / "blocks.ekv").read_bytes())
    data[where[2][0] + 100] ^= 1
    (store_dir / "kv" / "blocks.ekv").write_bytes(bytes(data))
    conn = sqlite3.connect(store_dir / "store.sqlite3")
    old_identity = {"model_name": "Old Model", "model_sha256": "ab" * 32, "tokenizer_sha256": "cd" * 32,
                    "llama_cpp_version": "0.3.36", "embedder": "all-MiniLM-L6-v2", "embed_dim": 4, "segmentation": {}}
    conn.execute("UPDATE meta SET value = ? WHERE key = 'identity'", (json.dumps(old_identity),))
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    for (event_id, *_), (offset, length) in zip(rows, where):
        conn.execute("UPDATE events SET kv_offset = ?, kv_length = ?, rep_keys = NULL WHERE id = ?",
                     (offset, length, event_id))
    conn.commit()
    conn.close()

    with Store.open_existing(store_dir) as st:
        assert st.identity.embedder == "all-MiniLM-L6-v2" and st.identity.segmenter["model_name"] == "Old Model"
        assert [e.text for e in st.events_of(st.documents()[0].id)] == [e.text for e in events]
        assert st.documents()[0].segmenter == f"Old Model {'ab' * 32}"
        assert st.kv_block_kind == "q8_0" and not (store_dir / "kv" / "blocks.ekv").exists()
        tier_files = sorted(st.kv_space().block_files(), key=lambda f: f.key)
    moved = {f.key for f in tier_files}
    expected = {block_key(sha, c0, c1) for _, ordinal, c0, c1, sha in rows if ordinal != 2}
    assert moved == expected  # the intact blocks, under their events' keys; the damaged one is left cold
    for f in tier_files:
        block = read_block_file(f.path, f.key)
        assert block.n_tokens == 5 and len(block.payload) == 700
    with Store.open_existing(store_dir) as st:  # a second open finds format 2: nothing more happens
        assert len(list(st.kv_space().block_files())) == 2


def test_a_store_from_a_newer_epi_is_refused_in_one_line(tmp_path):
    store_dir = tmp_path / "new"
    with Store.create_or_open(store_dir, StoreIdentity(embedder="e", embed_dim=4)):
        pass
    conn = sqlite3.connect(store_dir / "store.sqlite3")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'format_version'")
    conn.commit()
    conn.close()
    with pytest.raises(Exception) as info:
        Store.open_existing(store_dir)
    assert "newer epi" in str(info.value) and "\n" not in str(info.value)
