"""Evidence quotes (engine/retrieval/evidence.py): sentences with exact offsets, narrowing, support of an answer, and where a
quote is; then the real bundled model answering through Workspace.ask with its quotes checked against the store."""
from __future__ import annotations

import json

import pytest
from conftest import PDF_FACT, PDF_FACT_PAGE, PDF_QUESTION, TEXT_FACT, TEXT_FACT_LINE, workspace_for

from episodic_cli.api import answer_of
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.retrieval import evidence as E
from episodic_cli.engine.retrieval.retrieve import RetrievedEvent
from episodic_cli.store import DocumentRecord, EventRecord


def _retrieved(text: str, *, page: tuple[int, int] | None = None, line: int | None = None, id_: int = 1
               ) -> RetrievedEvent:
    n_lines = text.count("\n")
    ev = EventRecord(ordinal=0, token_start=0, token_end=len(text) // 4, char_start=0, char_end=len(text),
                     page_start=page[0] if page else None, page_end=page[1] if page else None,
                     line_start=line, line_end=None if line is None else line + n_lines,
                     surprise_mean=0.0, surprise_max=0.0, text=text, id=id_, document_id=1)
    doc = DocumentRecord(path="/d", display_path="d.txt", kind="text", content_sha256="0" * 64, n_tokens=1,
                         n_events=1, n_pages=None, n_lines=None, ingest_seconds=0.0, id=1)
    return RetrievedEvent(ev, doc, 1.0, 0)


PROSE = ("  The harbour was quiet.  Orla Venn hid the brass key under the ninth step.\n"
         "Nobody saw her do it!\n\nA new paragraph starts here. It has two sentences.\n")


def test_sentences_are_exact_slices_in_order():
    spans = E.split_sentences(PROSE)
    assert [s.text for s in spans] == ["The harbour was quiet.", "Orla Venn hid the brass key under the ninth step.",
                                       "Nobody saw her do it!", "A new paragraph starts here.",
                                       "It has two sentences."]
    for s in spans:
        assert PROSE[s.start:s.end] == s.text
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


def test_long_units_without_full_stops_are_cut_at_line_ends():
    code = "\n".join(f"    value_{i} = compute_{i}(argument_{i}, other_{i})" for i in range(40))
    spans = E.split_sentences(code)
    assert len(spans) > 1 and all(len(s.text) <= E.MAX_SENTENCE_CHARS for s in spans)
    assert all(code[s.start:s.end] == s.text for s in spans)


def test_words_split_identifiers():
    w = E.words("getAndroidApiLevel size_limit --no-time-strict X.680")
    for part in ("getandroidapilevel", "android", "api", "level", "size_limit", "size", "limit",
                 "no-time-strict", "strict", "x.680", "680"):
        assert part in w


def test_focus_prefers_the_sentence_with_the_rare_question_words():
    r = _retrieved(PROSE, line=1)
    best = E.focus("Where did Orla Venn hide the brass key?", [r], n=1)
    assert [s.span.text for s in best] == ["Orla Venn hid the brass key under the ninth step."]
    assert E.narrow("Where did Orla Venn hide the brass key?", [r], n=1) == [(0, [(best[0].span.start,
                                                                                   best[0].span.end)])]
    assert E.narrow("zebra xylophone?", [r]) == []  # no shared word: the answer reads everything


def test_support_quotes_the_answer_and_flags_unsupported_answers():
    r = _retrieved(PROSE, line=10)
    s = E.support("Where did Orla Venn hide the brass key?", "Under the ninth step.", [r])
    assert s.supported and s.coverage >= E.SUPPORT_THRESHOLD
    assert [e.quote for e in s.evidence] == ["Orla Venn hid the brass key under the ninth step."]
    e = s.evidence[0]
    assert r.event.text[e.start:e.end] == e.quote
    assert (e.line_start, e.line_end) == (10, 10)
    marked = {e.quote[a:b] for a, b in e.highlight}
    assert {"ninth", "step"} <= marked
    bad = E.support("Where did Orla Venn hide the brass key?", "In the lighthouse cellar, Captain Amsel said.", [r])
    assert not bad.supported


def test_lines_of_a_quote_count_newlines_from_the_events_first_character():
    text = "\n\n  first line\nsecond line.\nthird line is here.\nfourth."
    r = _retrieved(text, line=40)  # the event's line_start is the line of its first non-blank character
    k = text.index("third")
    assert E.locate(r, k, k + len("third line is here.")) == (None, None, 42, 42)
    k2 = text.index("second")
    assert E.locate(r, k2, text.index("fourth") + 7) == (None, None, 41, 43)


def test_pages_of_a_quote_are_bounded_by_the_page_breaks():
    # two pages joined by "\n\n" (sources._read_pdf); a paragraph break inside page 8 looks the same
    text = "Page seven ends here.\n\nPage eight begins.\n\nStill page eight."
    r = _retrieved(text, page=(7, 8))
    assert E.locate(r, 0, 21)[:2] == (7, 7)  # no blank line before its end: the event's first page
    k = text.index("Page eight")
    assert E.locate(r, k, k + 18)[:2] == (7, 8)  # one blank line either side: page 7 or 8, never claimed exactly
    k = text.index("Still")
    assert E.locate(r, k, len(text))[:2] == (8, 8)  # no blank line after it: the last page, exactly
    single = _retrieved("One page only.\n\nAnother paragraph.", page=(3, 3))
    assert E.locate(single, 16, 34)[:2] == (3, 3)


# -- the real model, through the workspace and the CLI ---------------------------------------------------------------

def _check_quotes(payload: dict, store_dir) -> None:
    from episodic_cli.store import Store

    with Store.open_existing(store_dir) as st:
        for e in payload["evidence"]:
            event = st.get_events([e["event_id"]])[0]
            assert e["quote"] and e["quote"] in event.text  # an exact substring of the stored event text
            assert set(e) >= {"event_id", "document", "page_start", "line_start", "line_end", "quote"}


def test_ask_json_has_evidence_that_are_exact_substrings(shared_ask, shared_store):
    assert shared_ask.exit_code == 0, shared_ask.stderr
    payload = json.loads(shared_ask.stdout)
    assert isinstance(payload["evidence"], list) and isinstance(payload["supported"], bool)
    _check_quotes(payload, shared_store.store_dir)
    for e in payload["evidence"]:
        if TEXT_FACT in e["quote"]:
            # The fact is planted inside a sentence of the licence: its quote may begin lines before the fact's line.
            assert e["line_end"] == TEXT_FACT_LINE
            assert e["line_start"] == TEXT_FACT_LINE - e["quote"].count("\n")


@pytest.mark.parametrize("mode", ["kv", "text"])
def test_narrowed_answer_reads_the_fact_sentence_and_quotes_its_page(engine, shared_store, mode):
    ws = workspace_for(engine, shared_store.store_dir)
    from episodic_cli.store import Store

    n = 0
    with Store.open_existing(shared_store.store_dir) as st:
        result, stream = ws.ask(st, PDF_QUESTION, AskOptions(k=2, mode=mode), should_stop=lambda: n >= 24)
        for _ in stream:
            n += 1
        assert result.focus, "the question shares rare words with the planted sentence"
        read = [result.retrieved[i].event.text[a:b] for i, spans in result.focus for a, b in spans]
        assert any(PDF_FACT in q for q in read)
        assert result.answer.prompt_tokens < 200  # a few sentences, not the retrieved events
        payload = answer_of(result).as_json()
        _check_quotes(payload, shared_store.store_dir)
        for e in payload["evidence"]:
            if PDF_FACT in e["quote"]:
                assert e["page_start"] == PDF_FACT_PAGE
        assert payload["supported"] == result.supported()
    ws.close()


def test_an_empty_answer_has_no_quotes_and_is_not_supported():
    from episodic_cli.engine.answer.text_mode import Answer
    from episodic_cli.engine.workspace import AskResult

    result = AskResult("Where did Orla Venn hide the brass key?", "kv", [_retrieved(PROSE, line=1)], Answer())
    assert result.support().evidence == [] and not result.support().supported
    assert answer_of(result).as_json()["evidence"] == [] and answer_of(result).supported is False


def test_an_answer_of_several_sentences_is_supported_by_half_of_its_sentences():
    from episodic_cli.engine.answer.text_mode import Answer
    from episodic_cli.engine.workspace import AskResult

    result = AskResult("Where did Orla Venn hide the brass key?", "kv", [_retrieved(PROSE, line=1)], Answer())
    result.answer.text = ("Orla Venn hid the brass key under the ninth step. The mayor of Dunmore sold it for gold "
                          "coins. Three sailors later drowned near the lighthouse.")
    assert [s.supported for s in result.sentence_support()] == [True, False, False]
    assert result.supported() is False and answer_of(result).supported is False
    # one sentence of two holds: supported, though the quotes hold few of the answer's words
    result.answer.text = ("Orla Venn hid the brass key under the ninth step. The mayor of Dunmore later sold the brass "
                          "key for forty gold coins to three drowned sailors.")
    assert [s.supported for s in result.sentence_support()] == [True, False]
    assert result.support().supported is False
    assert result.supported() is True and answer_of(result).supported is True


def test_a_result_checked_after_its_workspace_closed_does_not_load_the_model(tmp_path):
    from functools import partial

    from episodic_cli.engine.answer.text_mode import Answer
    from episodic_cli.engine.workspace import AskResult, Workspace

    warned: list[str] = []
    ws = Workspace(model="qwen-1.5b", store=str(tmp_path / "store"), warn=warned.append)
    asked_at = ws._closes
    ws.close()
    result = AskResult("Where did Orla Venn hide the brass key?", "kv", [_retrieved(PROSE, line=1)], Answer(),
                       check_claim=partial(ws._check_claim, asked_at))
    result.answer.text = "Orla Venn hid the brass key under the ninth step. Nobody saw her do it."
    sentences = result.verify()
    assert "model" not in ws.__dict__ and ws._claim_checker is None
    assert len(warned) == 1 and "not checked" in warned[0]
    # the sentences keep their quotes, and say that the model did not read them
    assert [(s.supported, s.checked) for s in sentences] == [(True, False), (True, False)]
    assert [s["checked"] for s in answer_of(result).as_json()["sentences"]] == [False, False]


# -- sentences that hold (issue 27 item 4) ------------------------------------------------------------------------

def test_sentences_keep_versions_abbreviations_initials_and_paths():
    text = ("Dr. Watson met Mr. Holmes at 5 p.m. on Baker St. in 1881, e.g. for tea. J. R. R. Tolkien wrote it in "
            "vol. 2 of the set. Set it to 3.5 for speed. See native/llama_cpp/layer-visibility.patch. It applies.")
    assert [s.text for s in E.split_sentences(text)] == [
        "Dr. Watson met Mr. Holmes at 5 p.m. on Baker St. in 1881, e.g. for tea.",
        "J. R. R. Tolkien wrote it in vol. 2 of the set.", "Set it to 3.5 for speed.",
        "See native/llama_cpp/layer-visibility.patch.", "It applies."]


def test_no_ends_a_sentence_unless_a_number_follows():
    """"no" was an abbreviation everywhere, so `He said "no." Then ...` stayed one sentence (issue 35); it abbreviates
    only before a number ("No. 5", "nos. 3-4")."""
    text = 'He said "no." Then he left. She said no. It rained. See No. 5 and nos. 3-4 of the list. Done.'
    assert [s.text for s in E.split_sentences(text)] == [
        'He said "no."', "Then he left.", "She said no.", "It rained.", "See No. 5 and nos. 3-4 of the list.",
        "Done."]


@pytest.mark.parametrize("forms", [["class", "classes"], ["use", "used", "uses", "using"],
                                   ["define", "defined", "defines"], ["stand", "stands"], ["retry", "retries"],
                                   ["cache", "caches", "caching"], ["betray", "betrayed", "betrays"]])
def test_the_forms_of_a_word_meet_when_stemmed(forms):
    """stem() cut "class" to "clas" but "classes" to "class", and left "use" "used" "uses" apart (issue 35): English
    Snowball meets them."""
    assert len({E.stem(w) for w in forms}) == 1, {w: E.stem(w) for w in forms}


def test_identifiers_keep_their_form_and_questions_meet_sentences_across_forms():
    for ident in ("max_retries", "x86", "asn1", "v2", "0.3.36"):
        assert E.stem(ident) == ident
    shared = E.content_words("Which classes does the loader use?") & E.content_words("Each class is used once.")
    assert shared == {E.stem("class"), E.stem("use")}


def test_a_long_wrapped_sentence_reaches_the_reader_whole():
    """README's install sentence (~400 characters over four lines) was cut at a line end before the version, so the
    sentence holding "5-7 minutes" never reached the model."""
    text = ("The first install compiles llama.cpp\nwith epi's patches (`native/llama_cpp/`: `layer-visibility.patch`, "
            "per-layer visibility for `--layered`, and\n`flash-decode.patch`, faster CPU flash-attention kernels for "
            "decode steps and prompts; the version reads\n`0.3.36+epi3`) in 5-7 minutes on 2 cores and keeps the wheel "
            "in epi's cache, so later installs reuse it. A\nllama-cpp-python 0.3.36 installed without the patch works.")
    first = E.split_sentences(text)[0]
    assert first.text.startswith("The first install") and first.text.endswith("later installs reuse it.")
    assert "`0.3.36+epi3`) in 5-7 minutes" in first.text


def test_pdf_line_end_hyphenation_is_joined_for_reading_with_exact_offsets():
    text = "It reads an ASN.1 iden-\ntifier from the DER stream. Next, it checks the well-known tag."
    spans = E.split_sentences(text)
    assert [s.text for s in spans] == ["It reads an ASN.1 identifier from the DER stream.",
                                       "Next, it checks the well-known tag."]
    assert text[spans[0].start:spans[0].end] == "It reads an ASN.1 iden-\ntifier from the DER stream."
    support = E.support("What does it read?", "an ASN.1 identifier", [_retrieved(text, page=(4, 4))])
    assert support.evidence[0].quote == "It reads an ASN.1 identifier from the DER stream."
    assert support.evidence[0].page == 4 and support.supported


def test_a_paraphrased_sentence_is_supported_by_meaning_and_an_unrelated_one_is_not(engine):
    """Evidence sentence by sentence: a summary's sentence in other words than its source is supported by the source
    sentence closest in meaning (the real MiniLM question encoder); a sentence about something else is not."""
    from episodic_cli.engine.retrieval.evidence import support_by_sentence
    from episodic_cli.engine.retrieval.retrieve import RetrievedEvent
    from episodic_cli.store import DocumentRecord, EventRecord

    text = ("The Reader class keeps the input string and the current position while it parses. "
            "Each binding pairs a key with its value and the original text.")
    event = EventRecord(ordinal=0, token_start=0, token_end=30, char_start=0, char_end=len(text), page_start=None,
                        page_end=None, line_start=1, line_end=2, surprise_mean=0.0, surprise_max=0.0, text=text, id=1)
    doc = DocumentRecord(path="p.py", display_path="p.py", kind="code", content_sha256="x", n_tokens=30, n_events=1,
                         n_pages=None, n_lines=2, ingest_seconds=0.0)
    answer = ("The parser tracks its position in the input string as it reads. "
              "The lighthouse keeper hid the brass key under the stair.")
    plain = support_by_sentence("What does the parser do?", answer, [RetrievedEvent(event, doc, 1.0, 0)])
    by_meaning = support_by_sentence("What does the parser do?", answer, [RetrievedEvent(event, doc, 1.0, 0)],
                                     embed=engine.embedder.embed_query)
    assert [s.supported for s in plain] == [False, False]
    assert [s.supported for s in by_meaning] == [True, False]
    assert "current position" in by_meaning[0].evidence[0].quote
