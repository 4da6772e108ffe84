"""What a question reads of the retrieved events whose KV blocks the answer model does not have yet (cold events),
when reading them all from text would take longer than the question may (`--cold-seconds`).

Preparing a cold event costs its tokens at the machine's prefill rate (~60 tokens/s for the 1.5B model on 2 cores),
so 10 seconds read about 600 of the ~3,000 retrieved tokens. The room goes to passages: each sentence that matches
the question (engine/retrieval/evidence.py's scores, over all the cold events at once) with the sentences around it,
the best first, wherever they lie; then, while room is left, the most relevant events are read whole instead. A
sentence alone often lacks what makes its fact usable (the subject, the table it belongs to), and retrieval's best
hit is often not the event that holds the answer; docs/heldout.md, "Cold answers", has the measurements.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .evidence import readable, score_sentences, split_sentences
from .retrieve import RetrievedEvent

# Sentences read on each side of a matching one (docs/heldout.md, "Cold answers").
PASSAGE_RADIUS = 1
EXCERPT_GAP = " … "  # between two passages of one event that do not touch


@dataclass
class ColdReading:
    """Indices into the retrieved list: those read whole, those read as passages (with the character spans read, in
    order), and those left out."""

    whole: set[int] = field(default_factory=set)
    passages: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    left: set[int] = field(default_factory=set)

    def excerpt(self, r: RetrievedEvent, i: int) -> str:
        """The text read of event `i` in place of the whole (its passages in reading order)."""
        return _excerpt_text(r, self.passages[i])

    def applied(self, retrieved: list[RetrievedEvent]
                ) -> tuple[list[RetrievedEvent], list[RetrievedEvent], dict[int, str]]:
        """(read, left out, {event id: its passages' text, read instead of the whole event}) of `retrieved`, the
        list this reading was chosen from."""
        return ([r for i, r in enumerate(retrieved) if i not in self.left], [retrieved[i] for i in sorted(self.left)],
                {retrieved[i].event.id: self.excerpt(retrieved[i], i) for i in self.passages})


def _excerpt_text(r: RetrievedEvent, spans: list[tuple[int, int]]) -> str:
    return EXCERPT_GAP.join(readable(r.event.text[a:b]) for a, b in spans)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def choose(question: str, retrieved: list[RetrievedEvent], cold: list[int], room: int,
           tokens_of: Callable[[str], int], radius: int = PASSAGE_RADIUS) -> ColdReading:
    """What to read of the cold events (`cold`: indices into `retrieved`, which is in ascending relevance, the best
    hit last) within `room` tokens. When nothing fits and the best hit is cold, it is read whole: an answer reads
    something."""
    reading = ColdReading()
    by_relevance = sorted(cold, reverse=True)  # the best first
    events = [retrieved[i] for i in by_relevance]
    sentences = {j: split_sentences(r.event.text) for j, r in enumerate(events)}
    position = {j: {u.start: n for n, u in enumerate(units)} for j, units in sentences.items()}
    scored = [s for s in score_sentences(question, events) if s.score > 0]
    scored.sort(key=lambda s: (-s.score, s.index, s.span.start))  # ties: the more relevant event, then reading order
    cost: dict[int, int] = {}  # tokens of each event's excerpt so far
    for s in scored:
        units = sentences[s.index]
        at = position[s.index][s.span.start]
        lo, hi = units[max(at - radius, 0)], units[min(at + radius, len(units) - 1)]
        i = by_relevance[s.index]
        spans = _merged(reading.passages.get(i, []) + [(lo.start, hi.end)])
        if spans == reading.passages.get(i):
            continue
        r = retrieved[i]
        n = tokens_of(_excerpt_text(r, spans))
        if n >= r.n_tokens or n - cost.get(i, 0) > room:
            continue
        room -= n - cost.get(i, 0)
        cost[i] = n
        reading.passages[i] = spans
    for i in by_relevance:
        extra = retrieved[i].n_tokens - cost.get(i, 0)
        if extra <= room:
            reading.whole.add(i)
            room -= extra
            reading.passages.pop(i, None)
    if not reading.whole and not reading.passages and by_relevance and by_relevance[0] == len(retrieved) - 1:
        reading.whole.add(by_relevance[0])
    reading.left = {i for i in cold if i not in reading.whole and i not in reading.passages}
    return reading
