"""Questions about the whole, run for real through the CLI with the bundled model: a chapter read whole in order,
the map written (and resumed without rewriting anything), an overview question answered from it and cited as
summaries, a follow-up with --continue rewritten for retrieval, the map removed with its document."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import prose_lines
from episodic_cli.app import app
from episodic_cli.engine.documents.structure import decode
from episodic_cli.store import Store

runner = CliRunner()

CHAPTERS = {1: "The Harbour", 2: "The Storm", 3: "The Return"}
FACT = "In the storm the miller Oskar Brandt betrayed his brother Tomas to the harbour guard."


def _book() -> str:
    parts = []
    for n, title in CHAPTERS.items():
        lines = prose_lines(seed=40 + n, n=40)
        if n == 2:
            lines.insert(20, FACT)
        parts.append(f"CHAPTER {n}\n{title}\n\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"


@pytest.fixture(scope="module")
def book_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole")
    book = root / "river-book.txt"
    book.write_text(_book(), encoding="utf-8")
    store = root / "store"
    result = runner.invoke(app, ["ingest", str(book), "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    return store, book


def _chapter_events(store, n: int) -> list[int]:
    with Store.open_existing(store) as st:
        (doc,) = st.documents()
        return [e.id for e in st.events_of(doc.id)
                if any(node[0] == "chapter" and node[1] == str(n) for node in (decode(e.section) or {}).get("path", []))]


def test_a_chapter_question_reads_the_whole_chapter_in_order(book_store):
    store, _ = book_store
    result = runner.invoke(app, ["ask", "Who betrayed whom in chapter 2?", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["kind"] == "whole"
    want = _chapter_events(store, 2)
    assert len(want) >= 2
    assert [s["event_id"] for s in answer["sources"]] == want  # all of it, in document order, nothing else
    assert answer["read"].startswith("read all of ch. 2") and "tokens" in answer["read"]
    assert all(set(s) >= {"sentence", "supported", "quotes"} for s in answer["sentences"])


def test_an_explanation_reads_the_section_its_best_passage_sits_in(book_store):
    store, _ = book_store
    result = runner.invoke(app, ["ask", "Explain how the miller Oskar Brandt betrayed his brother.", "--store",
                                 str(store), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["kind"] == "explain"
    assert set(_chapter_events(store, 2)) <= {s["event_id"] for s in answer["sources"]}


def test_a_lookup_still_reads_a_few_events(book_store):
    store, _ = book_store
    result = runner.invoke(app, ["ask", "Which brother did Oskar Brandt betray?", "--store", str(store), "--json"])
    answer = json.loads(result.stdout)
    assert answer["kind"] == "lookup" and answer["read"] is None


def test_continue_follows_up_the_last_answer(book_store, tmp_path):
    store, _ = book_store
    none_yet = runner.invoke(app, ["ask", "and then?", "--continue", "--store", str(store)])
    assert none_yet.exit_code == 1 and "there is none yet" in none_yet.output
    assert runner.invoke(app, ["ask", "Who did Oskar Brandt betray?", "--store", str(store)]).exit_code == 0
    result = runner.invoke(app, ["ask", "Who did he betray him to?", "--continue", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["search"] and answer["search"] != "Who did he betray him to?"


def test_the_map_is_written_once_read_by_overview_questions_and_removed_with_its_document(book_store):
    store, book = book_store
    first = runner.invoke(app, ["map", "--store", str(store), "--json"])
    assert first.exit_code == 0, first.output
    written = json.loads(first.stdout.strip().splitlines()[-1])
    assert written["per_level"]["part"] == len(CHAPTERS) and written["per_level"]["document"] == 1
    with Store.open_existing(store) as st:
        summaries = st.summaries().all()
        assert {s.label for s in summaries if s.level == "part"} == {
            f'ch. {n} "{t}"' for n, t in CHAPTERS.items()}
        assert all(s.text.strip() and s.model.lower().startswith("smollm2") for s in summaries)
    again = json.loads(runner.invoke(app, ["map", "--store", str(store), "--json"]).stdout.strip().splitlines()[-1])
    assert again["written"] == 0 and again["skipped"] == len(CHAPTERS)  # resumable: nothing summarised twice

    result = runner.invoke(app, ["ask", "What is this book about?", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["kind"] == "overview" and answer["read"].startswith("read ")
    assert answer["sources"] and all(s["summary_of"] for s in answer["sources"])
    shown = runner.invoke(app, ["ask", "What is this book about?", "--store", str(store)])
    assert "summary of" in shown.stdout

    assert runner.invoke(app, ["rm", str(book), "--store", str(store)]).exit_code == 0
    with Store.open_existing(store) as st:
        assert st.summaries().count() == 0
