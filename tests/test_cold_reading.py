"""What a question reads of its cold events within the room it has (engine/retrieval/cold_reading.py): passages
around the best matching sentences wherever they lie, then events whole while room is left."""
from __future__ import annotations

from episodic_cli.engine.retrieval import cold_reading
from episodic_cli.engine.retrieval.retrieve import RetrievedEvent
from episodic_cli.store import DocumentRecord, EventRecord


def tokens_of(text: str) -> int:
    return len(text.split())


def event(text: str, id_: int) -> RetrievedEvent:
    ev = EventRecord(ordinal=id_, token_start=0, token_end=tokens_of(text), char_start=0, char_end=len(text),
                     page_start=None, page_end=None, line_start=None, line_end=None, surprise_mean=0.0,
                     surprise_max=0.0, text=text, id=id_, document_id=1)
    doc = DocumentRecord(path="/d", display_path="d.txt", kind="text", content_sha256="0" * 64, n_tokens=1,
                         n_events=1, n_pages=None, n_lines=None, ingest_seconds=0.0, id=1)
    return RetrievedEvent(ev, doc, 1.0, 0)


FILLER = " ".join(f"Line {n} of the log says nothing of use here." for n in range(12))
# The answer sits in the less relevant event (the first in ascending relevance), in the middle of its text; the
# sentence before names what "it" is.
ANSWER_EVENT = (f"{FILLER} The harbour crane is old. It lifts at most forty tonnes of cargo. "
                f"The painters came in May. {FILLER}")
BEST_HIT = f"{FILLER} Cargo rules for the harbour are posted at the gate. {FILLER}"
QUESTION = "How many tonnes of cargo does the harbour crane lift?"


def test_the_best_matching_sentence_is_read_with_its_neighbours_wherever_it_lies():
    retrieved = [event(ANSWER_EVENT, 1), event(BEST_HIT, 2)]
    reading = cold_reading.choose(QUESTION, retrieved, [0, 1], 30, tokens_of)
    assert 0 in reading.passages and not reading.whole
    text = reading.excerpt(retrieved[0], 0)
    assert "The harbour crane is old. It lifts at most forty tonnes of cargo. The painters came in May." in text
    read = sum(tokens_of(reading.excerpt(retrieved[i], i)) for i in reading.passages)
    assert read <= 30


def test_radius_zero_reads_the_matching_sentences_alone():
    retrieved = [event(ANSWER_EVENT, 1), event(BEST_HIT, 2)]
    reading = cold_reading.choose(QUESTION, retrieved, [0, 1], 30, tokens_of, radius=0)
    # both sentences share words with the question; the painters' does not
    assert reading.excerpt(retrieved[0], 0) == "The harbour crane is old. It lifts at most forty tonnes of cargo."


def test_room_left_reads_the_most_relevant_event_whole_and_nothing_goes_over():
    retrieved = [event(ANSWER_EVENT, 1), event(BEST_HIT, 2)]
    best = retrieved[1].n_tokens
    reading = cold_reading.choose(QUESTION, retrieved, [0, 1], best + 40, tokens_of)
    assert reading.whole == {1} and 0 in reading.passages and not reading.left
    assert best + tokens_of(reading.excerpt(retrieved[0], 0)) <= best + 40


def test_only_cold_events_are_chosen_from_and_the_rest_is_left_out():
    retrieved = [event(ANSWER_EVENT, 1), event(FILLER, 3), event(BEST_HIT, 2)]
    reading = cold_reading.choose(QUESTION, retrieved, [0, 1], 30, tokens_of)
    assert 2 not in reading.whole | set(reading.passages) | reading.left  # hot: not cold_reading's to choose
    assert reading.left == {1}  # no sentence of it matches, and no room for it whole


def test_when_nothing_fits_the_cold_best_hit_is_read_whole():
    retrieved = [event(ANSWER_EVENT, 1), event(BEST_HIT, 2)]
    reading = cold_reading.choose(QUESTION, retrieved, [0, 1], 3, tokens_of)
    assert reading.whole == {1} and not reading.passages and reading.left == {0}


def test_passages_that_touch_merge_into_one_span():
    text = "Cargo one. Cargo two. Cargo three. " + FILLER
    retrieved = [event(text, 1)]
    reading = cold_reading.choose("cargo", retrieved, [0], 20, tokens_of)
    assert len(reading.passages[0]) == 1
    assert reading.excerpt(retrieved[0], 0).startswith("Cargo one. Cargo two. Cargo three.")
