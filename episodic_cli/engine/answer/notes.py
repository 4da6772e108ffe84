"""Notes, then the answer (map-reduce) for a question about a part as a whole: the answer model reads the part in
chunks from their KV blocks and writes notes on each, focused on the question (who does what to whom, the steps and
conditions), then answers from its notes alone. A small model read a whole chapter at once and mixed up who did what
(issue 38's calibration); each chunk is a lookup-sized context, where it reads well. Measured against plain whole
reading in docs/heldout.md, "Questions about the whole".
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ...store import EventRecord
from ..prompt import notes_request
from ..retrieval.retrieve import RetrievedEvent
from .records import Answer

NOTE_ID_BASE = -(1 << 40)  # notes' stand-in events sit far below summaries' (-summary id) and events' (>0) ids


def chunks(events: list[RetrievedEvent], size: int) -> list[list[RetrievedEvent]]:
    """`events` in order, cut into runs of about `size` tokens (an event is never split; the last run may be short
    and is then joined to the one before when both together stay under 1.5 `size`)."""
    runs: list[list[RetrievedEvent]] = []
    n = 0
    for r in events:
        if not runs or (n + r.n_tokens > size and runs[-1]):
            runs.append([])
            n = 0
        runs[-1].append(r)
        n += r.n_tokens
    if len(runs) > 1 and sum(r.n_tokens for r in runs[-1]) + sum(r.n_tokens for r in runs[-2]) <= size * 3 // 2:
        tail = runs.pop()
        runs[-1] += tail
    return runs


def is_empty_note(text: str) -> bool:
    """A chunk with nothing on the question (the model says so in a few words): left out of the answer's sources."""
    words = text.lower().strip(" .\n").split()
    return not words or (len(words) <= 6 and ("nothing" in words or "none" in words or "no" in words[:1]))


class NoteTaker:
    """Writes question-focused notes on chunks of a part with `answerer` (kv mode: each chunk from its blocks)."""

    def __init__(self, answerer, chunk_tokens: int, note_tokens: int):
        self.answerer = answerer
        self.chunk_tokens = chunk_tokens
        self.note_tokens = note_tokens

    def notes(self, question: str, events: list[RetrievedEvent], code: bool,
              should_stop: Callable[[], bool] | None = None) -> list[tuple[list[RetrievedEvent], str]]:
        """(chunk, its note) for each chunk of `events` (summaries standing in for unread parts are passed through as
        their own text: they are notes already)."""
        out = []
        runs = chunks(events, self.chunk_tokens)
        for i, run in enumerate(runs):
            if should_stop is not None and should_stop():
                break
            own = [r for r in run if r.summary is None]
            text = " ".join(r.event.text for r in run if r.summary is not None)
            if own:
                answer = Answer()
                request = notes_request(question, i + 1, len(runs), code)
                for _ in self.answerer.stream(request, own, None, time.perf_counter(), answer,
                                              max_tokens=self.note_tokens, should_stop=should_stop):
                    pass
                text = (text + " " + answer.text.strip()).strip()
            out.append((run, text))
        return out


def note_sources(notes: list[tuple[list[RetrievedEvent], str]]) -> tuple[list[RetrievedEvent], dict[int, str]]:
    """The notes as the answer's sources: one stand-in event each (read as text in its place: kv mode's excerpts),
    and {stand-in id: "Notes on part i of n: ..."}. Notes that found nothing are left out (all of them, if every
    note is empty: the answer then says the part does not say)."""
    kept = [(run, text) for run, text in notes if not is_empty_note(text)]
    sources, excerpts = [], {}
    for i, (run, text) in enumerate(kept):
        first = run[0]
        event_id = NOTE_ID_BASE - i
        event = EventRecord(ordinal=first.event.ordinal, token_start=0, token_end=max(1, len(text) // 4),
                            char_start=event_id, char_end=-1, page_start=first.event.page_start,
                            page_end=run[-1].event.page_end, line_start=first.event.line_start,
                            line_end=run[-1].event.line_end, surprise_mean=0.0, surprise_max=0.0, text=text,
                            id=event_id, document_id=first.document.id)
        sources.append(RetrievedEvent(event, first.document, None, None))
        excerpts[event_id] = f"Notes on part {i + 1} of {len(kept)}: {text}"
    return sources, excerpts


def stream_notes_answer(answerer, request: str, notes: list[tuple[list[RetrievedEvent], str]],
                        history, started: float, answer: Answer, max_tokens: int,
                        should_stop: Callable[[], bool] | None) -> Iterator[str]:
    sources, excerpts = note_sources(notes)
    yield from answerer.stream(request, sources, history, started, answer, max_tokens=max_tokens,
                               should_stop=should_stop, excerpts=excerpts)
