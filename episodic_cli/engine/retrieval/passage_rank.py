"""A third retrieval channel: the candidate events ranked by their best sentence.

Dense similarity and BM25 score an event as a whole, so the sentence that answers a question counts for less the
longer the event around it (the answer model's events are 215-293 tokens; a gold sentence in a longer event dropped
from the 4th or 5th hit to the 6th: docs/heldout.md, "Surprise measured at the clean cuts only"). Ranking the
candidates by their best sentence (the "MaxP" of passage-level document ranking) is blind to that length; the
sentences are scored as the evidence narrowing scores them (evidence.py), within the candidates together.
"""
from __future__ import annotations

from ...store import EventRecord
from .evidence import score_texts


def best_sentence_ranking(question: str, events: list[EventRecord]) -> list[tuple[int, float]]:
    """(event id, its best sentence's score) of the events with a sentence sharing a word with the question, best
    first (ties by id)."""
    best: dict[int, float] = {}
    for s in score_texts(question, [e.text for e in events]):
        if s.score > 0:
            best[s.index] = max(best.get(s.index, 0.0), s.score)
    return sorted(((events[i].id, v) for i, v in best.items()), key=lambda t: (-t[1], t[0]))
