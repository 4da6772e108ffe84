"""Questions about the whole, run for real through the CLI with the bundled model: a chapter read whole in order,
the map written (and resumed without rewriting anything), an overview question answered from it and cited as
summaries, a follow-up with --continue rewritten for retrieval, the map removed with its document, and each section
of a chapter answered from its sections' summaries."""
from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from conftest import prose_lines
from episodic_cli.app import app
from episodic_cli.engine.documents.structure import decode
from episodic_cli.engine.llama.models import WHOLE_READING_PARAMS as SIZE_RULE  # before the fixture lowers it
from episodic_cli.store import Store
from episodic_cli.store.summaries import document_key

runner = CliRunner()

CHAPTERS = {1: "The Harbour", 2: "The Storm", 3: "The Return"}
FACT = "In the storm the miller Oskar Brandt betrayed his brother Tomas to the harbour guard."

pytestmark = pytest.mark.usefixtures("whole_parts_read_by_small_models")


def _book() -> str:
    parts = []
    for n, title in CHAPTERS.items():
        lines = prose_lines(seed=40 + n, n=40)
        if n == 2:
            lines.insert(20, FACT)
        parts.append(f"CHAPTER {n}\n{title}\n\n" + "\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _ingested(tmp_path_factory, name: str, text: str):
    """(store, document): `text` written as `name` and ingested at the defaults into a store of its own."""
    root = tmp_path_factory.mktemp(name.split(".")[0])
    document = root / name
    document.write_text(text, encoding="utf-8")
    store = root / "store"
    result = runner.invoke(app, ["ingest", str(document), "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    return store, document


@pytest.fixture(scope="module")
def book_store(tmp_path_factory):
    return _ingested(tmp_path_factory, "river-book.txt", _book())


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
    assert answer["reading"].startswith("read all of ch. 2") and "tokens" in answer["reading"]
    # the plan (engine/ask_plan.py) is in the answer: the chapter whole answered, the lookup was not needed
    assert [(s["way"], s["outcome"]) for s in answer["plan"]] == [("whole", "answered"), ("lookup", "not tried")]
    assert all(set(s) >= {"sentence", "supported", "quotes"} for s in answer["sentences"])


@pytest.fixture(scope="module")
def two_books_store(tmp_path_factory):
    """river-book.txt (the betrayal in chapter 2) and a second book with chapters of the same numbers, one store."""
    root = tmp_path_factory.mktemp("two-books")
    (root / "books").mkdir()
    (root / "books" / "river-book.txt").write_text(_book(), encoding="utf-8")
    other = "\n\n".join(f"Chapter {n}\n\n" + "\n".join(prose_lines(seed=90 + n, n=30)) for n in (1, 2, 3)) + "\n"
    (root / "books" / "hill-book.txt").write_text(other, encoding="utf-8")
    store = root / "store"
    result = runner.invoke(app, ["ingest", str(root / "books"), "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    return store


def test_a_chapter_two_books_have_is_read_in_the_one_that_matches_and_said(two_books_store):
    """Issue 57: "in chapter 2" of an archive of several books reads one book's chapter 2, the one whose passages
    match the question, and says which it chose and how to ask another's."""
    from episodic_cli.engine.ask_options import AskOptions
    from episodic_cli.engine.workspace import Workspace

    ws = Workspace(store=str(two_books_store))
    try:
        with Store.open_existing(ws.store_dir) as st:
            river = next(d for d in st.documents() if d.display_path.endswith("river-book.txt"))
            chapter_2 = {e.id for e in st.events_of(river.id)
                         if any(n[:2] == ["chapter", "2"] for n in (decode(e.section) or {}).get("path", []))}
            result, stream = ws.ask(st, "Who betrayed his brother in chapter 2?", AskOptions(cold_seconds=None))
            "".join(stream)
    finally:
        ws.close()
    assert result.retrieved and {r.event.id for r in result.retrieved} <= chapter_2
    (note,) = [n for n in result.scope.notes if "documents" in n]
    assert note.startswith("ch. 2 is in 2 documents") and "river-book.txt's" in note and "--doc" in note
    assert result.scope.described.endswith("river-book.txt")


def test_a_model_under_a_billion_parameters_looks_a_chapter_question_up(book_store, monkeypatch):
    """The size rule itself (engine/llama/models.py WHOLE_READING_PARAMS), with the bundled 135M model: the chapter
    question is answered from its best passages, and `--read whole` still reads the chapter whole."""
    from episodic_cli.engine import workspace

    monkeypatch.setattr(workspace, "WHOLE_READING_PARAMS", SIZE_RULE)
    store, _ = book_store
    looked_up = json.loads(runner.invoke(app, ["ask", "Who betrayed whom in chapter 2?", "--store", str(store),
                                               "--json"]).stdout)
    assert looked_up["kind"] == "lookup"
    assert [s["way"] for s in looked_up["plan"]] == ["lookup"] and "too small" in looked_up["plan"][0]["reason"]
    assert {s["event_id"] for s in looked_up["sources"]} <= set(_chapter_events(store, 2))  # still in chapter 2
    asked = json.loads(runner.invoke(app, ["ask", "Who betrayed whom in chapter 2?", "--read", "whole", "--store",
                                           str(store), "--json"]).stdout)
    assert asked["kind"] == "whole" and [s["event_id"] for s in asked["sources"]] == _chapter_events(store, 2)


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
    assert answer["kind"] == "lookup" and answer["reading"] is None


def test_continue_follows_up_the_last_answer(book_store, tmp_path):
    store, _ = book_store
    none_yet = runner.invoke(app, ["ask", "and then?", "--continue", "--store", str(store)])
    assert none_yet.exit_code == 1 and "there is none yet" in none_yet.output
    assert runner.invoke(app, ["ask", "Who did Oskar Brandt betray?", "--store", str(store)]).exit_code == 0
    result = runner.invoke(app, ["ask", "Who did he betray him to?", "--continue", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["search"] and answer["search"] != "Who did he betray him to?"


def test_a_document_named_as_a_whole_is_searched_with_its_opening_first(book_store):
    """"What is river-book, and who is Oskar Brandt?" names the document by its file name
    (engine/retrieval/named_whole.py): it is found as any question is, within that document, with the document's
    opening ranked first (its words alone pick chapter 2's betrayal). `--read whole` reads all of it."""
    from episodic_cli.engine.ask_options import AskOptions
    from episodic_cli.engine.workspace import Workspace

    store, _ = book_store
    ws = Workspace(store=str(store))
    try:
        with Store.open_existing(ws.store_dir) as st:
            (doc,) = st.documents()
            events = st.events_of(doc.id)
            result, stream = ws.ask(st, "What is river-book, and who is Oskar Brandt?",
                                    AskOptions(k=1, neighbours=0, cold_seconds=None))
            for _ in stream:
                pass
    finally:
        ws.close()
    assert [r.event.id for r in result.retrieved] == [events[0].id]
    whole = json.loads(runner.invoke(app, ["ask", "What is river-book about?", "--read", "whole", "--store",
                                           str(store), "--json"]).stdout)
    assert whole["kind"] == "whole" and whole["reading"].startswith("read all of ")
    assert whole["reading"].split(",")[0].endswith("river-book.txt")
    assert [s["event_id"] for s in whole["sources"]] == [e.id for e in events]
    # it names no part: the whole step gave way, and the document named as a whole answered
    assert [(s["way"], s["outcome"]) for s in whole["plan"]] == [
        ("whole", "gave way"), ("named_whole", "answered"), ("lookup", "not tried")]
    assert whole["plan"][0]["why_not"] == "it names no part that resolved to events"


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

    # A part summary written under an older label (epi names parts better than it did) is written again, and the
    # document's summary, made from the old text, after it.
    with Store.open_existing(store) as st:
        shelf = st.summaries()
        part = next(s for s in shelf.all() if s.level == "part")
        shelf.put(dataclasses.replace(part, label='"Version", ' + part.label, id=None))
    relabelled = json.loads(runner.invoke(app, ["map", "--store", str(store), "--json"]).stdout.strip().splitlines()[-1])
    assert relabelled["per_level"]["part"] == 1 and relabelled["per_level"]["document"] == 1
    with Store.open_existing(store) as st:
        now = {s.key: s for s in st.summaries().all()}
    assert now[part.key].label == part.label
    assert now[document_key(part.document_id)].id > now[part.key].id

    result = runner.invoke(app, ["ask", "What is this book about?", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["kind"] == "overview" and answer["reading"].startswith("read ")
    assert answer["sources"] and all(s["summary_of"] for s in answer["sources"])
    shown = runner.invoke(app, ["ask", "What is this book about?", "--store", str(store), "--explain"])
    assert "summary of" in shown.stdout
    assert "plan: overview -> lookup" in shown.stderr and "(answered)" in shown.stderr  # --explain's lines
    named = json.loads(runner.invoke(app, ["ask", "Tell me about river-book", "--read", "overview", "--store",
                                           str(store), "--json"]).stdout)
    assert named["kind"] == "overview" and named["reading"].startswith("read ")
    assert "of the map of " in named["reading"] and "and the opening of " in named["reading"]
    assert named["sources"][0]["summary_of"] and not named["sources"][-1]["summary_of"]  # the opening, last

    assert runner.invoke(app, ["rm", str(book), "--store", str(store)]).exit_code == 0
    with Store.open_existing(store) as st:
        assert st.summaries().count() == 0


MANUAL_SECTIONS = {"1.1": "Mooring", "1.2": "Tides", "1.3": "Signals"}


def _manual() -> str:
    parts = ["# 1 Harbour rules\n", "\n".join(prose_lines(seed=70, n=6)) + "\n"]
    for k, (number, title) in enumerate(MANUAL_SECTIONS.items()):
        parts.append(f"## {number} {title}\n\n" + "\n".join(prose_lines(seed=71 + k, n=30)) + "\n")
    parts.append("# 2 The river\n\n" + "\n".join(prose_lines(seed=80, n=30)) + "\n")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def manual_store(tmp_path_factory):
    return _ingested(tmp_path_factory, "harbour-manual.md", _manual())[0]


def test_each_section_of_a_chapter_is_answered_from_its_sections_summaries(manual_store):
    ask = ["ask", 'What does each section of the "Harbour rules" chapter cover?', "--store", str(manual_store),
           "--json"]
    before = json.loads(runner.invoke(app, ask).stdout)
    assert before["reading"].startswith("read all of ")  # no map yet: the chapter is read whole

    result = runner.invoke(app, ["map", "--store", str(manual_store), "--json"])
    assert result.exit_code == 0, result.output
    written = json.loads(result.stdout.strip().splitlines()[-1])
    assert written["per_level"]["section"] == len(MANUAL_SECTIONS) and written["per_level"]["part"] == 2
    with Store.open_existing(manual_store) as st:
        (doc,) = st.documents()
        events = st.events_of(doc.id)
        summaries = {s.label: s for s in st.summaries().all()}
    assert {label for label, s in summaries.items() if s.level == "section"} == {
        f'§1 "Harbour rules", §{n} "{t}"' for n, t in MANUAL_SECTIONS.items()}
    document = next(s for s in summaries.values() if s.level == "document")
    assert (document.first_ordinal, document.last_ordinal) == (events[0].ordinal, events[-1].ordinal)

    answer = json.loads(runner.invoke(app, ask).stdout)
    assert answer["kind"] == "whole" and answer["reading"].startswith(f"read {len(MANUAL_SECTIONS)} section summaries")
    cited = [s["summary_of"] for s in answer["sources"] if s["summary_of"]]
    assert cited[0] == '§1 "Harbour rules"'  # the chapter's own summary first, then its sections in order
    assert cited[1:] == [f'§1 "Harbour rules", §{n} "{t}"' for n, t in MANUAL_SECTIONS.items()]

