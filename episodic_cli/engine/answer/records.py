"""What every answerer fills in and hands back: the Answer, its Timings, the layered report, and the generation loop
they share (stream_into)."""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..llama.backend import LlamaSession
from .short_answer import likeliest

# After a short answer, one sentence: it ends at . ! ? before whitespace, or at a line end (a line break right after
# the span ends the answer: what follows is the model starting a new "Question:" of its own).
_SENTENCE_DONE_RE = re.compile(r"^[ \t]*\n|\S[^\n]*?[.!?]\s|\S[^\n]*\n")


@dataclass
class LayeredReport:
    """What the per-layer selection of one answer did (the `"layered"` object of `--json`)."""

    pool_blocks: int = 0
    pool_tokens: int = 0
    budget_tokens: int = 0
    lanes: int = 0  # runs of blocks sharing positions (1: the pool fits the answer context, laid out in order)
    visible_blocks: list[int] = field(default_factory=list)  # per layer
    visible_tokens: list[int] = field(default_factory=list)  # per layer
    load_s: float = 0.0  # putting the pool in the cache: stored blocks loaded, cold ones prepared from text
    probe_s: float = 0.0  # the question decoded with the anchors, and each layer's selection
    event_ids: list[int] = field(default_factory=list)  # the pool's events, in the order of `visible`'s columns
    visible: np.ndarray | None = None  # bool [n_layer, pool_blocks]

    def as_json(self) -> dict:
        return {"pool_blocks": self.pool_blocks, "pool_tokens": self.pool_tokens, "budget_tokens": self.budget_tokens,
                "lanes": self.lanes, "visible_blocks": self.visible_blocks, "visible_tokens": self.visible_tokens,
                "load_s": round(self.load_s, 4), "probe_s": round(self.probe_s, 4)}


class SecondLook(str):
    """The piece of an answer's stream that sets aside the answer before it: none of the sources' sentences held its
    own words, and the text after it is the answer read again from the passages that match the question best
    (ask_run.second_look). Its text is the blank line between the two."""

    def __new__(cls) -> "SecondLook":
        return super().__new__(cls, "\n\n")


@dataclass
class Timings:
    retrieve_s: float = 0.0
    prefill_s: float = 0.0
    first_token_s: float = 0.0
    total_s: float = 0.0
    progress_s: float | None = None  # to the first progress of events prepared from text (None: none were cold)

    def as_json(self) -> dict:
        return {k: None if v is None else round(v, 4) for k, v in self.__dict__.items()}


@dataclass
class Answer:
    text: str = ""
    prompt_tokens: int = 0    # tokens the answer context held before generation (decoded or loaded as KV)
    reused_tokens: int = 0    # of those, kept in the cache from the previous question (kv mode in chat)
    kv_loaded_tokens: int = 0     # kv mode: retrieved tokens loaded from stored KV blocks
    kv_prefilled_tokens: int = 0  # kv mode: retrieved tokens prefilled from text (cold events, then kept if room)
    layered: LayeredReport | None = None  # --layered: what each layer's selection did (answer/layered.py)
    short: str | None = None  # the evidence span the answer starts with (short_answer.py); None: free answer
    timings: Timings = field(default_factory=Timings)


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
