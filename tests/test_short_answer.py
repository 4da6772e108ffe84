"""The short answer: answer-shaped spans of the evidence, scored in parallel sequences by the real bundled model.

`branch_surprise` must give what decoding each span alone after the prompt gives (same cache, same positions), and
leave the cache as it found it; the answer must start with the chosen span and stay one sentence after it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import llama_cpp as L
from conftest import TEXT_FACT, TEXT_QUESTION, workspace_for
from episodic_cli.engine.answer.records import Answer, stream_into
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.llama.backend import LlamaSession
from episodic_cli.engine.answer.short_answer import SPAN_SEQUENCES, answer_spans, asks_for_a_fact, likeliest
from episodic_cli.store import Store


@pytest.mark.parametrize("question, fact", [
    ("Which option shows the mode?", True),
    ("In chapter 2, what did Mara give Tobias?", True),
    ("who betrayed whom in chapter 3?", True),
    ("How many pages does the manual have?", True),
    ("Of which type is inode/mount-point a subclass?", True),
    ("and where did she go then?", True),
    ("How do I install it?", False),
    ("Why does the build fail?", False),
    ("Explain the cache layout.", False),
])
def test_a_question_asks_for_a_fact_by_its_first_words(question, fact):
    assert asks_for_a_fact(question) is fact


def test_answer_spans_are_answer_shaped_words_the_question_lacks():
    quotes = ['Set the \'showmode\' option or pass --no-time-strict; see fnmatch(3) and libtasn1.h.',
              "The codename chosen by Ilse Marrow is QUILLFEATHER-42, says San Francisco. The value is 0x100 "
              "(https://example.org/x/1). Call asn1_der_decoding(ctx"]
    spans = answer_spans(quotes, "Which option did Ilse Marrow set?")
    assert spans[:1] == ["showmode"]  # quoted words first, then words in reading order
    for want in ("--no-time-strict", "fnmatch(3)", "libtasn1.h", "QUILLFEATHER-42", "San Francisco", "0x100",
                 "asn1_der_decoding"):
        assert want in spans, (want, spans)
    assert "Ilse Marrow" not in spans  # the question holds it: not an answer
    assert not any(s.startswith("http") for s in spans)
    assert "The" not in " ".join(spans).split()  # a sentence's first word is not part of a name
    assert len(spans) == len({s.lower() for s in spans})


def _prompt(session: LlamaSession, text: str) -> int:
    tokens = session.model.tokenize(text, special=False)
    session.clear()
    return session.prefill(tokens)


def test_branches_score_as_each_span_decoded_alone(bundled_model):
    session = LlamaSession(bundled_model, n_ctx=512, n_seq_max=SPAN_SEQUENCES)
    try:
        spans = [bundled_model.tokenize(s) for s in ("QUILLFEATHER-42", "the harbour", "0x100", "a")]
        pos = _prompt(session, "The archive codename is QUILLFEATHER-42. The codename is")
        together = session.branch_surprise(pos, spans)
        # nothing left behind: sequence 0 ends where it did, no branch sequence holds a cell
        assert L.llama_memory_seq_pos_max(session.memory, 0) == pos - 1
        assert all(L.llama_memory_seq_pos_max(session.memory, j) == -1 for j in range(1, len(spans) + 1))
        for tokens, got in zip(spans, together):
            pos = _prompt(session, "The archive codename is QUILLFEATHER-42. The codename is")
            want = []
            for i, t in enumerate(tokens):
                logits = session.last_logits().astype(np.float64)
                want.append(np.log(np.exp(logits - logits.max()).sum()) + logits.max() - logits[t])
                session.decode(np.array([t], dtype=np.int32), pos + i)
            # one batch against one token at a time: the same cells and positions, but llama.cpp's CPU matmul takes
            # another kernel path for a batch than for one row (F16 products summed in another order): measured up
            # to 0.005 nats apart, so the tolerance is 0.01 nats (a span's mean differs from the next by far more)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-2)
        assert together[0].mean() < together[1].mean()  # the copied codename is likelier than a nearby phrase
    finally:
        session.close()


def test_the_answer_starts_with_the_likeliest_span_then_one_sentence(bundled_model):
    session = LlamaSession(bundled_model, n_ctx=512, n_seq_max=SPAN_SEQUENCES)
    try:
        pos = _prompt(session, f"{TEXT_FACT} The harbour master sold a barrel of herring.\nQ: {TEXT_QUESTION}\nA:")
        spans = answer_spans([TEXT_FACT], TEXT_QUESTION)
        assert "QUILLFEATHER-42" in spans
        answer = Answer()
        pieces = list(stream_into(answer, session, pos, 0.0, 64, None, spans))
        assert answer.short in spans and pieces[0] == answer.short and answer.text.startswith(answer.short)
        rest = answer.text[len(answer.short):]
        assert rest.count("\n") <= 1 and len(rest) < 400  # one sentence after the span, not a 64-token ramble
        assert answer.timings.first_token_s > 0
        # a session with no sequence to spare scores nothing: the answer is the model's own
        single = LlamaSession(bundled_model, n_ctx=256, n_seq_max=1)
        try:
            assert likeliest(single, _prompt(single, TEXT_FACT), spans) is None
        finally:
            single.close()
        # with nothing to score, the answer is the model's own
        pos = _prompt(session, f"{TEXT_FACT}\nQ: {TEXT_QUESTION}\nA:")
        free = Answer()
        list(stream_into(free, session, pos, 0.0, 16, None, None))
        assert free.short is None and free.text
    finally:
        session.close()


def test_ask_leads_with_a_span_only_for_fact_questions(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        for mode in ("text", "kv"):
            options = AskOptions(k=1, neighbours=0, mode=mode)
            result, stream = ws.ask(st, TEXT_QUESTION, options)
            list(stream)
            assert result.answer.short and result.answer.text.startswith(result.answer.short), mode
            assert result.focus and any(result.answer.short in result.retrieved[i].event.text
                                        for i, _ in result.focus)
            result, stream = ws.ask(st, TEXT_QUESTION, replace(options, short=False))
            list(stream)
            assert result.answer.short is None
            result, stream = ws.ask(st, "Explain what Ilse Marrow chose for the archive.", options)
            list(stream)
            assert result.answer.short is None  # not a question asking for a fact
    # A chat follow-up: retrieval and narrowing search with the previous question too, the model reads the user's
    # own words (and its span list leaves out only the words of those)
    with Store.open_existing(shared_store.store_dir) as st:
        result, stream = ws.ask(st, "and which codename?", AskOptions(k=1, neighbours=0, mode="kv"),
                                search=f"{TEXT_QUESTION} and which codename?")
        list(stream)
    assert result.question == "and which codename?"
    assert any(TEXT_FACT in result.retrieved[i].event.text for i, _ in result.focus)
    assert result.answer.short and result.answer.text.startswith(result.answer.short)
