"""The second look (ask_run.second_look), with the real model on the shared store: a lookup whose answer no
sentence of the sources holds is answered again from the passages that match the question best, read as text; a
supported answer is left as it is."""
from __future__ import annotations

from conftest import TEXT_QUESTION, workspace_for

from episodic_cli.api import answer_of
from episodic_cli.engine.answer.records import SecondLook
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.budgets import SECOND_LOOK_TOKENS
from episodic_cli.engine.retrieval.evidence import support
from episodic_cli.store import Store


def _ask(ws, st, question: str, **options):  # the second look is on by default
    result, stream = ws.ask(st, question, AskOptions(mode="kv", narrow=False, cold_seconds=None, **options))
    return result, list(stream)


def test_an_unsupported_answer_is_read_again_from_the_best_passages(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        # one token ("Il", of "Ilse") holds no word of the sources: no sentence supports it
        result, pieces = _ask(ws, st, TEXT_QUESTION, answer_tokens=1)
        assert sum(isinstance(p, SecondLook) for p in pieces) == 1
        at = next(i for i, p in enumerate(pieces) if isinstance(p, SecondLook))
        first, again = result.first_answer, result.answer
        assert first is not None and first.text == "".join(pieces[:at])
        assert not support(TEXT_QUESTION, first.text, result.retrieved).supported
        assert again.text == "".join(pieces[at + 1:]) and again.text
        # read again: the passages (within SECOND_LOOK_TOKENS) in place of the ~2k tokens of whole blocks
        assert again.prompt_tokens < first.prompt_tokens
        assert again.kv_loaded_tokens < first.kv_loaded_tokens
        assert answer_of(result).first_answer == first.text.strip()
        assert answer_of(result).text == again.text.strip()
        # the question's timings: its first token the first answer's, its end the second's
        assert again.timings.first_token_s == first.timings.first_token_s < first.timings.total_s < again.timings.total_s
        assert sum(r.n_tokens for r in result.retrieved) > SECOND_LOOK_TOKENS  # so the passages are a choice
    ws.close()


def test_a_supported_answer_is_kept_and_the_option_off_changes_nothing(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        result, pieces = _ask(ws, st, TEXT_QUESTION)
        assert "QUILLFEATHER" in result.answer.text  # the planted fact, found in the blocks
        assert result.support().supported
        assert result.first_answer is None and not any(isinstance(p, SecondLook) for p in pieces)
        off, pieces = _ask(ws, st, TEXT_QUESTION, answer_tokens=1, second_look=False)
        assert off.first_answer is None and not any(isinstance(p, SecondLook) for p in pieces)
    ws.close()


def test_no_second_look_when_it_would_read_the_same_events_whole(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        result, pieces = _ask(ws, st, TEXT_QUESTION, k=1, answer_tokens=1)
        assert sum(r.n_tokens for r in result.retrieved) <= SECOND_LOOK_TOKENS  # all of it fits the second look
        assert not result.support().supported
        assert result.first_answer is None and not any(isinstance(p, SecondLook) for p in pieces)
    ws.close()


def test_the_terminal_says_the_answer_is_read_again_and_keeps_only_the_new_one(monkeypatch):
    from rich.console import Console

    from episodic_cli import render

    monkeypatch.setattr(render, "out", Console(record=True, width=200))
    shown: list[str] = []
    text = render.stream_answer(iter(["It is ", "dw.", SecondLook(), "It is ", "d4w."]), shown)
    printed = render.out.export_text()
    assert printed.index("dw.") < printed.index("read again from the passages") < printed.index("d4w.")
    assert text == "".join(shown) == "It is d4w."  # what a chat keeps of the turn


def test_an_answer_of_several_sentences_is_judged_sentence_by_sentence(engine, shared_store):
    from episodic_cli.engine.answer.records import Answer
    from episodic_cli.engine.retrieval.evidence import readable, split_sentences
    from episodic_cli.engine.workspace import AskResult

    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        retrieved = ws.retrieve(st, TEXT_QUESTION, 5, 1)
    ws.close()
    # every longer sentence of the retrieved events, copied: each is in the sources, but two quotes cannot hold all
    # their words, so the whole-answer check alone would read this answer again
    copied = [readable(u.text).rstrip(".") + "." for r in retrieved for u in split_sentences(r.event.text)
              if len(u.text) > 60]
    result = AskResult(TEXT_QUESTION, "kv", retrieved, Answer(text=" ".join(copied)))
    assert not result.support().supported
    assert result.supported_by_words()
    invented = ["Zebras painted the lighthouse purple on Tuesday.", "Giraffes sang opera beneath frozen volcanoes."]
    result.answer.text = " ".join(copied[:1] + invented)  # one sentence of three held: less than half
    assert not result.supported_by_words()


def test_stopped_before_the_second_answer_began_keeps_the_first(monkeypatch):
    from rich.console import Console

    from episodic_cli import render

    monkeypatch.setattr(render, "out", Console(record=True, width=200))

    def stopped():
        yield "It is dw."
        yield SecondLook()
        raise KeyboardInterrupt  # Ctrl-C while the passages are read

    shown: list[str] = []
    try:
        render.stream_answer(stopped(), shown)
    except KeyboardInterrupt:
        pass
    assert "".join(shown) == "It is dw."  # what a chat keeps of the turn: the answer the user saw
