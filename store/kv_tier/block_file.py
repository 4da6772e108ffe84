"""One KV block per file: the unit a tier stores, evicts and gives back to the filesystem.

A file per block (as LMCache keeps a file per chunk) makes the two things a budgeted cache must do exact and cheap:
eviction is an unlink (the space returns to the filesystem at once, no compaction that would transiently double the
bytes) and the bytes in use are the sizes of the files themselves, never a counter that can drift.

Layout (little-endian), numpy/struct-first like gguf-py:
    header   magic b"EKVB" | u16 format version | u16 block type (ggml type id) | 16 bytes block key
             | u32 n_tokens | u32 rep_keys length | u64 payload length | u32 crc32
    payload  the block's KV (engine/kv/blocks.py's EKVP payload: positions, K rows, V rows)
    rep_keys the block's representative keys (rep_keys.py layout), possibly empty
The crc32 covers the header fields before it, the payload and the rep_keys, so a flipped bit anywhere is caught; the
key in the header proves the file holds the block its name says.

Crash safety: a block is written to a temporary file in the same directory, fsynced, renamed into place, and the
directory fsynced; a crash leaves either no file or the whole block (temporary files are removed by the next scan).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np

from ..records import StoreError
from .rep_keys import decode_rep_keys, encode_rep_keys

try:  # zlib's crc32 bit for bit, with carry-less multiplies where the CPU has them: an answer checks tens of MB of
    # blocks, ~12 ms at zlib's 7-8 GB/s for a layered pool, ~5 ms so (bench/kv/assemble.py)
    from ...native import crc32 as _crc32
except ImportError:  # the native extension is not built (a source checkout before `pip install -e .`)
    _crc32 = zlib.crc32

BLOCK_FILE_VERSION = 2  # version 1 was the single append-only block file of store format 1 (v1_blocks.py)
BLOCK_MAGIC = b"EKVB"
BLOCK_SUFFIX = ".ekvb"
TMP_SUFFIX = ".tmp"
_HEADER = struct.Struct("<4sHH16sIIQI")
_CRC = struct.Struct("<I")
HEADER_BYTES = _HEADER.size


class BlockType(IntEnum):
    """Payload encoding; values are ggml_type ids so the files speak llama.cpp's numbering."""

    F16 = 1
    Q4_0 = 2
    Q8_0 = 8


class BlockCorruptError(StoreError):
    """A stored block failed its magic/version/checksum/key check."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"KV block {path.name} is damaged ({reason})")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class StoredBlock:
    block_type: BlockType
    n_tokens: int
    payload: np.ndarray             # uint8, the EKVP payload
    rep_keys: np.ndarray | None     # float16 [n_layer, n_keys, n_embd_k], or None


def block_file_bytes(payload_len: int, rep_keys_len: int) -> int:
    """The size the file of a block will have: what the budget is charged before it is written."""
    return _HEADER.size + payload_len + rep_keys_len


def _crc(fields: bytes, payload: memoryview, rep: bytes) -> int:
    return _crc32(rep, _crc32(payload, _crc32(fields)))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_block_file(path: Path, key: bytes, block_type: BlockType, n_tokens: int, payload: bytes | np.ndarray,
                     rep_keys: np.ndarray | None) -> int:
    """Write one block atomically (temporary file, fsync, rename, directory fsync); returns the file's size. On any
    failure (a full disk) the temporary file is removed and nothing is left behind."""
    data = memoryview(np.ascontiguousarray(payload).view(np.uint8) if isinstance(payload, np.ndarray)
                      else payload).cast("B")
    rep = encode_rep_keys(rep_keys) or b""
    fields = _HEADER.pack(BLOCK_MAGIC, BLOCK_FILE_VERSION, BlockType(block_type), key, n_tokens, len(rep),
                          data.nbytes, 0)[: _HEADER.size - _CRC.size]
    header = fields + _CRC.pack(_crc(fields, data, rep))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for chunk in (memoryview(header), data, memoryview(rep)):
                pos = 0
                while pos < chunk.nbytes:
                    pos += os.write(fd, chunk[pos:])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return len(header) + data.nbytes + len(rep)


def _map(f) -> mmap.mmap | bytes:
    """The whole file, mapped read-only rather than read: an answer reads tens of MB of blocks, and copying them into
    fresh memory (zero-filled pages first) cost more than the checksum and the assembly together (measured: 26 blocks,
    70 MB, 42 ms read vs 18 ms mapped). Safe because a block file is never changed in place: it is replaced by a
    rename or unlinked, and on Linux and macOS a mapping keeps the old bytes either way."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        return b""
    try:
        if hasattr(mmap, "MAP_POPULATE"):  # Linux: fault the pages in with the mapping, not one by one later
            return mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # a filesystem that cannot map files (some FUSE and network mounts): read it
        return f.read()


def read_block_file(path: Path, key: bytes) -> StoredBlock:
    """The verified block in `path`; FileNotFoundError when there is none, BlockCorruptError when it is damaged.
    The payload is a read-only view of the mapped file."""
    with open(path, "rb") as f:
        raw = _map(f)
    if len(raw) < _HEADER.size:
        raise BlockCorruptError(path, "shorter than its header")
    magic, version, btype, stored_key, n_tokens, rep_len, payload_len, crc = _HEADER.unpack_from(raw)
    if magic != BLOCK_MAGIC:
        raise BlockCorruptError(path, "bad magic")
    if version != BLOCK_FILE_VERSION:
        raise BlockCorruptError(path, f"block format {version}, this epi reads {BLOCK_FILE_VERSION}")
    if _HEADER.size + payload_len + rep_len != len(raw):
        raise BlockCorruptError(path, f"{len(raw)} bytes, its header describes {_HEADER.size + payload_len + rep_len}")
    view = memoryview(raw)
    payload = view[_HEADER.size : _HEADER.size + payload_len]
    rep = view[_HEADER.size + payload_len :]
    if _crc(raw[: _HEADER.size - _CRC.size], payload, rep) != crc:
        raise BlockCorruptError(path, "checksum mismatch")
    if stored_key != key:
        raise BlockCorruptError(path, "it holds another event's block")
    try:
        block_type = BlockType(btype)
    except ValueError:
        raise BlockCorruptError(path, f"unknown block type {btype}") from None
    try:
        keys = decode_rep_keys(bytes(rep)) if rep_len else None
    except StoreError as e:
        raise BlockCorruptError(path, str(e)) from None
    return StoredBlock(block_type, n_tokens, np.frombuffer(payload, dtype=np.uint8), keys)
