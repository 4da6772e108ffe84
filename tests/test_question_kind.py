"""Which questions read a part whole, which read the map, which are lookups (engine/retrieval/question_kind.py). The
phrasings are the issue's and the research notes' examples, not the held-out sets' questions."""
import pytest

from episodic_cli.engine.retrieval.question_kind import QuestionKind, classify
from episodic_cli.engine.retrieval.scope import parse

WHOLE, OVERVIEW, LOOKUP = QuestionKind.WHOLE, QuestionKind.OVERVIEW, QuestionKind.LOOKUP


@pytest.mark.parametrize("question, kind", [
    ("summarise chapter 10", WHOLE),
    ("Summarize chapter three.", WHOLE),
    ("who betrayed whom in chapter 3?", WHOLE),
    ("what happens to Anna in chapter 12?", WHOLE),
    ("what is chapter 1 about?", WHOLE),
    ("What does the cache module do?", WHOLE),
    ("How does Cache.get work?", WHOLE),
    ("explain section 2.4", WHOLE),
    ("what is utils.py for?", WHOLE),
    ("What is this book about?", OVERVIEW),
    ("what does this library do?", OVERVIEW),
    ("Who are the main characters?", OVERVIEW),
    ("What is in this archive?", OVERVIEW),
    ("Give me a summary of the whole book", OVERVIEW),
    ("Which option shows the current mode?", LOOKUP),
    ("what does Cache.get return?", LOOKUP),
    ("On which page is the retry limit set?", LOOKUP),
    ("what is the default timeout in chapter 3?", LOOKUP),
    ("How big is it on disk?", LOOKUP),
])
def test_kinds(question, kind):
    assert classify(question) is kind


def test_a_module_named_in_words_is_a_file_scope():
    scope = parse("What does the platformdirs.unix module do?")
    assert "platformdirs/unix.*" in scope.files and "*platformdirs/unix/__init__.py" in scope.files
    assert parse("what does this module do?").files == []
