"""Questions that name a chapter, section, page, file or code symbol (engine/retrieval/scope.py), and `--doc` filters: the
parser alone, then retrieval on a real ingest (bundled model and embedder) of a book whose chapters repeat the same
names, and of a small Python file. Retrieval only: the sources are checked, not the small model's wording."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import prose_lines, workspace_for
from episodic_cli.app import app
from episodic_cli.engine.documents import structure
from episodic_cli.engine.retrieval.citations import citation
from episodic_cli.engine.errors import EpiError
from episodic_cli.engine.retrieval.question_kind import QuestionKind, classify
from episodic_cli.engine.retrieval.scope import Restriction, _section_node, parse
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.documents.sources import discover
from episodic_cli.store import Store

SMALL = SegmentParams(min_tokens=32, max_tokens=96)
GIFTS = {"I": ("a silver compass", "The Harbour"), "II": ("a green umbrella", "The Storm"),
         "III": ("a wooden flute", "The Return")}


@pytest.mark.parametrize("question, field, value", [
    ("who betrayed whom in chapter 3?", "chapters", ["3"]),
    ("What happens in chapter three?", "chapters", ["3"]),
    ("in the third chapter, who dies?", "chapters", ["3"]),
    ("ch. III: who dies?", "chapters", ["3"]),
    ("Chapter XII", "chapters", ["12"]),
    ("what does section 2.4 say about globs?", "sections", ["2.4"]),
    ("see §3.1.2", "sections", ["3.1.2"]),
    ("what is on page 12?", "pages", [(12, 12)]),
    ("summarise pages 3-5", "pages", [(3, 5)]),
    ("on page twelve", "pages", [(12, 12)]),
    ("in utils.py, what is the default?", "files", ["utils.py"]),
    ("what does src/util.py import", "files", ["src/util.py"]),
    ("what does Cache.get return", "symbols", [["Cache", "get"]]),
    ("what does the parse_args() function do", "symbols", [["parse_args"]]),
    ("how is user_data_dir computed", "symbols", [["user_data_dir"]]),
    ("what does getAndroidApiLevel return", "symbols", [["getAndroidApiLevel"]]),
    ("the class Cache", "symbols", [["Cache"]]),
    ("appendix B", "appendices", ["b"]),
    ("Summarise the last chapter.", "chapters", ["last"]),
    ("what happens in the final chapter?", "chapters", ["last"]),
])
def test_parse_names_the_place(question, field, value):
    assert getattr(parse(question), field) == value


def test_parse_leaves_plain_questions_alone_and_strips_the_place():
    plain = parse("Who hid the brass key, e.g. under a stair?")
    assert not (plain.structural or plain.files or plain.symbols)
    assert parse("who betrayed whom in chapter 3?").rest == "who betrayed whom ?"
    assert parse("In chapter two, what did Mara give Tobias?").rest == ", what did Mara give Tobias?"
    assert parse("what does section 2.4 say?").rest == "what does say?"


def _book() -> str:
    parts = ["A short preface that belongs to no chapter at all.", ""]
    for i, (numeral, (gift, title)) in enumerate(GIFTS.items()):
        lines = prose_lines(seed=40 + i, n=5)
        lines.insert(2, f"At the market Mara gave Tobias {gift}, and Tobias thanked Mara warmly.")
        parts += [f"CHAPTER {numeral}", "", title, "", *lines, ""]
    return "\n".join(parts)


CODE = '''"""Small helpers."""


class Cache:
    """Keeps recent values in memory."""

    def __init__(self, limit):
        self.limit = limit
        self.values = {}

    def get(self, key):
        """The stored value for key, or the fallback string "missing-value" when there is none."""
        return self.values.get(key, "missing-value")

    def put(self, key, value):
        """Store value under key, dropping the oldest entry when the cache is full."""
        if len(self.values) >= self.limit:
            self.values.pop(next(iter(self.values)))
        self.values[key] = value


def get(url):
    """Fetch url over the network and return its body as text."""
    return download(url).decode("utf-8")
'''


@pytest.fixture(scope="module")
def scoped_store(engine, tmp_path_factory):
    root = tmp_path_factory.mktemp("scoped")
    (root / "book.txt").write_text(_book(), encoding="utf-8")
    (root / "util.py").write_text(CODE, encoding="utf-8")
    ws = workspace_for(engine, root / "store")
    st = ws.store_for_writing(SMALL)
    ingestor = ws.ingestor(st, SMALL, kv_kind=None)
    try:
        with st.writer():
            results = list(ingestor.ingest(list(discover([root / "book.txt", root / "util.py"]))))
    finally:
        ingestor.close()
        st.close()
    assert [r.status for r in results] == ["ingested", "ingested"], results
    return ws, root


def _chapters(r) -> set[str]:
    return {n[1] for p in structure.all_paths(structure.decode(r.event.section)) for n in p if n[0] == "chapter"}


@pytest.mark.parametrize("question", [
    "In chapter 2, what did Mara give Tobias?",
    "What did Mara give Tobias in chapter two?",
    "What did Mara give Tobias in the second chapter?",
    "ch. II: what did Mara give Tobias?",
])
def test_a_chapter_scoped_question_retrieves_and_cites_that_chapter(scoped_store, question):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        scope = ws.scope(st, question)
        assert scope.described == "ch. 2" and not scope.notes and len(scope.places) == 1
        got = ws.retrieve(st, question, k=3)
    assert got and all(_chapters(r) == {"II"} or "II" in _chapters(r) for r in got)
    hits = [r for r in got if r.score is not None]
    assert any("green umbrella" in r.event.text for r in hits)
    assert not any(g in r.event.text for r in got for g in ("silver compass", "wooden flute"))
    cited = citation(max(hits, key=lambda r: r.score))
    assert cited.startswith('book.txt, ch. II "The Storm", lines ') or '/book.txt, ch. II "The Storm", lines ' in cited


def test_a_source_spanning_two_sections_is_cited_by_the_one_asked_about(scoped_store):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        scope = ws.scope(st, "What does section 2.2 say about names?")
    assert scope.notes == ["no \u00a72.2 found in the archive; searching everything"] and not scope.places
    two = {"path": [["section", "2", "Structures"], ["section", "2.4", "Notes"]],
           "also": [[["section", "2", "Structures"], ["section", "2.2", "Naming"]]]}
    named = Restriction(places=[(_section_node, "2.2")])
    assert structure.describe(named.cited_section(two)) == '\u00a72 "Structures", \u00a72.2 "Naming"'
    assert named.cited_section(two)["also"] == [two["path"]]  # the other place is kept, not dropped
    assert Restriction(places=[(_section_node, "2.4")]).cited_section(two) is two
    assert Restriction(places=[(_section_node, "3")]).cited_section(two) is two  # not spanned: its own place
    assert Restriction().cited_section(two) is two


def test_without_a_chapter_the_same_names_come_from_other_chapters(scoped_store):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        got = ws.retrieve(st, "What did Mara give Tobias?", k=3, neighbours=0)
    assert {c for r in got for c in _chapters(r)} - {"II"}  # the scope, not luck, kept the others out above


def test_the_last_chapter_is_the_highest_numbered_one(scoped_store):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        scope = ws.scope(st, "What did Mara give Tobias in the last chapter?")
        assert scope.described == "the last chapter (ch. 3)" and scope.allowed
        got = ws.retrieve(st, "What did Mara give Tobias in the last chapter?", k=3)
    assert got and all("III" in _chapters(r) for r in got)


@pytest.mark.parametrize("question, titles", [
    ('What did Mara give Tobias in "The Storm"?', ["the storm"]),
    ("In the \u201cStorm\u201d chapter, who thanked whom?", ["storm"]),
    ("Summarise 'The Storm.'", ["the storm"]),
    ("What does Alice's sister say about the Queen's croquet?", []),  # apostrophes do not pair up
    ('What does the "-s" flag do?', ["-s"]),
])
def test_parse_reads_quoted_titles(question, titles):
    assert parse(question).titles == titles


def test_a_heading_named_by_its_title_in_quotes_is_that_place(scoped_store):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        scope = ws.scope(st, 'What did Mara give Tobias in "The Storm"?')
        assert scope.titled and scope.described == 'ch. II "The Storm"' and not scope.notes
        got = ws.retrieve(st, 'What did Mara give Tobias in "The Storm"?', k=3)
        assert got and all("II" in _chapters(r) for r in got)
        for phrase in ('Who said "green umbrella"?', 'What did Mara give Tobias in "The Storms"?'):
            other = ws.scope(st, phrase)  # no heading is titled so: a phrase to search for, not a place
            assert not other.titled and other.allowed is None and not other.notes
    each = 'What is each section of "The Storm" about?'
    assert classify(each, parse(each), titled=True) is QuestionKind.WHOLE
    assert classify(each) is QuestionKind.OVERVIEW


def test_a_chapter_the_book_lacks_is_said_and_everything_searched(scoped_store):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        scope = ws.scope(st, "What did Mara give Tobias in chapter 9?")
        assert scope.allowed is None and scope.notes == ["no ch. 9 found in the archive; searching everything"]
        # a file the archive lacks is said too (it was dropped without a word, and the answer made up)
        scope = ws.scope(st, "What does retry.py do?")
        assert scope.allowed is None and scope.notes == ["no retry.py found in the archive; searching everything"]
        # "searching everything" only where nothing else restricts: --doc, or another place the question names
        scope = ws.scope(st, "What did Mara give Tobias in chapter 9?", ["util.py"])
        assert scope.allowed and scope.notes == ["no ch. 9 found in the documents --doc names"]
        scope = ws.scope(st, "What did Mara give Tobias in chapter 2 on page 40?")
        assert scope.allowed and scope.notes == ["no page 40 found in the archive"]


@pytest.mark.parametrize("question, chapters", [
    ("Which chapter I should read to learn about the storm?", []),  # the pronoun, not chapter 1
    ("What does the book I ingested say about Mara?", []),
    ("Summarise chapter I", ["1"]),
    ("What happens in Chapter I of the book?", ["1"]),
    ("Compare chapter I and chapter II", ["1", "2"]),
])
def test_the_pronoun_i_is_no_chapter(question, chapters):
    assert parse(question).chapters == chapters and not parse(question).parts


def test_a_named_symbol_ranks_its_definition_first(scoped_store):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        got = ws.retrieve(st, "what does Cache.get return", k=2, neighbours=0)
        best = min((r for r in got if r.score is not None), key=lambda r: r.rank)
        paths = structure.all_paths(structure.decode(best.event.section))
        assert [["class", None, "Cache"], ["def", None, "get"]] in paths and "missing-value" in best.event.text
        assert ", class Cache, def " in citation(best)


def test_doc_globs_filter_documents(scoped_store):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        for globs in (["util.py"], ["*.py"], [str(root / "util.py")]):
            got = ws.retrieve(st, "What did Mara give Tobias?", k=3, docs=globs)
            assert got and all(r.document.display_path.endswith("util.py") for r in got), globs
            # --json's scope names what --doc left, as it names a file the question names
            assert ws.scope(st, "What did Mara give Tobias?", globs).described.endswith("util.py"), globs
        with pytest.raises(EpiError, match="matches no document"):
            ws.retrieve(st, "What did Mara give Tobias?", k=3, docs=["nothing-*.pdf"])


def test_a_page_scoped_question_retrieves_that_page(engine, shared_store):
    ws = workspace_for(engine, shared_store.store_dir)
    with Store.open_existing(shared_store.store_dir) as st:
        got = ws.retrieve(st, "What did the harbour master carry on page 2?", k=3)
    assert got and all(r.event.page_start is not None and r.event.page_start <= 2 <= r.event.page_end for r in got)


def test_cli_doc_that_matches_nothing_fails_before_the_model_loads(shared_store, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    result = CliRunner().invoke(app, ["ask", "anything", "--doc", "nope-*.md", "--store", str(shared_store.store_dir),
                                      "--json"])
    assert result.exit_code == 1 and "matches no document" in result.stderr and result.stdout == ""


def test_show_json_carries_the_section(scoped_store, monkeypatch):
    ws, root = scoped_store
    with Store.open_existing(root / "store") as st:
        doc = next(d for d in st.documents() if d.display_path.endswith("book.txt"))
        ev = next(e for e in st.events_of(doc.id) if "green umbrella" in e.text)
    result = CliRunner().invoke(app, ["show", str(ev.id), "--store", str(root / "store"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["section"] == 'ch. II "The Storm"'
