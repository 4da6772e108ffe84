"""The extractive outline a chapter summary is asked to follow (engine/retrieval/outline.py): one sentence from each
stretch of the part, in order, the one most central to its stretch. No model."""
from episodic_cli.engine.retrieval.outline import key_sentences


def _stretch(topic: str, n: int) -> str:
    central = f"The {topic} was the talk of the whole village that week, and everyone spoke of the {topic}."
    others = [f"Somebody mentioned the {topic} again on day {i} of the visit to the old mill." for i in range(n)]
    return " ".join(others[:n // 2] + [central] + others[n // 2:])


def test_one_sentence_from_each_stretch_in_order():
    texts = [_stretch(t, 6) for t in ("harvest", "wedding", "storm")]
    outline = key_sentences(texts, n=3)
    assert len(outline) == 3
    assert ["harvest" in outline[0], "wedding" in outline[1], "storm" in outline[2]] == [True, True, True]


def test_short_lines_are_left_for_sentences_that_say_something():
    text = ('"No," said she. "Indeed." The captain sailed from the harbour at night with the whole crew aboard. '
            '"Yes." The captain and the crew reached the harbour of the island at dawn.')
    outline = key_sentences([text], n=1)
    assert outline and len(outline[0].split()) >= 6


def test_nothing_to_outline():
    assert key_sentences([]) == [] and key_sentences([""]) == []
