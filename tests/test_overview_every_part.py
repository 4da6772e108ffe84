"""A question about each part in turn (engine/retrieval/question_kind.py, `asks_each_part`) reads the map's
summaries in document order, every part as far as the budget goes; other overview questions read the parts that
match best. Real SQLite and hnswlib, seeded vectors; no model."""
from __future__ import annotations

import numpy as np
import pytest

from episodic_cli.engine.retrieval.question_kind import QuestionKind, asks_each_part, classify
from episodic_cli.engine.retrieval.scope import package_globs, parse
from episodic_cli.engine.retrieval.summary_sources import overview
from episodic_cli.store import Store
from episodic_cli.store.summaries import DOCUMENT, PART, SummaryRecord, document_key, part_key
from test_store import IDENTITY, make_doc, unit


@pytest.mark.parametrize("question", [
    "What does each chapter cover?",
    "What is each module of this package for?",
    "Give me a one-line summary of every chapter.",
    "Briefly, what is each section of the manual about?",
    "Which module does what?",
    "Go through the chapters one by one.",
    "Tell me about each chapter.",
    "List the chapters and what happens in them.",
    "What happens in each of the first six chapters?",
    "What is in every file of the tenacity package?",  # a package named: its files' summaries
    "What does each section of the manual cover?",
    "What are the main parts of the guide, and what does each one deal with?",
])
def test_each_part_in_turn_reads_the_map(question):
    assert asks_each_part(question) and classify(question) is QuestionKind.OVERVIEW


@pytest.mark.parametrize("question, kind", [
    ("What does bzip2 do with each file?", QuestionKind.LOOKUP),  # the files are the object, not the subject
    ("List the files that import os.", QuestionKind.LOOKUP),
    ("Does every file need a licence header?", QuestionKind.LOOKUP),
    ("What does bzip2 do with each of the files?", QuestionKind.LOOKUP),
    ("Summarise each section of chapter 3.", QuestionKind.WHOLE),  # a part is named: read it whole
    ("What does each section of chapter 3 cover?", QuestionKind.WHOLE),
    ("Go through the sections of chapter 9 one by one.", QuestionKind.WHOLE),
    ("Walk me through the sections of chapter 4.", QuestionKind.WHOLE),
    ("Give a one-line description of every section in chapter 13.", QuestionKind.WHOLE),
    ("Describe the section on memory.", QuestionKind.EXPLAIN),  # one section, found by search
    ("What does each option do?", QuestionKind.EXPLAIN),  # options are not parts of a document
])
def test_parts_that_are_not_asked_about_in_turn(question, kind):
    assert classify(question) is kind


def test_a_named_package_stands_for_every_file_under_it():
    import fnmatch

    globs = package_globs(parse("What is in every file of the tenacity package?").files)
    assert any(fnmatch.fnmatchcase("tenacity/asyncio/retry.py", g) for g in globs)
    assert not any(fnmatch.fnmatchcase("dotenv/main.py", g) for g in globs)


def test_one_by_one_names_no_chapter_one():
    assert parse("Go through the chapters one by one").chapters == []
    assert parse("What happens in chapter one?").chapters == ["1"]


def test_every_part_comes_in_document_order_within_the_budget(tmp_path):
    rng = np.random.default_rng(5)
    st = Store.create_or_open(tmp_path / "s", IDENTITY)
    doc, events = make_doc("book.txt", [f"passage {i}" for i in range(6)], rng)
    doc = st.replace_document(doc, events)
    vecs = unit(rng, 7)
    shelf = st.summaries()
    shelf.put(SummaryRecord(level=DOCUMENT, key=document_key(doc.id), label="book.txt", text="A book in three parts.",
                            model="m", content_sha256=doc.content_sha256, n_tokens=60, document_id=doc.id,
                            first_ordinal=0, last_ordinal=5, embedding=vecs[6]))
    # Written out of order, so that neither the insertion order nor the ids give the document's order.
    for n in (3, 1, 2):
        shelf.put(SummaryRecord(level=PART, key=part_key(doc.id, [["chapter", str(n), ""]]), label=f"ch. {n}",
                                text=f"What happens in chapter {n}.", model="m", content_sha256=doc.content_sha256,
                                n_tokens=20, document_id=doc.id, first_ordinal=2 * (n - 1), last_ordinal=2 * n - 1,
                                embedding=vecs[n]))
    query = vecs[2]  # most like chapter 2
    every = overview(st, query, "what does each chapter cover", 10_000, every_part=True)
    assert [s.label for s in every] == ["book.txt", "ch. 1", "ch. 2", "ch. 3"]
    best = overview(st, query, "what happens in chapter 2", 10_000)
    assert [s.label for s in best][:2] == ["book.txt", "ch. 2"]
    room = len("A book in three parts.") + len("book.txt") + 8 \
        + 2 * (len("What happens in chapter 1.") + len("ch. 1") + 8)  # the document and two chapters
    cut = overview(st, query, "what does each chapter cover", room, every_part=True)
    assert [s.label for s in cut] == ["book.txt", "ch. 1", "ch. 2"]
    st.close()
