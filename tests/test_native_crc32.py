"""The checksum of KV block files: native.crc32 is zlib.crc32 bit for bit (zlib is the reference), with its
carry-less-multiply path (PCLMULQDQ) and its table path, on every length around the 16- and 64-byte steps of the
folding, unaligned starts, chained values and the buffer kinds a block file is read through (mmap, memoryview)."""
from __future__ import annotations

import mmap
import zlib

import numpy as np
import pytest

from episodic_cli import native
from episodic_cli.store.kv_tier import block_file
from episodic_cli.store.kv_tier.block_file import BlockType, read_block_file, write_block_file


@pytest.fixture(params=["folding", "table"])
def path_kind(request):
    if request.param == "folding" and not native.crc32_folding():
        pytest.skip("this CPU has no PCLMULQDQ/SSE4.1: only the table path runs here")
    before = native.set_simd(request.param == "folding")
    yield request.param
    native.set_simd(before)


def test_every_length_offset_and_start_value_matches_zlib(path_kind):
    assert native.crc32_folding() == (path_kind == "folding")
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 4096 + 64, dtype=np.uint8).tobytes()
    lengths = list(range(0, 260)) + [511, 512, 513, 1023, 1024, 1025, 4095, 4096]
    for n in lengths:
        for offset in (0, 1, 8, 15):
            chunk = data[offset : offset + n]
            for value in (0, 1, 0xFFFFFFFF, 0x1234ABCD):
                assert native.crc32(chunk, value) == zlib.crc32(chunk, value), (n, offset, value)


def test_large_buffers_and_special_bytes_match_zlib(path_kind):
    rng = np.random.default_rng(4)
    for buf in (rng.integers(0, 256, 3_000_017, dtype=np.uint8), np.zeros(1 << 20, np.uint8),
                np.full(70_001, 0xFF, np.uint8)):
        assert native.crc32(buf) == zlib.crc32(buf.tobytes())
        assert native.crc32(memoryview(buf)[5:]) == zlib.crc32(buf.tobytes()[5:])
    with pytest.raises(TypeError):
        native.crc32("text is not bytes")


def test_threads_checksumming_at_once_agree_with_zlib(path_kind):
    """crc32 lets other threads run while it reads a large buffer; its table is built when the module loads, so
    concurrent callers never see it half made."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(6)
    bufs = [rng.integers(0, 256, (1 << 17) + i * 13, dtype=np.uint8).tobytes() for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: native.crc32(b, 0xC0FFEE), bufs))
    assert got == [zlib.crc32(b, 0xC0FFEE) for b in bufs]


def test_a_block_file_keeps_zlibs_checksum_and_reads_through_a_mapping(tmp_path, path_kind):
    """Files written before this checksum (zlib) and after it are the same bytes: a store reads both."""
    assert block_file._crc32 is native.crc32  # the store really uses it
    rng = np.random.default_rng(5)
    payload = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    key = b"k" * 16
    path = tmp_path / "b.ekvb"
    write_block_file(path, key, BlockType.Q8_0, 7, payload, None)
    raw = path.read_bytes()
    header = block_file._HEADER.size
    stored = block_file._CRC.unpack_from(raw, header - block_file._CRC.size)[0]
    assert stored == zlib.crc32(raw[header:], zlib.crc32(raw[: header - block_file._CRC.size]))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert native.crc32(m) == zlib.crc32(raw)
    assert bytes(read_block_file(path, key).payload) == payload
