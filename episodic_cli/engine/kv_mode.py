"""kv mode: answers assembled from the events' stored KV blocks instead of re-reading their text.

The prompt is rendered with the model's chat template around placeholders; the text between placeholders
(instructions, the question) is decoded as usual, and at each placeholder the event's block is loaded at the next
position (K is re-rotated by llama.cpp's K-shift). Only the scaffolding is prefilled; a missing or damaged block
falls back to decoding that event's text, with a warning. Blocks are written at ingest by `kv_capture`.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..store import StoreError
from ..store.kv_blocks import BlockCorruptError, KVBlockReader, KVFileHeader
from .answer import ANSWER_TOKENS, Answer, stream_into
from .kv_capture import BLOCK_FILE
from .kv_memory import KVFormatError, decode_block, load_block
from .llama_backend import LlamaModel, LlamaSession
from .retrieve import RetrievedEvent

_MARK = "\x1fEPI-BLOCK-{}\x1f"  # a control character no document text keeps (sources normalise them away)


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
               max_tokens: int = ANSWER_TOKENS, should_stop: Callable[[], bool] | None = None,
               weights: list[float] | None = None) -> Iterator[str]:
        """`messages` must hold `placeholder(i)` where event i's text would go (see answer.build_messages).
        `weights[i]` scales event i's V rows (EpMAN weighting; None: all 1.0)."""
        t0 = time.perf_counter()
        self.session.clear()
        pos = 0
        n_prompt = 0
        for part in self._segments(messages):
            if part.startswith("EPI-BLOCK-"):
                r = retrieved[int(part.removeprefix("EPI-BLOCK-"))]
                loaded = self._load(r, pos, 1.0 if weights is None else weights[int(part.removeprefix("EPI-BLOCK-"))])
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

    def _load(self, r: RetrievedEvent, pos: int, v_scale: float = 1.0) -> int | None:
        ev = r.event
        if ev.kv_offset is None:
            self.warn(f"event {ev.id} has no stored KV block; reading its text instead")
            return None
        try:
            block = self.reader.read(ev.kv_offset, event_id=ev.ordinal, length=ev.kv_length)
            if pos + block.n_tokens + ANSWER_TOKENS > self.session.n_ctx:
                raise StoreError("the retrieved events do not fit the answer context; lower -k")
            return load_block(self.session, decode_block(block.payload, v_scale=v_scale), 0, pos)
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



EPMAN_FLOOR = 0.9  # EpMAN's weights are relative; keeping them in [0.9, 1.0] nudges attention without silencing a block


def episodic_weights(retrieved: list[RetrievedEvent]) -> list[float]:
    """EpMAN-style episodic weight per retrieved event (seed 000, eq. 1), mapped to [EPMAN_FLOOR, 1.0]: the best hit
    gets 1.0, the weakest hit the floor, linearly in the fused retrieval score; a neighbour gets the weight of the
    nearest hit of its document (it was retrieved for that hit)."""
    hits = [r for r in retrieved if r.score is not None]
    if not hits:
        return [1.0] * len(retrieved)
    lo, hi = min(r.score for r in hits), max(r.score for r in hits)

    def of_hit(r: RetrievedEvent) -> float:
        return 1.0 if hi == lo else EPMAN_FLOOR + (1.0 - EPMAN_FLOOR) * (r.score - lo) / (hi - lo)

    weights = []
    for r in retrieved:
        if r.score is not None:
            weights.append(of_hit(r))
            continue
        same_doc = [h for h in hits if h.document.id == r.document.id] or hits
        nearest = min(same_doc, key=lambda h: (abs(h.event.ordinal - r.event.ordinal), -h.score))
        weights.append(of_hit(nearest))
    return weights
