"""kv mode: events' KV blocks captured during the ingest pass, and answers assembled from them instead of re-reading text.

Capture (`BlockCapture`): while the ingest window still holds an event, its cells are read out (kv_memory.capture_block),
encoded (f16 / q8_0 / q4_0) and appended to the store's `kv/blocks.ekv`; SQLite records where each block lives.

Answer (`KVModeAnswerer`): the prompt is rendered with the model's chat template around placeholders; the text between
placeholders (instructions, citation headers, the question) is decoded as usual, and at each placeholder the event's
block is loaded at the next position (K is re-rotated by llama.cpp's K-shift). Only the few hundred tokens of
scaffolding are prefilled; a missing or damaged block falls back to decoding that event's text, with a warning.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import llama_cpp as L

from ..store import StoreError
from ..store.kv_blocks import BlockCorruptError, KVBlockReader, KVBlockWriter, KVFileHeader
from .answer import ANSWER_TOKENS, Answer, stream_into
from .kv_memory import KIND_BLOCK_TYPE, KINDS, KVFormatError, capture_block, decode_block, encode_block, load_block, \
    parse_state_blob
from .llama_backend import LlamaModel, LlamaSession
from .retrieve import RetrievedEvent

BLOCK_FILE = "kv/blocks.ekv"
DEFAULT_KIND = "q8_0"
_MARK = "\x1fEPI-BLOCK-{}\x1f"  # a control character no document text keeps (sources normalise them away)


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


class KVModeAnswerer:
    """Answers from stored blocks: prefill only the scaffolding, load the events' KV, decode the question."""

    mode = "kv"

    def __init__(self, model: LlamaModel, n_ctx: int, store_dir: Path, header: KVFileHeader,
                 n_threads: int | None = None, warn: Callable[[str], None] | None = None):
        self.model = model
        self.session = LlamaSession(model, n_ctx=n_ctx, n_threads=n_threads, n_seq_max=2)
        self.reader = KVBlockReader(store_dir / BLOCK_FILE, header)
        self.warn = warn or (lambda message: None)

    def _segments(self, messages: list[dict[str, str]]) -> list[str]:
        return self.model.apply_chat_template(messages).split("\x1f")

    def stream(self, messages: list[dict[str, str]], retrieved: list[RetrievedEvent], started: float, answer: Answer,
               max_tokens: int = ANSWER_TOKENS, should_stop: Callable[[], bool] | None = None) -> Iterator[str]:
        """`messages` must hold `placeholder(i)` where event i's text would go (see answer.build_messages)."""
        t0 = time.perf_counter()
        self.session.clear()
        pos = 0
        n_prompt = 0
        for part in self._segments(messages):
            if part.startswith("EPI-BLOCK-"):
                r = retrieved[int(part.removeprefix("EPI-BLOCK-"))]
                loaded = self._load(r, pos)
                if loaded is not None:
                    n_prompt += loaded - pos
                    pos = loaded
                    continue
                part = r.event.text  # fallback: re-read this event's text
            if not part:
                continue
            tokens = self.model.tokenize(part, special=True)
            if pos + len(tokens) + max_tokens > self.session.n_ctx:
                raise StoreError("the retrieved events do not fit the answer context; lower -k")
            pos = self.session.prefill(tokens, pos)
            n_prompt += len(tokens)
        answer.prompt_tokens = n_prompt
        answer.timings.prefill_s = time.perf_counter() - t0
        yield from stream_into(answer, self.session, pos, started, max_tokens, should_stop)

    def _load(self, r: RetrievedEvent, pos: int) -> int | None:
        ev = r.event
        if ev.kv_offset is None:
            self.warn(f"event {ev.id} has no stored KV block; reading its text instead")
            return None
        try:
            block = self.reader.read(ev.kv_offset, event_id=ev.ordinal, length=ev.kv_length)
            if pos + block.n_tokens + ANSWER_TOKENS > self.session.n_ctx:
                raise StoreError("the retrieved events do not fit the answer context; lower -k")
            return load_block(self.session, decode_block(block.payload), 0, pos)
        except (BlockCorruptError, KVFormatError) as exc:
            self.warn(f"event {ev.id}: stored KV block unusable ({exc}); reading its text instead")
            return None

    def close(self) -> None:
        self.reader.close()
        self.session.close()


def placeholder(i: int) -> str:
    return _MARK.format(i)


def has_blocks(events) -> bool:
    return any(e.kv_offset is not None for e in events)

