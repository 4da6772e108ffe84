"""What a chat follow-up is searched as when the answer model's rewrite resolves nothing (engine/answer/condense.py).
The rewrite itself runs with the real model in tests/test_answer_model.py."""
from episodic_cli.engine.answer.condense import search_for

HISTORY = [{"role": "user", "content": "How do I stop retrying after 5 attempts?"},
           {"role": "assistant", "content": "Pass stop=stop_after_attempt(5) to @retry."}]


def test_a_rewrite_that_names_the_referent_is_searched():
    assert search_for(HISTORY, "And what does it raise then?", "What does stop_after_attempt(5) raise then?") == \
        "What does stop_after_attempt(5) raise then?"


def test_a_follow_up_given_back_unchanged_is_searched_after_the_last_question():
    follow = "And how do I combine that with a time limit?"
    for rewrite in (follow, "and how do I combine that with a time limit", ""):
        assert search_for(HISTORY, follow, rewrite) == f"How do I stop retrying after 5 attempts? {follow}"


def test_a_follow_up_that_points_back_to_nothing_stands_alone():
    assert search_for(HISTORY, "Which versions of Python are supported?", "") == \
        "Which versions of Python are supported?"
    assert search_for([], "Does it quote the value?", "") == "Does it quote the value?"
