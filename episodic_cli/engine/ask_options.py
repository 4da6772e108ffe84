"""One question as every face asks it: `AskRequest`, the question, the conversation so far, and the choices it is
answered with (`AskOptions`: `epi ask`'s options, the scope `--doc` among them) and the layered pool's size. `epi ask`,
`epi chat`, the Python API and `epi mcp` each build one, and it refuses what cannot run in one line saying what to do
(a question too long or without words, a combination of options, a pool without --layered) before anything loads.
Variations: dataclasses.replace.

Each ask option's default is written here once: AskOptions' fields, and the constants below that a face names in its
own signature (a Typer option or an MCP tool needs its default spelt out there; tests/test_ask_options.py parses the
faces for a default written again). Not in the request, by design: what retrieval searches for when it is not the
question (a chat follow-up's rewrite), and the caller's stop signal; both are passed beside it. Plain engine module: no
model, no store.
"""
from __future__ import annotations

import string
from dataclasses import dataclass, field

from .budgets import (COLD_PREFILL_SECONDS, DEFAULT_K, LAYER_BUDGET, MAX_QUESTION_CHARS, POOL_TOKENS_RANGE,
                      SECOND_LOOK)
from .errors import EpiError
from .retrieval.question_kind import QuestionKind

__all__ = ["AskOptions", "AskRequest", "COLD_PREFILL_SECONDS", "DEFAULT_EPMAN", "DEFAULT_K", "DEFAULT_LAYERED",
           "DEFAULT_NEIGHBOURS", "DEFAULT_READ", "DEFAULT_SHORT", "MAX_QUESTION_CHARS", "MODES", "READ_CHOICES",
           "SECOND_LOOK", "check_pool", "check_question_length", "read_kind"]

MODES = ("text", "kv")
# `--read`: how much an answer reads; "auto" lets the question decide (engine/retrieval/question_kind.py)
READ_CHOICES = ("auto", "lookup", "whole", "overview")
DEFAULT_READ = "auto"
DEFAULT_NEIGHBOURS = 1
DEFAULT_SHORT = True
DEFAULT_LAYERED = False
DEFAULT_EPMAN = False


def check_question_length(question: str) -> None:
    """Refuses, before anything loads, a question that is empty, has no words ("???") or is too long to be one."""
    if not question.strip():
        raise EpiError("the question is empty")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a broken paste, an MCP client's bad JSON): no tokenizer takes it
        raise EpiError("the question holds characters that are not text (a lone surrogate); type it again") from None
    if all(ch in string.punctuation or ch.isspace() for ch in question):  # "???", "..."; an emoji is a word here
        raise EpiError(f"the question {question.strip()[:40]!r} has no words: ask it in words")
    if len(question) > MAX_QUESTION_CHARS:
        raise EpiError(f"the question is {len(question):,} characters long; epi takes at most {MAX_QUESTION_CHARS:,} "
                       "(retrieval reads about the first 1,000): ask it in fewer words")


def read_kind(read: str | QuestionKind | None) -> QuestionKind | None:
    """`--read` as AskOptions.kind takes it: None for "auto" (the question decides); a kind the engine names itself
    (bench/, tests) is taken as it is."""
    if isinstance(read, QuestionKind):
        return read
    if read is None or read == DEFAULT_READ:
        return None
    if read not in READ_CHOICES:
        raise EpiError(f"unknown read {read!r}: use {', '.join(READ_CHOICES)}")
    return QuestionKind(read)


@dataclass(frozen=True)
class AskOptions:
    """`k`: events found by similarity, before `neighbours` (adjacent events) are added around each hit.
    `mode`: "kv" loads the events' stored KV blocks, "text" re-reads their text (None: kv unless the store keeps no
    blocks, Workspace.default_mode). `docs`: globs on the documents' paths (`--doc`) retrieval is restricted to.
    `narrow`: read only the sentences that match the question best (None: as the model reads best,
    Workspace.narrows_by_default). `short`: a question asking for a fact is answered with the evidence span the model
    finds likeliest first (engine/answer/short_answer.py). `layered`: kv mode with per-layer block selection from a
    larger pool (engine/answer/layered.py). `epman`: kv mode scales each block's V rows by its episodic weight in
    [0.9, 1.0]. `cold_seconds`: kv mode reading whole events prefills at most what this machine reads in that time of
    the events the answer model has no block for yet; the least relevant are left out (None or 0: no limit).
    `kind`: how much to read (None: as the question asks, engine/retrieval/question_kind.py).
    `answer_tokens`: the answer stops after at most this many tokens (None, or more than the path's own limit:
    ANSWER_TOKENS for a lookup, WHOLE_ANSWER_TOKENS for a part read whole or the map). `second_look`: a lookup read
    from whole blocks whose answer no sentence of the sources holds is answered again from the passages that match
    the question best (ask_run.second_look).

    A `mode` of None is checked against the kv-only choices once the store fills it in (Workspace.resolve)."""

    k: int = DEFAULT_K
    mode: str | None = None
    neighbours: int = DEFAULT_NEIGHBOURS
    docs: tuple[str, ...] | None = None
    narrow: bool | None = None
    short: bool = DEFAULT_SHORT
    layered: bool = DEFAULT_LAYERED
    epman: bool = DEFAULT_EPMAN
    cold_seconds: float | None = COLD_PREFILL_SECONDS
    kind: QuestionKind | None = None
    answer_tokens: int | None = None
    second_look: bool = SECOND_LOOK

    def __post_init__(self) -> None:
        if self.docs is not None:
            # A list of globs is kept as a tuple, so that the record stays immutable; no glob at all means every
            # document, as None does.
            object.__setattr__(self, "docs", tuple(self.docs) or None)
        problem = self._problem()
        if problem is not None:
            raise EpiError(problem)

    def _problem(self) -> str | None:
        """What is wrong with this combination, in one line saying what to do (None: it can run)."""
        if self.k < 1:
            return "-k must be at least 1"
        if self.neighbours < 0:
            return "--neighbours must be 0 or more"
        if self.mode is not None and self.mode not in MODES:
            return f"unknown mode {self.mode!r}: use text or kv"
        if self.answer_tokens is not None and self.answer_tokens < 1:
            return "the answer's token limit must be at least 1"
        if self.cold_seconds is not None and self.cold_seconds < 0:
            return "--cold-seconds must be 0 (no limit) or more"
        if self.epman and self.mode == "text":
            return "--epman weights KV blocks, so it needs kv mode (a store ingested with KV blocks)"
        if self.layered and self.mode == "text":
            return "--layered selects KV blocks per layer, so it needs kv mode (a store with KV blocks)"
        if self.layered and self.narrow:
            return "--layered reads its pool's blocks whole (each layer picks its own); leave out --narrow"
        if (self.layered or self.epman) and self.kind not in (None, QuestionKind.LOOKUP):
            return (f"--{'layered' if self.layered else 'epman'} works on a lookup's retrieved blocks, not on "
                    f"--read {self.kind.value}; leave one of them out")
        return None


def check_pool(pool: int | None, layered: bool) -> None:
    """`--pool` (the layered pool's size in tokens): only with --layered, and within POOL_TOKENS_RANGE."""
    if pool is not None and not layered:
        raise EpiError("--pool sizes the pool of --layered answers; add --layered, or leave --pool out")
    low, high = POOL_TOKENS_RANGE
    if pool is not None and not low <= pool <= high:
        raise EpiError(f"--pool {pool}: a layered pool holds {low:,}-{high:,} tokens (each layer sees "
                       f"{LAYER_BUDGET:,} of them, so a smaller pool leaves nothing to choose); leave --pool out for "
                       "the default, what the answer context holds")


@dataclass(frozen=True)
class AskRequest:
    """`question`, asked after `history` (earlier {"role", "content"} turns, which the model reads), answered with
    `options`; `pool`: the layered pool's tokens (None: what the answer context holds), which the Workspace keeps as
    `layered_pool` since it sizes an answerer kept between questions. Checked as it is made."""

    question: str
    history: tuple[dict[str, str], ...] = ()
    options: AskOptions = field(default_factory=AskOptions)
    pool: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.question, str):
            raise EpiError(f"the question must be a string, not {type(self.question).__name__}")
        check_question_length(self.question)
        object.__setattr__(self, "history", tuple(self.history or ()))
        check_pool(self.pool, self.options.layered)

    @classmethod
    def build(cls, question: str, *, history=None, doc: str | list[str] | tuple[str, ...] | None = None,
              read: str | QuestionKind | None = None, pool: int | None = None, **choices) -> AskRequest:
        """A request from `epi ask`'s names, as the faces take them: `doc` a glob or globs (the scope), `read` one of
        READ_CHOICES (None: auto), `pool`, and the rest AskOptions' own fields (`narrow`, `cold_seconds`, ...)."""
        docs = [doc] if isinstance(doc, str) else doc
        return cls(question, history or (), AskOptions(docs=docs, kind=read_kind(read), **choices), pool)

    @property
    def turns(self) -> list[dict[str, str]] | None:
        """The conversation so far as the engine reads it (None: none)."""
        return list(self.history) or None
