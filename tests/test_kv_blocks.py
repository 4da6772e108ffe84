"""KV block file: round trip, random access, corruption and torn-tail handling, header identity checks."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from episodic_cli.store.kv_blocks import (
    BLOCK_HEADER,
    BlockCorruptError,
    BlockType,
    KVBlockReader,
    KVBlockWriter,
    KVFileHeader,
)
from episodic_cli.store.records import StoreBusyError, StoreError, StoreMismatchError

HEADER = KVFileHeader(model_sha256="ab" * 32, llama_cpp_version="0.3.36", type_k="q8_0", type_v="q8_0",
                      flash_attn=True, n_layer=30, n_head_kv=3, head_dim=64)


def _payload(event_id: int) -> np.ndarray:
    rng = np.random.default_rng(event_id)
    return rng.integers(0, 256, int(rng.integers(0, 5000)), dtype=np.uint8)  # includes empty payloads


def _write(path, ids) -> dict[int, tuple[int, int]]:
    with KVBlockWriter(path, HEADER) as w:
        return {e: w.append(e, BlockType.Q8_0, e % 97, _payload(e)) for e in ids}


def test_round_trip_and_random_access(tmp_path):
    path = tmp_path / "kv.bin"
    where = _write(path, range(200))
    with KVBlockReader(path, HEADER) as r:
        assert r.header == HEADER
        for e in np.random.default_rng(0).permutation(200):
            offset, length = where[int(e)]
            block = r.read(offset, event_id=int(e), length=length)
            assert (block.event_id, block.block_type, block.n_tokens) == (e, BlockType.Q8_0, e % 97)
            np.testing.assert_array_equal(block.payload, _payload(int(e)))


def test_reopen_appends_after_existing_blocks(tmp_path):
    path = tmp_path / "kv.bin"
    first = _write(path, range(5))
    second = _write(path, range(5, 10))
    assert min(o for o, _ in second.values()) == max(o + n for o, n in first.values())
    with KVBlockReader(path) as r:
        for e, (offset, _) in {**first, **second}.items():
            np.testing.assert_array_equal(r.read(offset, e).payload, _payload(e))


def test_flipped_bit_names_the_event(tmp_path):
    path = tmp_path / "kv.bin"
    where = _write(path, [11, 12, 13])
    offset, length = where[12]
    for pos in (offset + 12, offset + length - 1):  # a header field (event_id) and the payload's last byte
        data = bytearray(path.read_bytes())
        data[pos] ^= 0x10
        path.write_bytes(bytes(data))
        with KVBlockReader(path, HEADER) as r:
            with pytest.raises(BlockCorruptError) as err:
                r.read(offset, event_id=12)
            assert err.value.event_id == 12 and "event 12" in str(err.value)
            assert isinstance(err.value, StoreError)
            np.testing.assert_array_equal(r.read(where[13][0], 13).payload, _payload(13))  # neighbours unaffected
        data[pos] ^= 0x10
        path.write_bytes(bytes(data))
    with KVBlockReader(path) as r:
        with pytest.raises(BlockCorruptError, match="belongs to event 11"):
            r.read(where[11][0], event_id=12)  # SQLite pointing at the wrong block is caught too


@pytest.mark.parametrize("cut", [1, BLOCK_HEADER.size - 1, BLOCK_HEADER.size + 7])
def test_torn_tail_is_truncated_and_appending_continues(tmp_path, cut):
    path = tmp_path / "kv.bin"
    where = _write(path, [1, 2, 3, 4000])  # 4000's payload is long enough for every cut
    offset, _ = where[4000]
    os.truncate(path, offset + cut)  # crash in the middle of the last append
    with KVBlockReader(path) as r:
        np.testing.assert_array_equal(r.read(where[3][0], 3).payload, _payload(3))
        with pytest.raises(BlockCorruptError):
            r.read(offset, 4000)
    more = _write(path, [5, 6])
    assert os.path.getsize(path) == max(o + n for o, n in more.values())
    assert more[5][0] == offset  # the torn bytes were dropped, not skipped over
    with KVBlockReader(path, HEADER) as r:
        for e in (1, 2, 3, 5, 6):
            np.testing.assert_array_equal(r.read({**where, **more}[e][0], e).payload, _payload(e))


def test_zero_filled_tail_is_truncated(tmp_path):
    # File length made durable but the data never written (delayed allocation): right size, wrong bytes.
    path = tmp_path / "kv.bin"
    where = _write(path, [1, 2, 3])
    offset, length = where[3]
    with open(path, "r+b") as f:
        f.seek(offset + BLOCK_HEADER.size)
        f.write(b"\0" * (length - BLOCK_HEADER.size))
    more = _write(path, [7])
    assert more[7][0] == offset
    with KVBlockReader(path) as r:
        np.testing.assert_array_equal(r.read(where[2][0], 2).payload, _payload(2))
        np.testing.assert_array_equal(r.read(more[7][0], 7).payload, _payload(7))


def test_mid_file_damage_is_never_truncated(tmp_path):
    path = tmp_path / "kv.bin"
    where = _write(path, [1, 2, 3])
    data = bytearray(path.read_bytes())
    data[where[2][0]] ^= 0xFF  # block 2's magic: the header walk stops there, but block 3 is intact
    path.write_bytes(bytes(data))
    more = _write(path, [4])
    with KVBlockReader(path) as r:
        with pytest.raises(BlockCorruptError, match="magic"):
            r.read(where[2][0], 2)
        for e, (offset, _) in {1: where[1], 3: where[3], 4: more[4]}.items():
            np.testing.assert_array_equal(r.read(offset, e).payload, _payload(e))


@pytest.mark.parametrize("field,value", [("model_sha256", "cd" * 32), ("llama_cpp_version", "0.3.37"),
                                         ("type_v", "q4_0"), ("flash_attn", False), ("n_layer", 31),
                                         ("n_head_kv", 4), ("head_dim", 128)])
def test_header_mismatch(tmp_path, field, value):
    path = tmp_path / "kv.bin"
    _write(path, [1])
    other = dataclasses.replace(HEADER, **{field: value})
    with pytest.raises(StoreMismatchError) as err:
        KVBlockReader(path, other)
    assert (err.value.field, err.value.stored, err.value.requested) == (field, getattr(HEADER, field), value)
    with pytest.raises(StoreMismatchError):
        KVBlockWriter(path, other)
    KVBlockReader(path, HEADER).close()  # the refused writer left the file untouched


def test_not_a_block_file_and_single_writer(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world, not kv")
    with pytest.raises(StoreError, match="not an epi KV block file"):
        KVBlockReader(junk)
    path = tmp_path / "kv.bin"
    with KVBlockWriter(path, HEADER):
        with pytest.raises(StoreBusyError):
            KVBlockWriter(path, HEADER)


def test_store_layer_does_not_import_llama_cpp():
    import subprocess
    import sys

    code = "import sys, episodic_cli.store.kv_blocks; print('llama_cpp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
