"""Wires the parts a command needs (model, embedder, store) and loads each only when first used.

The CLI talks to this module alone; every method returns plain data and raises EpiError/StoreError on failure.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..store import Store, StoreIdentity
from ..store.kv_current import current_block_path
from .answer import ANSWER_TOKENS, Answer, TextModeAnswerer
from .embedder import EMBED_DIM, EMBEDDER_NAME, Embedder
from .errors import EpiError
from .ingest import Ingestor
from .kv_capture import DEFAULT_KIND, BlockCapture, file_header
from .kv_mode import KVModeAnswerer, episodic_weights, has_blocks
from .llama_backend import LlamaModel, llama_cpp_version
from .models import PreparedModel, prepare_model
from .paths import cache_dir, store_path
from .retrieve import RetrievedEvent, relevance_order, retrieve
from .segment import SegmentParams

MODES = ("text", "kv")
ANSWER_CONTEXT = 8192
EVIDENCE_BUDGET = 3072
NO_BLOCKS = "this store has no KV blocks (ingested with --no-kv); re-ingest its files, or use --mode text"
MAX_EVENT_TOKENS = 1024  # the ingest context grows with it (ingest.ingest_context): an undecided event stays in it


@dataclass
class AskResult:
    question: str
    mode: str
    retrieved: list[RetrievedEvent]
    answer: Answer

    def as_json(self) -> dict:
        return {
            "answer": self.answer.text.strip(),
            "mode": self.mode,
            "sources": [
                {"document": r.document.display_path, "page": r.event.page_start, "line_start": r.event.line_start,
                 "line_end": r.event.line_end, "event_id": r.event.id,
                 "score": None if r.score is None else round(r.score, 6), "text": r.event.text}
                for r in self.retrieved
            ],
            "retrieved_tokens": sum(r.n_tokens for r in self.retrieved),
            "timings": self.answer.timings.as_json(),
        }


class Workspace:
    def __init__(self, model: str | None = None, store: str | None = None, threads: int | None = None,
                 warn: Callable[[str], None] | None = None):
        self.model_choice = model
        self.store_dir: Path = store_path(store)
        self.threads = threads
        self.warn = warn or (lambda message: None)
        self._answerers: dict[str, TextModeAnswerer | KVModeAnswerer] = {}

    @cached_property
    def prepared(self) -> PreparedModel:
        return prepare_model(self.model_choice)

    @cached_property
    def model(self) -> LlamaModel:
        model = LlamaModel(self.prepared.path)
        reason = model.unsupported_reason()
        if reason:
            raise EpiError(f"epi cannot use {self.prepared.source.name}: {reason}. "
                           "Use a dense-attention chat model (Llama, Mistral, Qwen2/3, Phi-3, SmolLM class).")
        return model

    @cached_property
    def embedder(self) -> Embedder:
        return Embedder(self.threads)

    def identity(self, params: SegmentParams) -> StoreIdentity:
        vocab = hashlib.sha256(b"\x00".join(self.model.pieces())).hexdigest()
        return StoreIdentity(
            model_name=self.model.info.name, model_sha256=self.prepared.sha256, tokenizer_sha256=vocab,
            llama_cpp_version=llama_cpp_version(), embedder=EMBEDDER_NAME, embed_dim=EMBED_DIM,
            segmentation=params.as_dict(),
        )

    def store_for_writing(self, params: SegmentParams) -> Store:
        return Store.create_or_open(self.store_dir, self.identity(params))

    def store_for_reading(self) -> Store:
        return Store.open_existing(self.store_dir)

    def check_store(self, store: Store) -> None:
        """Asking needs the very model the store was built with (its tokens and its KV blocks)."""
        store.check_identity(self.identity(SegmentParams.from_recorded(store.identity.segmentation)))

    # -- commands ---------------------------------------------------------------------------------------------

    def ingestor(self, store: Store, params: SegmentParams, kv_kind: str | None = DEFAULT_KIND) -> Ingestor:
        """kv_kind None stores no KV blocks (text mode only)."""
        capture = None
        if kv_kind is not None:
            capture = BlockCapture(store.kv_block_path, file_header(self.model, self.prepared.sha256), kv_kind)
        return Ingestor(store, self.model, self.embedder, params, self.threads, capture)

    @property
    def answer_context(self) -> int:
        return min(ANSWER_CONTEXT, self.model.info.n_ctx_train)

    def has_block_file(self) -> bool:
        return current_block_path(self.store_dir).is_file()

    def default_mode(self) -> str:
        """kv whenever the store has KV blocks, else text (decided per question too: see `ask`)."""
        return "kv" if self.has_block_file() else "text"

    def answerer(self, mode: str = "text") -> TextModeAnswerer | KVModeAnswerer:
        if mode not in self._answerers:
            n_ctx = self.answer_context
            if mode == "kv":
                if not self.has_block_file():
                    raise EpiError(NO_BLOCKS)
                header = file_header(self.model, self.prepared.sha256)
                self._answerers[mode] = KVModeAnswerer(self.model, n_ctx, self.store_dir, header, self.threads,
                                                       self.warn, sink_dir=cache_dir() / "kv-sinks")
            else:
                self._answerers[mode] = TextModeAnswerer(self.model, n_ctx, self.threads)
            self._answerers[mode].session.warm_up()
        return self._answerers[mode]

    def retrieve(self, store: Store, question: str, k: int, neighbours: int = 1) -> list[RetrievedEvent]:
        if k < 1:
            raise EpiError("-k must be at least 1")
        query = self.embedder.embed_query(question)
        budget = min(EVIDENCE_BUDGET, self.answer_context - ANSWER_TOKENS - 768)
        return retrieve(store, query, question, k, neighbours, token_budget=budget)

    def ask(
        self,
        store: Store,
        question: str,
        k: int = 3,
        mode: str | None = None,
        history: list[dict[str, str]] | None = None,
        neighbours: int = 1,
        should_stop: Callable[[], bool] | None = None,
        epman: bool = False,
    ) -> tuple[AskResult, Iterator[str]]:
        """Retrieve now; return the result (filled in as the stream is consumed) and the answer stream.
        `epman` scales each block's V rows by its episodic weight in [0.9, 1.0] (kv mode only)."""
        if mode is not None and mode not in MODES:
            raise EpiError(f"unknown mode {mode!r}: use text or kv")
        if not question.strip():
            raise EpiError("the question is empty")
        started = time.perf_counter()
        retrieved = relevance_order(self.retrieve(store, question, k, neighbours))  # the order the model reads
        stored = has_blocks(r.event for r in retrieved)
        if mode == "kv" and retrieved and not stored:
            raise EpiError(NO_BLOCKS)
        mode = mode or ("kv" if stored else "text")  # kv whenever the store has blocks
        if epman and mode != "kv":
            raise EpiError("--epman weights KV blocks, so it needs kv mode (a store ingested with KV blocks)")
        answer = Answer()
        answer.timings.retrieve_s = time.perf_counter() - started
        result = AskResult(question, mode, retrieved, answer)
        answerer = self.answerer(mode)
        weights = episodic_weights(retrieved) if epman else None
        stream = answerer.stream(question, retrieved, history, started, answer, should_stop=should_stop,
                                 weights=weights)
        return result, stream

    def close(self) -> None:
        for answerer in self._answerers.values():
            answerer.close()
        self._answerers.clear()
