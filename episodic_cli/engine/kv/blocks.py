"""KV mode's correctness core: cut a sequence's KV cache into event blocks, store them compactly, put them back.

Three layers, all on llama.cpp's public API (llama.h: the sequence state and memory functions):

* `capture_block` copies cells [p0, p1) of a sequence to the staging sequence (metadata-only `seq_cp` in the unified
  cache), reads that sequence's state blob and drops the staging copy.
* The blob codec (`parse_state_blob` / `build_state_blob`) turns llama.cpp's sequence state blob into numpy arrays
  and back, byte for byte. `encode_block` / `decode_block` store those arrays as epi's own payload: K and V rows as
  f16, q8_0 or q4_0 (ggml-identical kernels in `native`), one row = one cell's n_embd_gqa values of one layer.
* `load_block` writes a blob into the staging sequence, moves its positions with `seq_add` (llama.cpp re-rotates K
  inside the next decode: the K-shift), hands the cells to the destination sequence and empties the staging one.
  A blob that `state_blob_from_payload` already moved (`move_to`: K rotated natively as the block is assembled)
  needs no `seq_add`, and the next decode no K-shift pass.

Blob layout of llama-cpp-python 0.3.36 (vendor llama.cpp src/llama-context.cpp `state_seq_get_data` and
src/llama-kv-cache.cpp `state_write`), little-endian:

    u32 io_magic (0xaf143cd8) | i32 seq_id the blob was read from
    u32 n_stream (1: unified cache)
    u32 cell_count
    cell_count x (i32 pos | u32 n_seq_id (== 1) | i32 seq_id)
    u32 v_trans | u32 n_layer
    n_layer x (i32 k_type | u64 k_size_row | cell_count * k_size_row bytes)                  K rows, post-RoPE
    v_trans:   n_layer x (i32 v_type | u32 v_size_el | u32 n_embd_v_gqa | n_embd_v_gqa x cell_count elements)
    otherwise: n_layer x (i32 v_type | u64 v_size_row | cell_count * v_size_row bytes)

The codec accepts only what epi's contexts produce (one stream, F16 K and V, uniform layer widths, no per-cell
extension data) and refuses anything else with a `KVFormatError` naming the field, never reinterpreting it.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, replace

import llama_cpp as L
import numpy as np

from ... import native
from ...store.kv_tier import BlockType
from ..errors import EpiError

STAGING_SEQ = 1
IO_MAGIC = 0xAF143CD8
GGML_TYPE_F16 = 1
KINDS = ("f16", "q8_0", "q4_0")
KIND_BLOCK_TYPE = {"f16": BlockType.F16, "q8_0": BlockType.Q8_0, "q4_0": BlockType.Q4_0}

_HEAD = struct.Struct("<IiII")          # io_magic, src seq_id, n_stream, cell_count
_DATA_HEAD = struct.Struct("<II")       # v_trans, n_layer
_CELL = np.dtype([("pos", "<i4"), ("n_seq_id", "<u4"), ("seq_id", "<i4")])


class KVFormatError(EpiError):
    """A state blob or an encoded block does not have the layout this epi reads."""


@dataclass
class ParsedBlock:
    """One sequence state blob as arrays. `k`/`v` are float16 [n_layer, n_cells, n_embd_{k,v}_gqa] (V un-transposed);
    arrays from `parse_state_blob` may be read-only views of the blob (copy before writing into them)."""

    positions: np.ndarray   # int32 [n_cells], in cell order as llama.cpp wrote them
    k: np.ndarray           # float16 [n_layer, n_cells, n_embd_k_gqa]
    v: np.ndarray           # float16 [n_layer, n_cells, n_embd_v_gqa]
    v_trans: bool = True    # llama.cpp's V layout in the blob (True when flash attention is off)
    src_seq: int = STAGING_SEQ   # the i32 after io_magic: the sequence the blob was read from
    cell_seq: int = STAGING_SEQ  # the seq_id written for every cell (llama.cpp ignores it on load)

    @property
    def n_cells(self) -> int:
        return int(self.positions.shape[0])

    @property
    def n_layer(self) -> int:
        return int(self.k.shape[0])

    @property
    def p0(self) -> int:
        return int(self.positions.min()) if self.n_cells else 0

    def cells_in(self, p0: int, p1: int) -> "ParsedBlock":
        """The cells at positions [p0, p1), in cell order: what `capture_block(p0, p1)` would read from the same
        cache, without reading it again."""
        keep = (self.positions >= p0) & (self.positions < p1)
        return ParsedBlock(positions=self.positions[keep], k=self.k[:, keep], v=self.v[:, keep], v_trans=self.v_trans,
                           src_seq=self.src_seq, cell_seq=self.cell_seq)


# ------------------------------------------------------------------------------------------------ blob codec


def _k_dtype(n_cells: int, n_embd: int) -> np.dtype:
    return np.dtype([("type", "<i4"), ("size_row", "<u8"), ("data", "<f2", (n_cells, n_embd))])


def _vt_dtype(n_cells: int, n_embd: int) -> np.dtype:
    return np.dtype([("type", "<i4"), ("size_el", "<u4"), ("n_embd", "<u4"), ("data", "<f2", (n_embd, n_cells))])


def _need(blob_len: int, end: int, what: str) -> None:
    if end > blob_len:
        raise KVFormatError(f"state blob ends inside {what} (needs {end} bytes, has {blob_len})")


def parse_state_blob(blob: bytes | bytearray | memoryview | np.ndarray) -> ParsedBlock:
    """Split a `llama_state_seq_get_data` blob into positions, K and V (views into `blob`, no per-byte work)."""
    buf = np.frombuffer(blob, dtype=np.uint8) if not isinstance(blob, np.ndarray) else blob.view(np.uint8).ravel()
    size = buf.nbytes
    _need(size, _HEAD.size, "the header")
    magic, src_seq, n_stream, n_cells = _HEAD.unpack_from(buf, 0)
    if magic != IO_MAGIC:
        raise KVFormatError(f"state blob magic is {magic:#x}, expected {IO_MAGIC:#x} (another llama.cpp version?)")
    if n_stream != 1:
        raise KVFormatError(f"state blob has {n_stream} KV streams; epi needs a unified cache (kv_unified=true, 1 stream)")
    if n_cells == 0:
        raise KVFormatError("state blob holds no cells (the captured range was empty)")
    off = _HEAD.size
    _need(size, off + n_cells * _CELL.itemsize + _DATA_HEAD.size, "the cell table")
    cells = np.frombuffer(buf, dtype=_CELL, count=n_cells, offset=off)
    if np.any(cells["n_seq_id"] != 1):
        raise KVFormatError("state blob has cells shared by several sequences (n_seq_id != 1); capture one sequence")
    cell_seq = int(cells["seq_id"][0])
    if np.any(cells["seq_id"] != cell_seq):
        raise KVFormatError("state blob cells name different sequences")
    off += n_cells * _CELL.itemsize
    v_trans, n_layer = _DATA_HEAD.unpack_from(buf, off)
    off += _DATA_HEAD.size
    if v_trans not in (0, 1):
        raise KVFormatError(f"state blob v_trans is {v_trans} (per-cell extension data? M-RoPE models are refused)")
    if n_layer == 0:
        raise KVFormatError("state blob has 0 layers")

    # K: every layer must be F16 with the same row size, so the whole section is one structured array.
    _need(size, off + 12, "the first K layer header")
    k_type, k_row = struct.unpack_from("<iQ", buf, off)
    if k_type != GGML_TYPE_F16:
        raise KVFormatError(f"K cache type is ggml type {k_type}; epi stores F16 K caches only")
    if k_row % 2:
        raise KVFormatError(f"K row size {k_row} is not a whole number of F16 values")
    n_embd_k = k_row // 2
    kd = _k_dtype(n_cells, n_embd_k)
    _need(size, off + n_layer * kd.itemsize, "the K rows")
    ks = np.frombuffer(buf, dtype=kd, count=n_layer, offset=off)
    if np.any(ks["type"] != GGML_TYPE_F16) or np.any(ks["size_row"] != k_row):
        raise KVFormatError("K layers differ in type or row size; epi needs F16 and one width for every layer")
    off += n_layer * kd.itemsize

    _need(size, off + 12, "the first V layer header")
    if v_trans:
        v_type, v_el, n_embd_v = struct.unpack_from("<iII", buf, off)
        if v_type != GGML_TYPE_F16 or v_el != 2:
            raise KVFormatError(f"V cache type is ggml type {v_type} ({v_el} bytes/element); epi stores F16 only")
        vd = _vt_dtype(n_cells, n_embd_v)
        _need(size, off + n_layer * vd.itemsize, "the V rows")
        vs = np.frombuffer(buf, dtype=vd, count=n_layer, offset=off)
        if np.any(vs["type"] != GGML_TYPE_F16) or np.any(vs["size_el"] != 2) or np.any(vs["n_embd"] != n_embd_v):
            raise KVFormatError("V layers differ in type or width; epi needs F16 and one width for every layer")
        v = vs["data"].transpose(0, 2, 1)
    else:
        v_type, v_row = struct.unpack_from("<iQ", buf, off)
        if v_type != GGML_TYPE_F16 or v_row % 2:
            raise KVFormatError(f"V cache type is ggml type {v_type} (row {v_row} bytes); epi stores F16 only")
        vd = _k_dtype(n_cells, v_row // 2)
        _need(size, off + n_layer * vd.itemsize, "the V rows")
        vs = np.frombuffer(buf, dtype=vd, count=n_layer, offset=off)
        if np.any(vs["type"] != GGML_TYPE_F16) or np.any(vs["size_row"] != v_row):
            raise KVFormatError("V layers differ in type or row size; epi needs F16 and one width for every layer")
        v = vs["data"]
    off += n_layer * vd.itemsize
    if off != size:
        raise KVFormatError(f"state blob has {size - off} unexpected trailing bytes (another memory type or "
                            "llama.cpp version?)")
    return ParsedBlock(positions=cells["pos"], k=ks["data"], v=v, v_trans=bool(v_trans), src_seq=src_seq,
                       cell_seq=cell_seq)


def _check_parsed(p: ParsedBlock) -> tuple[int, int, int, int]:
    n_cells = p.positions.shape[0]
    if p.k.ndim != 3 or p.v.ndim != 3 or p.k.shape[:2] != p.v.shape[:2] or p.k.shape[1] != n_cells:
        raise KVFormatError(f"inconsistent block shapes: positions {p.positions.shape}, K {p.k.shape}, V {p.v.shape}")
    if n_cells == 0:
        raise KVFormatError("a block needs at least one cell")
    return p.k.shape[0], n_cells, p.k.shape[2], p.v.shape[2]


def build_state_blob(p: ParsedBlock) -> bytes:
    """The exact inverse of `parse_state_blob`: a blob `llama_state_seq_set_data` accepts."""
    n_layer, n_cells, n_embd_k, n_embd_v = _check_parsed(p)
    kd = _k_dtype(n_cells, n_embd_k)
    vd = _vt_dtype(n_cells, n_embd_v) if p.v_trans else _k_dtype(n_cells, n_embd_v)
    cells_off = _HEAD.size
    k_off = cells_off + n_cells * _CELL.itemsize + _DATA_HEAD.size
    v_off = k_off + n_layer * kd.itemsize
    out = np.empty(v_off + n_layer * vd.itemsize, dtype=np.uint8)
    _HEAD.pack_into(out, 0, IO_MAGIC, p.src_seq, 1, n_cells)
    cells = out[cells_off : cells_off + n_cells * _CELL.itemsize].view(_CELL)
    cells["pos"] = p.positions
    cells["n_seq_id"] = 1
    cells["seq_id"] = p.cell_seq
    _DATA_HEAD.pack_into(out, k_off - _DATA_HEAD.size, int(p.v_trans), n_layer)
    ks = out[k_off:v_off].view(kd)
    ks["type"] = GGML_TYPE_F16
    ks["size_row"] = 2 * n_embd_k
    ks["data"] = p.k
    vs = out[v_off:].view(vd)
    vs["type"] = GGML_TYPE_F16
    if p.v_trans:
        vs["size_el"] = 2
        vs["n_embd"] = n_embd_v
        vs["data"] = p.v.transpose(0, 2, 1)
    else:
        vs["size_row"] = 2 * n_embd_v
        vs["data"] = p.v
    return out.tobytes()


# ------------------------------------------------------------------------------------------------ epi payload
#
#   magic b"EKVP" | u16 payload version | u16 block type (ggml type id, as in kv_blocks.BlockType)
#   u32 n_cells | u32 n_layer | u32 n_embd_k | u32 n_embd_v | u32 flags (bit 0: v_trans) | i32 src_seq | i32 cell_seq
#   i32 positions[n_cells]
#   K rows [n_layer, n_cells, row_bytes(kind, n_embd_k)] | V rows [n_layer, n_cells, row_bytes(kind, n_embd_v)]
# Integrity is the block file's job (crc32 per block); this header only describes the arrays.

PAYLOAD_MAGIC = b"EKVP"
PAYLOAD_VERSION = 1
_PAYLOAD_HEAD = struct.Struct("<4sHHIIIIIii")


def _row_bytes(kind: str, n_values: int) -> int:
    values, nbytes = native.BLOCK_SHAPE[kind]
    if n_values % values:
        raise KVFormatError(f"{kind} needs rows of a multiple of {values} values, this model's KV rows have {n_values}")
    return n_values // values * nbytes


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown KV block kind {kind!r}; expected one of {', '.join(KINDS)}")
    return kind


def _encode_rows(x: np.ndarray, kind: str) -> np.ndarray:
    """float16 [..., n] -> uint8 [..., row_bytes]; f16 is the bytes themselves (bit-exact, no conversion)."""
    if kind == "f16":
        return np.ascontiguousarray(x, dtype="<f2").view(np.uint8)
    return native.quantize(x.astype(np.float32), kind)


def encode_block(p: ParsedBlock, kind: str) -> bytes:
    """epi's on-disk payload of a block: positions plus K and V rows in `kind` ("f16", "q8_0" or "q4_0")."""
    _check_kind(kind)
    n_layer, n_cells, n_embd_k, n_embd_v = _check_parsed(p)
    kb, vb = _row_bytes(kind, n_embd_k), _row_bytes(kind, n_embd_v)
    head = _PAYLOAD_HEAD.pack(PAYLOAD_MAGIC, PAYLOAD_VERSION, KIND_BLOCK_TYPE[kind], n_cells, n_layer, n_embd_k,
                              n_embd_v, int(p.v_trans), p.src_seq, p.cell_seq)
    pos_off = len(head)
    k_off = pos_off + 4 * n_cells
    v_off = k_off + n_layer * n_cells * kb
    out = np.empty(v_off + n_layer * n_cells * vb, dtype=np.uint8)
    out[:pos_off] = np.frombuffer(head, dtype=np.uint8)
    out[pos_off:k_off].view("<i4")[:] = p.positions
    out[k_off:v_off] = _encode_rows(p.k, kind).reshape(-1)
    out[v_off:] = _encode_rows(p.v, kind).reshape(-1)
    return out.tobytes()


@dataclass(frozen=True)
class _PayloadLayout:
    """A validated payload header and where its sections lie (byte offsets into the payload)."""

    kind: str
    n_cells: int
    n_layer: int
    n_embd_k: int
    n_embd_v: int
    v_trans: bool
    src_seq: int
    cell_seq: int
    k_row_bytes: int
    v_row_bytes: int
    k_off: int
    v_off: int
    pos_off: int = _PAYLOAD_HEAD.size

    def sections(self, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Views of the positions bytes, K rows and V rows (flat uint8, no copy)."""
        return buf[self.pos_off : self.k_off], buf[self.k_off : self.v_off], buf[self.v_off :]


def _payload_layout(payload: bytes | bytearray | memoryview | np.ndarray,
                    kind: str | None) -> tuple[np.ndarray, _PayloadLayout]:
    """The payload as a flat uint8 view and its checked header; `kind`, when given, must match the stored one."""
    buf = np.frombuffer(payload, dtype=np.uint8) if not isinstance(payload, np.ndarray) else payload.view(np.uint8)
    if buf.nbytes < _PAYLOAD_HEAD.size:
        raise KVFormatError(f"KV payload is {buf.nbytes} bytes, shorter than its header")
    magic, version, btype, n_cells, n_layer, n_embd_k, n_embd_v, flags, src_seq, cell_seq = \
        _PAYLOAD_HEAD.unpack_from(buf, 0)
    if magic != PAYLOAD_MAGIC:
        raise KVFormatError("KV payload has a bad magic")
    if version != PAYLOAD_VERSION:
        raise KVFormatError(f"KV payload version {version}, this epi reads {PAYLOAD_VERSION}")
    stored = {int(t): k for k, t in KIND_BLOCK_TYPE.items()}.get(btype)
    if stored is None:
        raise KVFormatError(f"KV payload has unknown block type {btype}")
    if kind is not None and _check_kind(kind) != stored:
        raise KVFormatError(f"KV payload holds {stored} rows, the caller expected {kind}")
    kb, vb = _row_bytes(stored, n_embd_k), _row_bytes(stored, n_embd_v)
    k_off = _PAYLOAD_HEAD.size + 4 * n_cells
    v_off = k_off + n_layer * n_cells * kb
    end = v_off + n_layer * n_cells * vb
    if end != buf.nbytes:
        raise KVFormatError(f"KV payload is {buf.nbytes} bytes, its header describes {end}")
    return buf, _PayloadLayout(stored, n_cells, n_layer, n_embd_k, n_embd_v, bool(flags & 1), src_seq, cell_seq,
                               kb, vb, k_off, v_off)


def decode_block(payload: bytes | bytearray | memoryview | np.ndarray, kind: str | None = None,
                 v_scale: float = 1.0) -> ParsedBlock:
    """Inverse of `encode_block` (exact for f16, the kernels' rounding for q8_0/q4_0). `kind`, when given, must match
    the payload's. `v_scale` multiplies every V row (EpMAN-style weighting of the block's contribution)."""
    buf, lay = _payload_layout(payload, kind)
    stored, n_layer, n_cells, n_embd_k, n_embd_v = lay.kind, lay.n_layer, lay.n_cells, lay.n_embd_k, lay.n_embd_v
    pos_raw, k_flat, v_flat = lay.sections(buf)
    positions = pos_raw.view("<i4")
    k_raw = k_flat.reshape(n_layer, n_cells, lay.k_row_bytes)
    v_raw = v_flat.reshape(n_layer, n_cells, lay.v_row_bytes)
    if stored == "f16":
        k = k_raw.view("<f2")
        v32 = None if v_scale == 1.0 else v_raw.view("<f2").astype(np.float32)
        v = v_raw.view("<f2") if v32 is None else None
    else:
        k = native.dequantize(k_raw, stored, n_embd_k).astype(np.float16)
        v32 = native.dequantize(v_raw, stored, n_embd_v)
        v = None
    if v32 is not None:
        if v_scale != 1.0:
            rows = v32.reshape(-1, n_embd_v)
            v32 = native.scale_rows(rows, np.full(rows.shape[0], v_scale, dtype=np.float32)).reshape(v32.shape)
        v = v32.astype(np.float16)
    return ParsedBlock(positions=positions, k=k, v=v, v_trans=lay.v_trans, src_seq=lay.src_seq,
                       cell_seq=lay.cell_seq)


def state_blob_from_payload(payload: bytes | bytearray | memoryview | np.ndarray, v_scale: float = 1.0, *,
                            kind: str | None = None, v_trans: bool | None = None, move_to: int | None = None,
                            rope: native.RopeShift | None = None) -> np.ndarray:
    """The state blob `load_block` takes, built by the native kernel straight from the payload's bytes (no
    intermediate arrays): byte-identical to `build_state_blob(decode_block(payload, kind, v_scale))`, its reference.
    `v_trans`: V's layout in the blob, which must be the destination context's (transposed unless flash attention
    is on; `session_v_trans`); None keeps the layout the block was captured in. Payload rows are per cell either
    way, so a block captured with flash attention off loads into a context with it on, and back.
    `move_to` with `rope` (keys.k_shift: the model's plain RoPE): the block's first position becomes `move_to`
    and K is rotated to the new positions here, as llama.cpp's K-shift would rotate it inside the next decode; the
    blob then loads at its place with nothing left to shift (that pass re-rotates every cell of the cache)."""
    buf, lay = _payload_layout(payload, kind)
    if lay.n_cells == 0:
        raise KVFormatError("a block needs at least one cell")
    positions, k_rows, v_rows = lay.sections(buf)
    shift = None
    if move_to is not None and rope is not None:
        delta = move_to - int(positions.view("<i4").min())
        shift = replace(rope, delta=delta) if delta else None
    return native.assemble_state_blob(lay.kind, positions, k_rows, v_rows, lay.n_layer, lay.n_cells, lay.n_embd_k,
                                      lay.n_embd_v, lay.v_trans if v_trans is None else v_trans, lay.src_seq,
                                      lay.cell_seq, v_scale, shift)


def session_v_trans(session) -> bool:
    """V's layout in `session`'s cache and state blobs: llama.cpp transposes V unless flash attention is on."""
    return not getattr(session, "flash_attn", False)


# ------------------------------------------------------------------------------------------------ the live cache


def _pos_max(session, seq: int) -> int:
    return int(L.llama_memory_seq_pos_max(session.memory, seq))


def _pos_min(session, seq: int) -> int:
    return int(L.llama_memory_seq_pos_min(session.memory, seq))


def _require_empty_staging(session, staging: int) -> None:
    if _pos_max(session, staging) >= 0:
        raise EpiError(f"staging sequence {staging} is not empty; a previous capture or load did not finish")


def capture_block(session, seq: int, p0: int, p1: int, staging: int = STAGING_SEQ) -> bytes:
    """The state blob of cells [p0, p1) of sequence `seq` (read through the staging sequence, left empty again)."""
    if seq == staging:
        raise ValueError("cannot capture from the staging sequence itself")
    if not 0 <= p0 < p1:
        raise ValueError(f"bad position range [{p0}, {p1})")
    _require_empty_staging(session, staging)
    mem, ctx = session.memory, session.ctx
    L.llama_memory_seq_cp(mem, seq, staging, p0, p1)
    try:
        n = L.llama_state_seq_get_size(ctx, staging)
        buf = np.empty(n, dtype=np.uint8)
        got = L.llama_state_seq_get_data(ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), n, staging)
    finally:
        L.llama_memory_seq_rm(mem, staging, -1, -1)
    if n == 0 or got != n:
        raise EpiError(f"llama.cpp could not read the KV state of positions [{p0}, {p1}) ({got} of {n} bytes)")
    return buf.tobytes()


def load_block(session, block: bytes | bytearray | memoryview | np.ndarray | ParsedBlock, dest_seq: int,
               new_p0: int, staging: int = STAGING_SEQ) -> int:
    """Put a block's cells into `dest_seq` with its first position moved to `new_p0`; returns the position after the
    block (where the next block or the next decode on `dest_seq` must start).

    Blocks go in position order: `new_p0` must be pos_max(dest_seq) + 1 unless `dest_seq` is empty. K is re-rotated
    to the new positions by llama.cpp inside the next decode (K-shift)."""
    if dest_seq == staging:
        raise ValueError("cannot load into the staging sequence itself")
    if new_p0 < 0:
        raise ValueError("positions must stay >= 0")
    last = _pos_max(session, dest_seq)
    if last >= 0 and new_p0 != last + 1:
        raise ValueError(f"sequence {dest_seq} ends at position {last}; the next block must start at {last + 1}, "
                         f"not {new_p0} (load blocks in position order)")
    _require_empty_staging(session, staging)
    if isinstance(block, ParsedBlock):
        blob = build_state_blob(replace(block, v_trans=session_v_trans(session)))
    else:
        blob = block
    data = np.frombuffer(blob, dtype=np.uint8) if not isinstance(blob, np.ndarray) else blob.view(np.uint8)
    mem, ctx = session.memory, session.ctx
    try:
        read = L.llama_state_seq_set_data(ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), data.nbytes,
                                          staging)
        if read != data.nbytes:
            raise EpiError(f"llama.cpp refused a KV block ({read} of {data.nbytes} bytes read): the block does not "
                           "match this model/context, or the cache is full")
        lo, hi = _pos_min(session, staging), _pos_max(session, staging)
        delta = new_p0 - lo
        if delta:
            L.llama_memory_seq_add(mem, staging, -1, -1, delta)
        L.llama_memory_seq_cp(mem, staging, dest_seq, -1, -1)
    finally:
        L.llama_memory_seq_rm(mem, staging, -1, -1)
    return hi + delta + 1
