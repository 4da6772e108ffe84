"""Reading a GGUF file's header without trusting it: metadata values and tensor extents, bounded by the file's size.

A damaged or truncated model file must end as one line saying so, never as a MemoryError from a garbage length or a
struct.error from a short read. Every length read from the file is checked against the bytes that are actually left
before anything is allocated or skipped. No llama.cpp here: this module judges files llama.cpp refused, or that it
would crash on.
"""
from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types (gguf.md): fixed sizes of the scalar ones; 8 is a string, 9 an array.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_UINT_FORMATS = {0: "<B", 2: "<H", 4: "<I", 10: "<Q"}  # the unsigned types a file_type or alignment may use
_INT_FORMATS = {1: "<b", 3: "<h", 5: "<i", 11: "<q"}

# ggml tensor types: (elements per block, bytes per block), from ggml's type traits. Only types whose layout is
# stable across llama.cpp versions; a tensor of another type bounds the data by its offset alone.
_TENSOR_BLOCKS = {
    0: (1, 4), 1: (1, 2), 30: (1, 2), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),  # F32 F16 BF16 I*
    2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 36),  # Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),  # Q2_K..Q8_K
}
_MAX_DIMS = 4  # GGML_MAX_DIMS
# Types the CPU backend repacks for faster products (ggml-cpu's extra buffer types: Q4_0, Q4_K, IQ4_NL) as the model
# loads: a second copy beside the mapped file, measured in docs/benchmarks.md ("Model size"). The token embeddings
# are only looked up, never multiplied, so they stay in the file's layout.
REPACKED_TYPES = frozenset({2, 12, 20})


class GGUFHeaderError(ValueError):
    """The header cannot be read: the message says where it stops making sense (no path; the caller adds it)."""


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    n_tensors: int
    file_type: int | None     # general.file_type (0 = F32, 1 = F16, 32 = BF16, ...), when the file records it
    n_params: int             # elements of all tensors
    data_bytes_needed: int    # the smallest file size that holds every tensor the header lists
    file_bytes: int
    tensor_names: tuple[str, ...] = ()
    repacked_bytes: int = 0   # weights llama.cpp's CPU backend copies into its repacked layout (REPACKED_TYPES)

    @property
    def truncated(self) -> bool:
        return self.file_bytes < self.data_bytes_needed


class _Reader:
    """Bounds-checked little-endian reads over a memory map."""

    def __init__(self, data: mmap.mmap | bytes):
        self.data = data
        self.pos = 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> int:
        """Advance past n bytes; where they started."""
        if n < 0 or n > self.left():
            raise GGUFHeaderError(f"{what} of {n:,} bytes at offset {self.pos:,} runs past the end of the file")
        start = self.pos
        self.pos += n
        return start

    def unpack(self, fmt: str, what: str):
        start = self.take(struct.calcsize(fmt), what)
        return struct.unpack_from(fmt, self.data, start)[0]

    def string(self, what: str) -> bytes:
        n = self.unpack("<Q", f"{what} length")
        start = self.take(n, what)
        return bytes(self.data[start:start + n])

    def skip_string(self, what: str) -> None:
        self.take(self.unpack("<Q", f"{what} length"), what)


def _read_value(r: _Reader, vtype: int, key: str) -> int | None:
    """Skip one metadata value; integers are returned (file_type and alignment are the ones wanted)."""
    if vtype in _UINT_FORMATS:
        return r.unpack(_UINT_FORMATS[vtype], f"value of {key}")
    if vtype in _INT_FORMATS:
        return r.unpack(_INT_FORMATS[vtype], f"value of {key}")
    if vtype in _SCALAR_SIZES:
        r.take(_SCALAR_SIZES[vtype], f"value of {key}")
    elif vtype == _STRING:
        r.skip_string(f"value of {key}")
    elif vtype == _ARRAY:
        etype = r.unpack("<I", f"array type of {key}")
        count = r.unpack("<Q", f"array length of {key}")
        if etype == _STRING:
            if count * 8 > r.left():  # each element holds at least its 8-byte length
                raise GGUFHeaderError(f"array {key} claims {count:,} strings, more than the file holds")
            for _ in range(count):
                r.skip_string(f"element of {key}")
        elif etype in _SCALAR_SIZES:
            r.take(_SCALAR_SIZES[etype] * count, f"array {key}")
        else:
            raise GGUFHeaderError(f"array {key} has unknown element type {etype}")
    else:
        raise GGUFHeaderError(f"key {key} has unknown value type {vtype}")
    return None


@contextmanager
def _mapped(path: Path) -> Iterator[tuple[_Reader, int]]:
    """A bounds-checked reader over the whole file, mapped (never read into memory), and the file's size."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < 24:
            raise GGUFHeaderError(f"the file is only {size} bytes, shorter than a GGUF header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield _Reader(data), size


def read_gguf_header(path: Path) -> GGUFHeader:
    """Parse the whole header (metadata and tensor table) of a GGUF file; GGUFHeaderError when it does not hold
    together. Reads a few MB at most for a multi-GB model: the weights are never touched."""
    with _mapped(path) as (r, size):
        return _parse(r, size)


def peek_file_type(path: Path) -> int | None:
    """general.file_type, reading metadata only up to that key (it comes early; the whole header costs ~40 ms
    for the bundled model, paid on every command otherwise). GGUFHeaderError when the header breaks before it."""
    with _mapped(path) as (r, _):
        _, _, n_kv = _preamble(r)
        for _ in range(n_kv):
            key = r.string("metadata key").decode("utf-8", "replace")
            value = _read_value(r, r.unpack("<I", f"type of {key}"), key)
            if key == "general.file_type":
                return value
    return None


def _preamble(r: _Reader) -> tuple[int, int, int]:
    """(version, tensor count, metadata count), each checked against what the file could hold."""
    if r.data[:4] != GGUF_MAGIC:
        raise GGUFHeaderError("it does not start with the GGUF magic bytes")
    r.pos = 4
    version = r.unpack("<I", "version")
    if version not in (2, 3):
        raise GGUFHeaderError(f"unknown GGUF version {version} (llama.cpp reads versions 2 and 3)")
    n_tensors = r.unpack("<Q", "tensor count")
    n_kv = r.unpack("<Q", "metadata count")
    # Each metadata entry takes at least 12 bytes (key length + type) and each tensor entry at least 28.
    if n_kv * 12 + n_tensors * 28 > r.left():
        raise GGUFHeaderError(f"it claims {n_kv:,} metadata entries and {n_tensors:,} tensors, "
                              "more than the file could hold")
    return version, n_tensors, n_kv


def _tensor_entry(r: _Reader) -> tuple[str, int, int, int]:
    """One entry of the tensor table: (name, elements, ggml type, offset into the data)."""
    name = r.string("tensor name").decode("utf-8", "replace")
    n_dims = r.unpack("<I", f"dimension count of {name}")
    if not 1 <= n_dims <= _MAX_DIMS:
        raise GGUFHeaderError(f"tensor {name} has {n_dims} dimensions")
    elements = 1
    for _ in range(n_dims):
        elements *= r.unpack("<Q", f"dimensions of {name}")
    return name, elements, r.unpack("<I", f"type of {name}"), r.unpack("<Q", f"offset of {name}")


def _parse(r: _Reader, size: int) -> GGUFHeader:
    version, n_tensors, n_kv = _preamble(r)
    file_type, alignment = _skip_metadata(r, n_kv)
    return _tensor_table(r, size, version, n_tensors, file_type, alignment)


def _skip_metadata(r: _Reader, n_kv: int) -> tuple[int | None, int]:
    """Past every metadata value: (general.file_type, general.alignment), the two the tensor table needs."""
    file_type = None
    alignment = DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key = r.string("metadata key").decode("utf-8", "replace")
        vtype = r.unpack("<I", f"type of {key}")
        value = _read_value(r, vtype, key)
        if key == "general.file_type" and value is not None:
            file_type = value
        elif key == "general.alignment" and value:
            alignment = value
    return file_type, alignment


def _tensor_table(r: _Reader, size: int, version: int, n_tensors: int, file_type: int | None, alignment: int
                  ) -> GGUFHeader:
    """The header from the tensor table on (`r` just past the metadata)."""
    n_params = 0
    data_end = 0  # relative to the start of the tensor data
    names = []
    repacked = 0
    for _ in range(n_tensors):
        name, elements, ggml_type, offset = _tensor_entry(r)
        names.append(name)
        n_params += elements
        per_block, block_bytes = _TENSOR_BLOCKS.get(ggml_type, (1, 0))
        data_end = max(data_end, offset + -(-elements // per_block) * block_bytes)
        if ggml_type in REPACKED_TYPES and not name.startswith("token_embd"):
            repacked += -(-elements // per_block) * block_bytes
    data_start = -(-r.pos // alignment) * alignment
    return GGUFHeader(version, n_tensors, file_type, n_params, data_start + data_end, size, tuple(names), repacked)


_FLOAT_FORMATS = {6: "<f", 12: "<d"}
_SHORT_ARRAY = 1024  # numeric arrays up to this long are returned (per-layer head counts, window patterns)


@dataclass(frozen=True)
class LongArray:
    """A metadata array too long to be worth reading (a vocabulary, its scores): only its length."""

    length: int


def _metadata_value(r: _Reader, vtype: int, key: str):
    """One metadata value read in full: numbers, booleans, strings, short numeric arrays; LongArray otherwise."""
    if vtype in _UINT_FORMATS:
        return r.unpack(_UINT_FORMATS[vtype], f"value of {key}")
    if vtype in _INT_FORMATS:
        return r.unpack(_INT_FORMATS[vtype], f"value of {key}")
    if vtype in _FLOAT_FORMATS:
        return r.unpack(_FLOAT_FORMATS[vtype], f"value of {key}")
    if vtype == 7:
        return bool(r.unpack("<B", f"value of {key}"))
    if vtype == _STRING:
        return r.string(f"value of {key}").decode("utf-8", "replace")
    if vtype == _ARRAY:
        etype = r.unpack("<I", f"array type of {key}")
        count = r.unpack("<Q", f"array length of {key}")
        fmt = _UINT_FORMATS.get(etype) or _INT_FORMATS.get(etype) or _FLOAT_FORMATS.get(etype) or \
            ("<B" if etype == 7 else None)
        if fmt is not None and count <= _SHORT_ARRAY:
            start = r.take(struct.calcsize(fmt) * count, f"array {key}")
            return list(struct.unpack_from(f"<{count}{fmt[1]}", r.data, start))
        r.pos -= 12  # read the array again through the skipping reader, which bounds every length
        _read_value(r, vtype, key)
        return LongArray(count)
    return _read_value(r, vtype, key)


@dataclass(frozen=True)
class GGUFMetadata:
    """Every metadata value of a GGUF file (long arrays by length), with the tensor table's totals."""

    values: dict
    header: GGUFHeader

    def get(self, key: str, default=None):
        return self.values.get(key, default)


def read_gguf_metadata(path: Path) -> GGUFMetadata:
    """The file's metadata and tensor totals, for describing a model without loading it; GGUFHeaderError when the
    header does not hold together. Reads the header only (a few MB at most)."""
    with _mapped(path) as (r, size):
        version, n_tensors, n_kv = _preamble(r)
        values = {}
        for _ in range(n_kv):
            key = r.string("metadata key").decode("utf-8", "replace")
            values[key] = _metadata_value(r, r.unpack("<I", f"type of {key}"), key)
        file_type, alignment = values.get("general.file_type"), values.get("general.alignment")
        file_type = file_type if type(file_type) is int else None  # as _skip_metadata reads them
        alignment = alignment if type(alignment) is int and alignment else DEFAULT_ALIGNMENT
        return GGUFMetadata(values, _tensor_table(r, size, version, n_tensors, file_type, alignment))


def read_f32_tensor(path: Path, name: str) -> list[float] | None:
    """The values of a small F32 tensor (a model's `rope_freqs`), read from the file without loading the model; None
    when the file has no such tensor or it is not F32. GGUFHeaderError when the header does not hold together."""
    with _mapped(path) as (r, size):
        _, n_tensors, n_kv = _preamble(r)
        _, alignment = _skip_metadata(r, n_kv)
        found = None
        for _ in range(n_tensors):
            tensor, elements, ggml_type, offset = _tensor_entry(r)
            if tensor == name and ggml_type == 0:
                found = (offset, elements)
        if found is None:
            return None
        start = -(-r.pos // alignment) * alignment + found[0]
        if start + 4 * found[1] > size:
            raise GGUFHeaderError(f"tensor {name} runs past the end of the file")
        return list(struct.unpack_from(f"<{found[1]}f", r.data, start))


def describe_damage(path: Path) -> str | None:
    """Why a GGUF file cannot be loaded, as a clause ("its header is damaged (...)", "it is truncated: ..."), or None
    when its header and size look sound (the fault is then elsewhere)."""
    try:
        header = read_gguf_header(path)
    except GGUFHeaderError as exc:
        return f"its header is damaged ({exc})"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if header.truncated:
        return (f"it is truncated: its header describes {header.data_bytes_needed / 1e6:,.1f} MB of model data "
                f"but the file holds only {header.file_bytes / 1e6:,.1f} MB")
    return None
