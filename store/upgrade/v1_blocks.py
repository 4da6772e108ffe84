"""Reader of store format 1's single append-only KV block file (kv/blocks.ekv, kv/blocks.N.ekv after a compaction),
kept only so that upgrade/v1.py can move its blocks into the per-model tiers of format 2.

Layout (little-endian):
    file header  magic b"EPIKVBLK" | u32 format version | u32 n | n bytes of JSON (KVFileHeader) | u32 crc32(JSON)
    block*       32-byte header (BLOCK_HEADER) | payload
A block's crc32 covers its header fields and its payload.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..kv_tier.block_file import BlockType
from ..records import StoreError, StoreMismatchError

# Bump when the byte layout above changes; files of another version are refused, never reinterpreted.
KV_BLOCK_FORMAT_VERSION = 1

FILE_MAGIC = b"EPIKVBLK"
BLOCK_MAGIC = b"EKVB"
_FILE_PREFIX = struct.Struct("<8sII")  # magic, format version, JSON length
_CRC = struct.Struct("<I")
# magic, format version, block type, event_id, n_tokens, payload length, crc32(header fields + payload)
BLOCK_HEADER = struct.Struct("<4sHHqIQI")
assert BLOCK_HEADER.size == 32


class BlockCorruptError(StoreError):
    """A format-1 block failed its magic/version/checksum/identity check."""

    def __init__(self, event_id: int | None, reason: str):
        super().__init__(f"KV block of event {event_id} is corrupt ({reason})")
        self.event_id = event_id
        self.reason = reason


@dataclass(frozen=True)
class KVFileHeader:
    """What the stored KV is only valid for: any difference makes the blocks meaningless to the running model."""

    model_sha256: str
    llama_cpp_version: str
    type_k: str
    type_v: str
    flash_attn: bool
    n_layer: int
    n_head_kv: int
    head_dim: int


@dataclass(frozen=True)
class KVBlock:
    event_id: int
    block_type: BlockType
    n_tokens: int
    payload: np.ndarray  # uint8


def _pread_exact(fd: int, n: int, offset: int) -> bytes:
    data = os.pread(fd, n, offset)
    while len(data) < n:  # pread may return short reads; an empty one means EOF
        more = os.pread(fd, n - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data


def _read_header(fd: int, path: Path, expected: KVFileHeader | None) -> tuple[KVFileHeader, int]:
    """The stored header, checked against `expected`, and the offset of the first block."""
    prefix = _pread_exact(fd, _FILE_PREFIX.size, 0)
    if len(prefix) < _FILE_PREFIX.size or prefix[:8] != FILE_MAGIC:
        raise StoreError(f"'{path}' is not an epi KV block file; remove it and re-ingest.")
    _, version, n = _FILE_PREFIX.unpack(prefix)
    if version != KV_BLOCK_FORMAT_VERSION:
        raise StoreMismatchError(f"'{path}' has KV block format {version}, this epi reads {KV_BLOCK_FORMAT_VERSION}; "
                                 "re-ingest.", "format_version", version, KV_BLOCK_FORMAT_VERSION)
    body = _pread_exact(fd, n + _CRC.size, _FILE_PREFIX.size)
    if len(body) < n + _CRC.size or zlib.crc32(body[:n]) != _CRC.unpack(body[n:])[0]:
        raise StoreError(f"header of '{path}' is corrupt; remove the file and re-ingest.")
    stored = KVFileHeader(**json.loads(body[:n]))
    if expected is not None:
        for f in dataclasses.fields(KVFileHeader):
            have, want = getattr(stored, f.name), getattr(expected, f.name)
            if have != want:
                raise StoreMismatchError(f"KV blocks in '{path}' were written with {f.name}={have!r}, this run uses "
                                         f"{want!r}; re-ingest or use matching settings.", f.name, have, want)
    return stored, _FILE_PREFIX.size + n + _CRC.size


def _block_crc(fields: bytes, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(fields))


def _check_block(fd: int, offset: int, file_size: int, event_id: int | None) -> tuple[tuple, bytes]:
    """Read and verify the block at `offset`; raise BlockCorruptError(event, reason) if anything is off."""
    raw = _pread_exact(fd, BLOCK_HEADER.size, offset)
    if len(raw) < BLOCK_HEADER.size:
        raise BlockCorruptError(event_id, f"block header at offset {offset} is past the end of the file")
    magic, version, btype, ev, n_tokens, length, crc = fields = BLOCK_HEADER.unpack(raw)
    if magic != BLOCK_MAGIC:
        raise BlockCorruptError(event_id, f"bad block magic at offset {offset}")
    if version != KV_BLOCK_FORMAT_VERSION:
        raise BlockCorruptError(event_id, f"block format {version} at offset {offset}")
    if offset + BLOCK_HEADER.size + length > file_size:
        raise BlockCorruptError(event_id, f"block at offset {offset} runs past the end of the file (torn write)")
    payload = _pread_exact(fd, length, offset + BLOCK_HEADER.size)
    if _block_crc(raw[: BLOCK_HEADER.size - _CRC.size], payload) != crc:
        raise BlockCorruptError(event_id if event_id is not None else ev, f"checksum mismatch at offset {offset}")
    if event_id is not None and ev != event_id:
        raise BlockCorruptError(event_id, f"block at offset {offset} belongs to event {ev}")
    try:
        BlockType(btype)
    except ValueError:
        raise BlockCorruptError(event_id, f"unknown block type {btype} at offset {offset}") from None
    return fields, payload


class KVBlockReader:
    """Random access by offset: one block is read and verified, the rest of the file is never touched."""

    def __init__(self, path: str | os.PathLike, expected: KVFileHeader | None = None):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        try:
            self.header, self._first = _read_header(self._fd, self.path, expected)
        except BaseException:
            os.close(self._fd)
            raise

    def read(self, offset: int, event_id: int | None = None, length: int | None = None) -> KVBlock:
        """The block at `offset`, verified; `event_id`/`length` (from SQLite) are checked against it when given."""
        if offset < self._first:
            raise BlockCorruptError(event_id, f"offset {offset} is inside the file header")
        size = os.fstat(self._fd).st_size  # the writer may have appended since we opened
        (_, _, btype, ev, n_tokens, n, _), payload = _check_block(self._fd, offset, size, event_id)
        if length is not None and length != BLOCK_HEADER.size + n:
            raise BlockCorruptError(ev, f"block at offset {offset} is {BLOCK_HEADER.size + n} bytes, expected {length}")
        return KVBlock(ev, BlockType(btype), n_tokens, np.frombuffer(payload, dtype=np.uint8))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> KVBlockReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
