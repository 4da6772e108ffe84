"""Answering from retrieved events in text mode: build the chat prompt, prefill it, stream the answer.

The question goes last, after the evidence, and the instructions ask the model to copy names and numbers
verbatim: small models otherwise paraphrase the one detail the user asked for.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np

from ..budgets import ANSWER_TOKENS
from ..llama.backend import LlamaModel, LlamaSession
from ..prompt import build_messages, focused_messages
from ..retrieval.evidence import readable
from ..retrieval.retrieve import RetrievedEvent
from .records import Answer, stream_into
from .short_answer import SPAN_SEQUENCES


class TextModeAnswerer:
    """Re-reads the retrieved events' text: the baseline and fallback of kv mode."""

    mode = "text"

    def __init__(self, model: LlamaModel, n_ctx: int, n_threads: int | None = None):
        self.model = model
        self.session = LlamaSession(model, n_ctx=n_ctx, n_threads=n_threads, n_seq_max=SPAN_SEQUENCES)

    def stream(self, question: str, retrieved: list[RetrievedEvent], history: list[dict[str, str]] | None,
               started: float, answer: Answer, max_tokens: int = ANSWER_TOKENS,
               should_stop: Callable[[], bool] | None = None, weights: list[float] | None = None,
               spans: list[list[tuple[int, int]]] | None = None, lead_spans: list[str] | None = None
               ) -> Iterator[str]:
        """Yield answer text pieces; fills `answer` (text, timings measured from `started`) as it goes.
        `weights` (EpMAN) only applies to KV blocks; text mode has none. `spans[i]`: the character spans of event i
        to read instead of its whole text (narrowed evidence). `lead_spans`: the answer starts with the likeliest of
        these (engine/answer/short_answer.py)."""
        if spans is None:
            messages = build_messages(question, retrieved, history)
        else:
            quotes = [readable(r.event.text[a:b]) for r, ss in zip(retrieved, spans) for a, b in ss]
            messages = focused_messages(question, quotes, history)
        tokens = self.model.tokenize(self.model.apply_chat_template(messages), special=True)
        room = self.session.n_ctx - max_tokens
        if len(tokens) > room:  # keep the start (system rules) and the end (question); evidence was budgeted
            tokens = np.concatenate([tokens[: room // 4], tokens[len(tokens) - (room - room // 4):]])
        answer.prompt_tokens = len(tokens)
        t0 = time.perf_counter()
        self.session.clear()
        pos = self.session.prefill(tokens)
        answer.timings.prefill_s = time.perf_counter() - t0
        yield from stream_into(answer, self.session, pos, started, max_tokens, should_stop, lead_spans)

    def reset(self) -> None:
        """Forget the last reading (each answer clears the context before it reads anyway)."""
        self.session.clear()

    def close(self) -> None:
        self.session.close()
