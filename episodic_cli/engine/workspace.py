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
from .answer import ANSWER_TOKENS, Answer, TextModeAnswerer, build_messages
from .embedder import EMBED_DIM, EMBEDDER_NAME, Embedder
from .errors import EpiError
from .ingest import Ingestor
from .llama_backend import LlamaModel, llama_cpp_version
from .models import PreparedModel, prepare_model
from .paths import store_path
from .retrieve import RetrievedEvent, retrieve
from .segment import SegmentParams

MODES = ("text", "kv")
ANSWER_CONTEXT = 8192
EVIDENCE_BUDGET = 3072


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
    def __init__(self, model: str | None = None, store: str | None = None, threads: int | None = None):
        self.model_choice = model
        self.store_dir: Path = store_path(store)
        self.threads = threads
        self._answerer: TextModeAnswerer | None = None

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
        """Asking needs the very model the store was built with (its tokens, and later its KV blocks)."""
        store.check_identity(self.identity(SegmentParams(**store.identity.segmentation)))

    # -- commands ---------------------------------------------------------------------------------------------

    def ingestor(self, store: Store, params: SegmentParams) -> Ingestor:
        return Ingestor(store, self.model, self.embedder, params, self.threads)

    def answerer(self) -> TextModeAnswerer:
        if self._answerer is None:
            n_ctx = min(ANSWER_CONTEXT, self.model.info.n_ctx_train)
            self._answerer = TextModeAnswerer(self.model, n_ctx, self.threads)
        return self._answerer

    def retrieve(self, store: Store, question: str, k: int, neighbours: int = 1) -> list[RetrievedEvent]:
        if k < 1:
            raise EpiError("-k must be at least 1")
        query = self.embedder.embed_query(question)
        budget = min(EVIDENCE_BUDGET, min(ANSWER_CONTEXT, self.model.info.n_ctx_train) - ANSWER_TOKENS - 768)
        return retrieve(store, query, question, k, neighbours, token_budget=budget)

    def ask(
        self,
        store: Store,
        question: str,
        k: int = 3,
        mode: str = "text",
        history: list[dict[str, str]] | None = None,
        neighbours: int = 1,
        should_stop: Callable[[], bool] | None = None,
    ) -> tuple[AskResult, Iterator[str]]:
        """Retrieve now; return the result (filled in as the stream is consumed) and the answer stream."""
        if mode not in MODES:
            raise EpiError(f"unknown mode {mode!r}: use text or kv")
        if mode == "kv":
            raise EpiError("kv mode needs stored KV blocks, which this version of epi does not write yet; "
                           "use --mode text")
        if not question.strip():
            raise EpiError("the question is empty")
        started = time.perf_counter()
        retrieved = self.retrieve(store, question, k, neighbours)
        answer = Answer()
        answer.timings.retrieve_s = time.perf_counter() - started
        result = AskResult(question, mode, retrieved, answer)
        messages = build_messages(question, retrieved, history)
        stream = self.answerer().stream(messages, started, answer, should_stop=should_stop)
        return result, stream

    def close(self) -> None:
        if self._answerer is not None:
            self._answerer.close()
