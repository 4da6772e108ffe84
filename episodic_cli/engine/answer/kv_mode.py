"""kv mode: answers assembled from the events' stored KV blocks instead of re-reading their text.

The prompt is the chat template rendered around placeholders, in three parts:

    [sink: system rules + "Sources:"] [block] [block] ... ["Question: ..." + assistant header]

* The sink (EM-LLM's attention-sink block, shared by every answer) is decoded once per model and prompt version
  and kept as an f16 block in the cache directory, so a fresh `epi ask` loads it instead of decoding it.
* Each retrieved event's block is loaded from the answer model's KV tier at the next position, in the prompt's order
  (best hit last). K is rotated to the new positions as the block is assembled (native/src/rope_shift.c, the same
  bits as llama.cpp's K-shift, which still does it for models whose RoPE is not plain).
* An event whose block the tier does not hold (cold: another model than the one that ingested, a budget that kept
  only part of the archive, a damaged block) is prefilled from its text in place, at its packed position in the same
  cache (consecutive cold events in one prefill); its cells are then captured and offered to the tier, so the next
  answer that retrieves it loads it (lazy materialisation).
* Only the question part is decoded. Earlier chat turns go there too, after the blocks, so that the sink and the
  blocks stay a stable prefix: in `epi chat` a follow-up keeps whatever prefix of the cache it shares with the
  previous question and loads only what changed.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as L
import numpy as np

from ...native import RopeShift
from ...store import StoreError
from ...store.kv_tier import BlockCorruptError, StoredBlock, block_key
from ..budgets import ANSWER_TOKENS
from ..kv.blocks import (KVFormatError, ParsedBlock, decode_block, encode_block, load_block,
                         session_v_trans, state_blob_from_payload)
from ..kv.keeper import BlockKeeper, read_cells
from ..kv.keys import k_shift
from ..llama.backend import INGEST_BATCH, LlamaModel, LlamaSession
from ..prompt import BLOCK_MARK, kv_messages
from ..retrieval.evidence import readable
from ..retrieval.retrieve import RetrievedEvent
from .records import Answer, stream_into
from .short_answer import SPAN_SEQUENCES

TOO_BIG = "the retrieved events do not fit the answer context; lower -k"


@dataclass(frozen=True)
class Part:
    """One piece of the assembled cache: text to decode, or a retrieved event (its block, with its V weight)."""

    key: tuple
    tokens: np.ndarray | None = None
    retrieved: RetrievedEvent | None = None
    v_scale: float = 1.0
    block_key: bytes = b""


PrepareProgress = Callable[[int, int], None]  # (tokens prepared so far, cold tokens to prepare) for this answer


class KVModeAnswerer:
    """Answers from a model's KV tier: load the sink and the events' blocks, prefill the cold ones in place, decode
    only the question."""

    mode = "kv"

    def __init__(self, model: LlamaModel, n_ctx: int, keeper: BlockKeeper, n_threads: int | None = None,
                 warn: Callable[[str], None] | None = None, sink_dir: Path | None = None,
                 on_prepare: PrepareProgress | None = None):
        self.model = model
        self.session = self._new_session(n_ctx, n_threads)
        self.keeper = keeper
        self.tier = keeper.tier
        self.warn = warn or (lambda message: None)
        self.sink_dir = sink_dir
        self.on_prepare = on_prepare
        # K rotated to a block's new place while it is assembled, where the model's RoPE allows it (None: llama.cpp's
        # K-shift re-rotates every cell of the cache inside the next decode; the benchmarks set None to compare)
        self.k_shift: RopeShift | None = k_shift(keeper.rope, model)
        self._layout: list[tuple[tuple, int]] = []  # (part key, position after it) of what sequence 0 holds
        # tokens prefilled from text and the seconds they took, in the last answer (engine/llama/prefill_rate.py)
        self.cold_prefilled: tuple[int, float] = (0, 0.0)
        self._ahead = False  # preparing blocks ahead of any question (`prepare`), not for one

    def _new_session(self, n_ctx: int, n_threads: int | None) -> LlamaSession:
        return LlamaSession(self.model, n_ctx=n_ctx, n_threads=n_threads, n_seq_max=SPAN_SEQUENCES)

    def stream(self, question: str, retrieved: list[RetrievedEvent], history: list[dict[str, str]] | None,
               started: float, answer: Answer, max_tokens: int = ANSWER_TOKENS,
               should_stop: Callable[[], bool] | None = None, weights: list[float] | None = None,
               spans: list[list[tuple[int, int]]] | None = None, lead_spans: list[str] | None = None,
               excerpts: dict[int, str] | None = None) -> Iterator[str]:
        """Assemble the cache (keeping what the previous question left that still applies) and stream the answer.
        `weights[i]` scales event i's V rows when its block is loaded (EpMAN weighting; None: all 1.0; an event
        prepared from text is not weighted). `spans[i]`: narrowed evidence, the character spans of event i to read;
        they are decoded as text behind the sink instead of loading the blocks (kv_messages). `lead_spans`: the
        answer starts with the likeliest of these (engine/answer/short_answer.py). `excerpts[event id]`: the text
        read in place of that event's block (its passages that match the question, when its block is not prepared:
        engine/retrieval/cold_reading.py)."""
        t0 = time.perf_counter()
        parts = self._plan(question, retrieved, history, weights, spans, excerpts)
        keep = self._shared_prefix(parts)
        pos = self._layout[keep - 1][1] if keep else 0
        answer.reused_tokens = pos
        L.llama_memory_seq_rm(self.session.memory, 0, pos, -1)
        self._layout = self._layout[:keep]
        cold: list[tuple[Part, np.ndarray]] = []  # events waiting to be prefilled together, in order
        stored = {id(p): self._read(p) for p in parts[keep:] if p.retrieved is not None}
        for p in parts[keep:]:  # used now: before a cold event's block is offered, which may evict the oldest ones
            if stored.get(id(p)) is not None:
                self.tier.touch(p.block_key)
        cold_tokens = {id(p): self._event_tokens(p) for p in parts[keep:] if id(p) in stored and stored[id(p)] is None}
        excerpt_tokens = sum(len(p.tokens) for p in parts[keep:] if p.key[0] == "excerpt")  # read from text too
        self._cold_total, self._cold_done = sum(map(len, cold_tokens.values())) + excerpt_tokens, 0
        self.cold_prefilled = (0, 0.0)
        if self._cold_total and self.on_prepare is not None:
            self.on_prepare(0, self._cold_total)  # at once: the first batch alone may take seconds
            answer.timings.progress_s = time.perf_counter() - started
        for i, part in enumerate(parts[keep:], keep):
            if part.retrieved is not None:
                block = stored[id(part)]
                if block is None:
                    cold.append((part, cold_tokens[id(part)]))
                    continue
                pos = self._prepare_cold(cold, pos, answer)
                cold = []
                end = self._load(part, block, pos)
                if end is None:  # unusable after all: prefill it with the next cold run
                    tokens = self._event_tokens(part)
                    self._cold_total += len(tokens)
                    cold.append((part, tokens))
                    continue
                answer.kv_loaded_tokens += end - pos
                pos = self._append(part.key, end)
                continue
            pos = self._prepare_cold(cold, pos, answer)
            cold = []
            sink = i == 0 and len(parts) > 1  # a prompt without blocks is decoded whole, no sink
            if sink and self._load_sink(part.tokens):
                pos = self._append(part.key, len(part.tokens))
                continue
            if pos + len(part.tokens) + max_tokens > self.session.n_ctx:
                raise StoreError(TOO_BIG)
            pos = self._append(part.key, self.session.prefill(part.tokens, pos))
            if part.key[0] == "excerpt":
                self._cold_done += len(part.tokens)
                if self.on_prepare is not None:
                    self.on_prepare(self._cold_done, self._cold_total)
            if sink:
                self._save_sink(part.tokens)
        pos = self._prepare_cold(cold, pos, answer)
        answer.prompt_tokens = pos
        answer.timings.prefill_s = time.perf_counter() - t0
        yield from stream_into(answer, self.session, pos, started, max_tokens, should_stop, lead_spans)

    def prepare(self, events: list[RetrievedEvent]) -> int:
        """Prefill `events` behind the sink, as a question reading them would, and offer each one's block to the
        tier: what `epi warm` does ahead of the questions. The tokens prepared."""
        self.reset()
        self._ahead = True
        try:
            return self._prepare_ahead(events)
        finally:
            self._ahead = False
            self.reset()

    def _prepare_ahead(self, events: list[RetrievedEvent]) -> int:
        sink, *parts, _question = self._plan("", events, None, None)
        if self._load_sink(sink.tokens):
            pos = len(sink.tokens)
        else:
            pos = self.session.prefill(sink.tokens, 0)
            self._save_sink(sink.tokens)
        cold = [(p, self._event_tokens(p)) for p in parts]
        self._cold_total, self._cold_done = sum(len(tk) for _, tk in cold), 0
        self._prepare_cold(cold, pos, Answer())
        return self._cold_total

    def reset(self) -> None:
        """Forget the assembled cache (the next question starts from an empty context)."""
        self.session.clear()
        self._layout = []

    # -- assembly ---------------------------------------------------------------------------------------------

    def _plan(self, question: str, retrieved: list[RetrievedEvent], history: list[dict[str, str]] | None,
              weights: list[float] | None, spans: list[list[tuple[int, int]]] | None = None,
              excerpts: dict[int, str] | None = None) -> list[Part]:
        quotes = None
        if spans is not None:
            quotes, retrieved = [readable(r.event.text[a:b]) for r, ss in zip(retrieved, spans) for a, b in ss], []
        rendered = self.model.apply_chat_template(kv_messages(question, len(retrieved), history, quotes))
        texts = rendered.split(BLOCK_MARK)
        # With blocks, texts[0] is the question-free prefix `sink_tokens` renders (the ingest sink), tokenized alike.
        parts = [Part(("text", _digest(texts[0])), self.model.tokenize(texts[0], special=True))]
        for i, r in enumerate(retrieved):
            if excerpts and r.event.id in excerpts:  # decoded in place as text, between the blocks
                text = f"\n{excerpts[r.event.id]}\n"
                parts.append(Part(("excerpt", _digest(text)), self.model.tokenize(text)))
                continue
            scale = 1.0 if weights is None else float(weights[i])
            key = event_block_key(r)
            parts.append(Part(("event", r.event.id, key, scale), retrieved=r, v_scale=scale, block_key=key))
        tail = texts[-1] if retrieved or quotes else None
        if tail is not None:
            parts.append(Part(("text", _digest(tail)), self.model.tokenize(tail, special=True)))
        return parts

    def _shared_prefix(self, parts: list[Part]) -> int:
        """How many leading parts the cache already holds; the last part is always decoded again (its logits start
        the answer)."""
        keep = 0
        for (key, _), part in zip(self._layout, parts[:-1]):
            if key != part.key:
                break
            keep += 1
        return keep

    def _append(self, key: tuple, end: int) -> int:
        self._layout.append((key, end))
        return end

    def _event_tokens(self, part: Part) -> np.ndarray:
        """The event's text in the answer model's own tokens (any tokenizer: the archive keeps text, not tokens)."""
        return self.model.tokenize(part.retrieved.event.text)

    def _read(self, part: Part) -> StoredBlock | None:
        """The event's block from the tier, or None (cold). A damaged block is removed, to be rebuilt from text."""
        try:
            return self.tier.read(part.block_key)
        except BlockCorruptError as exc:
            self._discard(part, exc.reason)
            return None

    def _discard(self, part: Part, reason: str) -> None:
        r = part.retrieved
        self.warn(f"event {r.event.id} ({r.document.display_path}): its KV block was damaged ({reason}); "
                  "preparing it again from the text")
        self.tier.discard(part.block_key)

    def _load(self, part: Part, block: StoredBlock, pos: int) -> int | None:
        """Load a stored block at `pos`; the position after it, or None when the block does not fit this model's
        cache after all (it is then removed and the event prepared from text)."""
        if pos + block.n_tokens + ANSWER_TOKENS > self.session.n_ctx:
            raise StoreError(TOO_BIG)
        try:
            blob = state_blob_from_payload(block.payload, part.v_scale, v_trans=session_v_trans(self.session),
                                           move_to=pos, rope=self.k_shift)
            end = load_block(self.session, blob, 0, pos)
        except KVFormatError as exc:
            self._discard(part, str(exc))
            return None
        return end

    def _prepare_cold(self, cold: list[tuple[Part, np.ndarray]], pos: int, answer: Answer) -> int:
        """Prefill the cold events' text at `pos` in one go, then capture each event's cells and offer them to the
        tier; returns the position after them."""
        if not cold:
            return pos
        tokens = np.concatenate([t for _, t in cold])
        if pos + len(tokens) + ANSWER_TOKENS > self.session.n_ctx:
            raise StoreError(TOO_BIG)
        self._prefill_cold(tokens, pos)
        for part, event_tokens in cold:
            end = pos + len(event_tokens)
            if len(event_tokens):
                self._captured(part, read_cells(self.session, pos, end))
            pos = self._append(part.key, end)
        answer.kv_prefilled_tokens += len(tokens)
        return pos

    def _prefill_cold(self, tokens: np.ndarray, pos: int, seq: int = 0) -> None:
        """Decode cold events' tokens at `pos` in sequence `seq`, a batch at a time, telling `on_prepare` how far
        this answer's preparing has come."""
        t0 = time.perf_counter()
        for a in range(0, len(tokens), INGEST_BATCH):
            self.session.decode(tokens[a : a + INGEST_BATCH], pos + a, seq=seq)
            self._cold_done += min(INGEST_BATCH, len(tokens) - a)
            if self.on_prepare is not None:
                self.on_prepare(self._cold_done, self._cold_total)
        n, s = self.cold_prefilled
        self.cold_prefilled = (n + len(tokens), s + time.perf_counter() - t0)

    def _captured(self, part: Part, block: ParsedBlock) -> None:
        """An event prepared from text: offer its cells to the tier (the next answer that retrieves it loads them).
        Prepared ahead (`epi warm`), it is kept as ingest keeps blocks: only while the budget has room."""
        self.keeper.offer(part.block_key, block, on_use=not self._ahead, document_sha=_document_sha(part))

    # -- the sink block, kept across processes ------------------------------------------------------------------

    def _sink_path(self, tokens: np.ndarray) -> Path | None:
        if self.sink_dir is None:
            return None
        h = hashlib.sha256(repr(self.tier.config).encode())
        h.update(tokens.astype("<i4").tobytes())
        return self.sink_dir / f"{h.hexdigest()[:32]}.ekvp"

    def _load_sink(self, tokens: np.ndarray) -> bool:
        path = self._sink_path(tokens)
        if path is None or not path.is_file():
            return False
        try:
            block = decode_block(path.read_bytes(), "f16")
            if block.n_cells != len(tokens):
                raise KVFormatError("sink block has the wrong length")
            load_block(self.session, block, 0, 0)
            return True
        except (OSError, KVFormatError):
            path.unlink(missing_ok=True)  # a cache file: rebuild it rather than trust it
            L.llama_memory_seq_rm(self.session.memory, 0, -1, -1)
            return False

    def _save_sink(self, tokens: np.ndarray) -> None:
        """Best effort: a read-only or full cache directory only costs the next process a few hundred ms."""
        path = self._sink_path(tokens)
        if path is None or path.is_file():
            return
        try:
            payload = encode_block(read_cells(self.session, 0, len(tokens)), "f16")
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(payload)
            os.replace(tmp, path)
        except OSError:
            pass

    def close(self) -> None:
        self.session.close()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _document_sha(part: Part) -> str | None:
    """The content sha256 of the document a part's event comes from (None: not an event)."""
    return None if part.retrieved is None else part.retrieved.document.content_sha256


def event_block_key(r: RetrievedEvent) -> bytes:
    """The key of a retrieved event's block in every tier (kv_tier.identity.block_key)."""
    return block_key(r.document.content_sha256, r.event.char_start, r.event.char_end)
