"""Capture: while the ingest window still holds an event, its cells are read out (kv_memory.capture_block), encoded
(f16 / q8_0 / q4_0) and appended to the store's `kv/blocks.ekv`; SQLite records where each block lives.
"""
from __future__ import annotations

from pathlib import Path

import llama_cpp as L

from ..store.kv_blocks import KVBlockWriter, KVFileHeader
from .kv_memory import KIND_BLOCK_TYPE, KINDS, capture_block, encode_block, parse_state_blob
from .llama_backend import LlamaModel, LlamaSession

BLOCK_FILE = "kv/blocks.ekv"
DEFAULT_KIND = "q8_0"


def file_header(model: LlamaModel, model_sha256: str) -> KVFileHeader:
    """What a block is only valid for: the contexts of ingest and answer must match exactly (anchors.md B.3)."""
    head_dim = model.info.n_embd // max(L.llama_model_n_head(model.ptr), 1)
    return KVFileHeader(model_sha256=model_sha256, llama_cpp_version=L.__version__, type_k="f16", type_v="f16",
                        flash_attn=False, n_layer=model.info.n_layer, n_head_kv=model.info.n_head_kv,
                        head_dim=head_dim)


class BlockCapture:
    """Appends each event's encoded KV block to the store's block file during the ingest pass."""

    def __init__(self, store_dir: Path, header: KVFileHeader, kind: str = DEFAULT_KIND):
        if kind not in KINDS:
            raise ValueError(f"unknown KV block type {kind!r}; use one of {', '.join(KINDS)}")
        self.kind = kind
        self.writer = KVBlockWriter(store_dir / BLOCK_FILE, header)

    def capture(self, session: LlamaSession, start: int, end: int, ordinal: int) -> tuple[int, int]:
        """Block of document tokens [start, end) from sequence 0; returns its (offset, length) in the block file."""
        blob = capture_block(session, 0, session.cache_pos(start), session.cache_pos(end - 1) + 1)
        payload = encode_block(parse_state_blob(blob), self.kind)
        return self.writer.append(ordinal, KIND_BLOCK_TYPE[self.kind], end - start, payload)

    def sync(self) -> None:
        """Blocks must be durable before SQLite records their offsets."""
        self.writer.sync()

    def close(self) -> None:
        self.writer.close()
