"""Capture: while the ingest window still holds an event, its cells are read out (kv_memory.capture_block), encoded
(f16 / q8_0 / q4_0) and appended to the store's current block file (Store.kv_block_path); SQLite records where each
block lives.
"""
from __future__ import annotations

from pathlib import Path

import llama_cpp as L

from ..store.kv_blocks import KVBlockWriter, KVFileHeader
from .kv_memory import KIND_BLOCK_TYPE, KINDS, ParsedBlock, capture_block, encode_block, parse_state_blob
from .llama_backend import LlamaModel, LlamaSession

DEFAULT_KIND = "q8_0"


def file_header(model: LlamaModel, model_sha256: str) -> KVFileHeader:
    """What a block is only valid for: the contexts of ingest and answer must match exactly (anchors.md B.3)."""
    head_dim = model.info.n_embd // max(L.llama_model_n_head(model.ptr), 1)
    return KVFileHeader(model_sha256=model_sha256, llama_cpp_version=L.__version__, type_k="f16", type_v="f16",
                        flash_attn=False, n_layer=model.info.n_layer, n_head_kv=model.info.n_head_kv,
                        head_dim=head_dim)


def read_window(session: LlamaSession, start: int, end: int) -> ParsedBlock:
    """The cells of document tokens [start, end) in the ingest window (sequence 0 of `surprise_pass`)."""
    return parse_state_blob(capture_block(session, 0, session.cache_pos(start), session.cache_pos(end - 1) + 1))


class BlockCapture:
    """Appends each event's encoded KV block to the store's block file during the ingest pass."""

    def __init__(self, block_file: Path, header: KVFileHeader, kind: str = DEFAULT_KIND):
        if kind not in KINDS:
            raise ValueError(f"unknown KV block type {kind!r}; use one of {', '.join(KINDS)}")
        self.kind = kind
        self.writer = KVBlockWriter(block_file, header)

    def append(self, block: ParsedBlock, ordinal: int) -> tuple[int, int]:
        """Encode one event's block (from `read_window`) and append it; returns its (offset, length) in the file."""
        payload = encode_block(block, self.kind)
        return self.writer.append(ordinal, KIND_BLOCK_TYPE[self.kind], block.n_cells, payload)

    def sync(self) -> None:
        """Blocks must be durable before SQLite records their offsets."""
        self.writer.sync()

    def close(self) -> None:
        self.writer.close()
