"""Answering from retrieved events in text mode: build the chat prompt, prefill it, stream the answer.

The question goes last, after the evidence, and the instructions ask the model to copy names and numbers
verbatim: small models otherwise paraphrase the one detail the user asked for.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import EpiError
from ..llama.backend import LlamaModel, LlamaSession
from ..retrieval.retrieve import RetrievedEvent
from .short_answer import SPAN_SEQUENCES, likeliest
from ..documents.structure import describe as describe_section

if TYPE_CHECKING:
    from .layered import LayeredReport

SYSTEM_PROMPT = (
    "You answer questions about the user's documents. Use only the numbered sources. "
    "Copy names, numbers and identifiers exactly as they are written in the sources. "
    "Answer briefly. If the sources do not contain the answer, say that the documents do not say."
)
ANSWER_TOKENS = 256
QUESTION_ROOM = 768  # positions an answer context keeps for the question part (and chat history) after the sources
# After a short answer, one sentence: it ends at . ! ? before whitespace, or at a line end (a line break right after
# the span ends the answer: what follows is the model starting a new "Question:" of its own).
_SENTENCE_DONE_RE = re.compile(r"^[ \t]*\n|\S[^\n]*?[.!?]\s|\S[^\n]*\n")
# The longest question epi takes, in characters. Retrieval embeds at most 256 word pieces of it (MiniLM's limit,
# about 1,000 characters of English) and the model prefills all of it before the first answer token: at ~4
# characters a token, 2,000 characters are ~500 tokens, about a second on 2 CPU cores; 20,000 took ~23 s. A longer
# question is refused, not cut: a pasted page usually ends with the actual question, which a cut would drop.
MAX_QUESTION_CHARS = 2000


def citation(r: RetrievedEvent, structure: bool = True) -> str:
    """`book.pdf, ch. 3 "The Betrayal", pp. 41-42`, `src/util.py, class Cache, def get, lines 80-112`; the place in
    the document's structure only where the event records one (and `structure`)."""
    ev = r.event
    head = r.document.display_path
    place = describe_section(r.section) if structure else None
    if place:
        head = f"{head}, {place}"
    if ev.page_start is not None:
        pages = f"p. {ev.page_start}" if ev.page_start == ev.page_end else f"pp. {ev.page_start}-{ev.page_end}"
        return f"{head}, {pages}"
    if ev.line_start is not None:
        return f"{head}, lines {ev.line_start}-{ev.line_end}"
    return head


def numbered_sources(sources: list[tuple[str, str]]) -> str:
    """Text mode's evidence: "[i] heading" then the text, for each (heading, text). The evaluation's baselines
    lay out the sources they pick the same way."""
    return "\n\n".join(f"[{i}] {heading}\n{text.strip()}" for i, (heading, text) in enumerate(sources, 1))


def sources_turn(question: str, sources: list[tuple[str, str]]) -> str:
    """The user turn of a text-mode prompt: the numbered sources, then the question last."""
    return f"Sources:\n\n{numbered_sources(sources)}\n\nQuestion: {question}"


def check_question_length(question: str) -> None:
    """Refuses, before anything loads, a question that is empty or too long to be a question."""
    if not question.strip():
        raise EpiError("the question is empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise EpiError(f"the question is {len(question):,} characters long; epi takes at most {MAX_QUESTION_CHARS:,} "
                       "(retrieval reads about the first 1,000): ask it in fewer words")


def clean_question(question: str) -> str:
    """No control characters in prompts (kv mode marks block places with one)."""
    return "".join(ch for ch in question if ch >= " " or ch in "\n\t")


def build_messages(question: str, retrieved: list[RetrievedEvent], history: list[dict[str, str]] | None = None
                   ) -> list[dict[str, str]]:
    """Text mode's prompt: system rules, earlier turns (chat), then one user turn holding the numbered sources and,
    last, the question."""
    question = clean_question(question)
    # The prompt's headings stay document + pages/lines (as kv mode's blocks carry none): structure is for the reader.
    user = sources_turn(question, [(citation(r, structure=False), r.event.text) for r in retrieved]) if retrieved else (
        f"(No sources were found in the archive.)\n\nQuestion: {question}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, *(history or []), {"role": "user", "content": user}]


def focused_messages(question: str, quotes: list[str], history: list[dict[str, str]] | None = None
                     ) -> list[dict[str, str]]:
    """Text mode's prompt when the evidence is narrowed to a few sentences (engine/retrieval/evidence.py): the sentences
    numbered without headings (a small model copies a heading's path instead of the fact), then the question."""
    question = clean_question(question)
    listed = "\n\n".join(f"[{i}] {q.strip()}" for i, q in enumerate(quotes, 1))
    user = f"Sources:\n\n{listed}\n\nQuestion: {question}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, *(history or []), {"role": "user", "content": user}]


@dataclass
class Timings:
    retrieve_s: float = 0.0
    prefill_s: float = 0.0
    first_token_s: float = 0.0
    total_s: float = 0.0

    def as_json(self) -> dict:
        return {k: round(v, 4) for k, v in self.__dict__.items()}


@dataclass
class Answer:
    text: str = ""
    prompt_tokens: int = 0    # tokens the answer context held before generation (decoded or loaded as KV)
    reused_tokens: int = 0    # of those, kept in the cache from the previous question (kv mode in chat)
    kv_loaded_tokens: int = 0     # kv mode: retrieved tokens loaded from stored KV blocks
    kv_prefilled_tokens: int = 0  # kv mode: retrieved tokens prefilled from text (cold events, then kept if room)
    layered: LayeredReport | None = None  # --layered: what each layer's block selection did (engine/answer/layered.py)
    short: str | None = None  # the evidence span the answer starts with (engine/answer/short_answer.py); None: free answer
    timings: Timings = field(default_factory=Timings)


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
            quotes = [r.event.text[a:b] for r, ss in zip(retrieved, spans) for a, b in ss]
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

    def close(self) -> None:
        self.session.close()


def stream_into(answer: Answer, session: LlamaSession, pos: int, started: float, max_tokens: int,
                should_stop: Callable[[], bool] | None, lead_spans: list[str] | None = None) -> Iterator[str]:
    """Generate from a prepared cache, appending to `answer` and timing the first token and the whole answer.
    `lead_spans`: the answer starts with the one the model finds likeliest, then goes on for one sentence."""
    first = True
    stop = should_stop
    lead = likeliest(session, pos, lead_spans) if lead_spans else None
    if lead is not None:
        answer.short = answer.text = lead.text
        answer.timings.first_token_s = time.perf_counter() - started
        first = False
        yield lead.text  # shown as soon as it is chosen; the sentence after it needs it in the cache first
        session.decode(lead.tokens, pos)  # as if the model had written it: the rest follows from it
        pos += len(lead.tokens)
        max_tokens -= len(lead.tokens)
        start = len(answer.text)

        def stop() -> bool:
            return bool(should_stop and should_stop()) or bool(_SENTENCE_DONE_RE.search(answer.text[start:]))
    for piece in session.generate(pos, max_tokens, stop):
        if first:
            answer.timings.first_token_s = time.perf_counter() - started
            first = False
        answer.text += piece
        yield piece
    answer.timings.total_s = time.perf_counter() - started
