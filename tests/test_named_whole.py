"""A document or folder asked about as a whole by its name (engine/retrieval/named_whole.py): the question's shape
gives the subject, and the subject counts only when it is one of the archive's names (a folder, a text file's stem,
a text document's title). Real SQLite store; no model (the answer path is run with the real model in
test_whole_scope.py)."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from episodic_cli.engine.retrieval.named_whole import named_whole, subject
from episodic_cli.engine.retrieval.summary_sources import overview
from episodic_cli.store import Store
from episodic_cli.store.summaries import COLLECTION, DOCUMENT, SummaryRecord, collection_key, collections, \
    collection_sha, document_key
from test_store import IDENTITY, make_doc, unit


@pytest.mark.parametrize("question, x", [
    ("what does epi do?", "epi"),
    ("What is epi?", "epi"),
    ("What is the tenacity library for?", "tenacity"),
    ("what's h11 good for", "h11"),
    ("Tell me about the gzip manual", "gzip"),
    ("Give me an overview of h11, please", "h11"),
    ("What is the purpose of `sse-starlette`?", "sse-starlette"),
    ("What problem does shellingham solve?", "shellingham"),
    ("How does epi work?", "epi"),
    ("Why would I use pluggy?", "pluggy"),
    ("Please summarise the GNU bc manual.", "GNU bc"),
    ("What kind of tool is bc?", "bc"),
    # the question goes on in a clause of its own
    ("What is pluggy, and when would I reach for it?", "pluggy"),
    ("Tell me about zstd - is it a library or a program?", "zstd"),
    ("How does tenacity work roughly? I have never used it.", "tenacity"),
    ("What problem does truststore solve for a web client?", "truststore"),
    ("What features does sse-starlette offer besides pings?", "sse-starlette"),
    ("What kinds of options does GNU tar support?", "GNU tar"),
    ("Tell me what mdurl offers: is it a parser?", "mdurl"),
])
def test_the_subject_of_a_question_about_a_whole(question, x):
    assert subject(question) == x


@pytest.mark.parametrize("question", [
    "What is this library for?",   # no name: question_kind.py's overview
    "What does the library do?",
    "Which option shows the mode?",
    "How do I remove a plugin?",
    "What is the default timeout of the client in seconds when none is given?",  # longer than a name
    "What does h11 do with a chunked body?",  # a detail of it: a lookup
    "How does sse-starlette work once I return a response?",
])
def test_no_subject_or_one_that_is_only_a_kind_of_thing(question):
    assert subject(question) is None


def _store(tmp_path, paths: dict[str, tuple[str, list[str]]]):
    """A store holding a document per path: (kind, the section title of each event, or "" for none)."""
    rng = np.random.default_rng(3)
    st = Store.create_or_open(tmp_path / "s", IDENTITY)
    ids = {}
    for path, (kind, titles) in paths.items():
        doc, events = make_doc(path, [f"passage {i} of {path}" for i in range(len(titles))], rng)
        doc = replace(doc, kind=kind, content_sha256=f"{abs(hash(path)):064d}"[:64])
        for e, title in zip(events, titles):
            e.section = json.dumps({"path": [["section", None, title]]}) if title else None
        ids[path] = st.replace_document(doc, events).id
    return st, ids


def test_a_folder_names_the_documents_under_it_and_an_outer_folder_keeps_a_shared_name(tmp_path):
    st, ids = _store(tmp_path, {
        "h11/README.rst": ("text", ["h11", "h11"]),
        "h11/h11/_connection.py": ("code", ["", ""]),
        "h11/h11/_events.py": ("code", ["", ""]),
    })
    found = named_whole(st, "What is h11?")
    assert found is not None and found.document_ids == set(ids.values())  # the project, not its package folder
    assert found.name == "h11/"
    assert named_whole(st, "What does _connection do?") is None  # a code file's name is scope.py's (read whole)
    assert named_whole(st, "What is the default port?") is None


def test_a_text_documents_stem_and_title_name_it(tmp_path):
    st, ids = _store(tmp_path, {
        "manuals/gzip.txt": ("text", ["GNU Gzip: General file (de)compression"] * 3),
        "manuals/README.md": ("text", ["epi", "epi"]),
        "manuals/notes.md": ("text", ["Tides", "Bread"]),  # two top headings: no title
    })
    assert named_whole(st, "What is gzip for?").document_ids == {ids["manuals/gzip.txt"]}
    assert named_whole(st, "Tell me about GNU Gzip").document_ids == {ids["manuals/gzip.txt"]}
    assert named_whole(st, "What does epi do?").document_ids == {ids["manuals/README.md"]}  # its title
    assert named_whole(st, "What is notes about?") is None  # a name many files have
    assert named_whole(st, "What is README about?").document_ids == {ids["manuals/README.md"]}  # the one README
    assert named_whole(st, "What is Tides about?") is None
    everything = named_whole(st, "What is in the manuals?")
    assert everything is None or everything.document_ids == set(ids.values())


def test_the_readme_is_the_one_nearest_the_top(tmp_path):
    st, ids = _store(tmp_path, {
        "proj/README.md": ("text", ["proj"]),
        "proj/docs/README.md": ("text", ["Docs"]),
        "proj/lib/a.py": ("code", [""]),
    })
    assert named_whole(st, "Summarise the README").document_ids == {ids["proj/README.md"]}
    assert named_whole(st, "What is the readme about?").document_ids == {ids["proj/README.md"]}
    st2, _ = _store(tmp_path / "two", {"a/README.md": ("text", ["A"]), "b/README.rst": ("text", ["B"])})
    assert named_whole(st2, "Summarise the README") is None  # two at the same depth: which one is not known


def test_two_wholes_with_one_name_name_neither(tmp_path):
    st, _ = _store(tmp_path, {
        "a/cache.md": ("text", ["One"]),
        "b/cache.txt": ("text", ["Two"]),
    })
    assert named_whole(st, "What is cache for?") is None


def test_a_named_folder_reads_its_own_summaries_and_its_collection_summary(tmp_path):
    st, ids = _store(tmp_path, {
        "proj/lib/a.py": ("code", [""]),
        "proj/lib/b.py": ("code", [""]),
        "proj/book.md": ("text", ["Book"]),
    })
    docs = st.documents()
    named = named_whole(st, "what does lib do?")
    assert named.document_ids == {ids["proj/lib/a.py"], ids["proj/lib/b.py"]}
    assert named.collection_keys == {collection_key("proj/lib/")}
    vecs = unit(np.random.default_rng(9), 8)
    shelf = st.summaries()
    for n, (folder, members) in enumerate(collections(docs).items()):
        shelf.put(SummaryRecord(level=COLLECTION, key=collection_key(folder), label=folder, text=f"folder {folder}",
                                model="m", content_sha256=collection_sha([d.content_sha256 for d in members]),
                                n_tokens=10, embedding=vecs[n]))
    for n, d in enumerate(docs):
        shelf.put(SummaryRecord(level=DOCUMENT, key=document_key(d.id), label=d.display_path,
                                text=f"document {d.display_path}", model="m", content_sha256=d.content_sha256,
                                n_tokens=10, document_id=d.id, first_ordinal=0, last_ordinal=0,
                                embedding=vecs[4 + n]))
    read = [s.text for s in overview(st, vecs[7], "what does lib do?", 10000, named.document_ids,
                                     collection_keys=named.collection_keys)]
    assert "folder proj/lib/" in read and "folder proj/" not in read
    assert "document proj/book.md" not in read and "document proj/lib/a.py" in read


def test_a_named_folder_is_searched_alone_and_said_so(tmp_path):
    """Real ingest (the bundled model, no blocks) and a real answer: a question naming a sub-folder searches only
    its documents, ranks its README's opening first, and says what it searched."""
    from typer.testing import CliRunner

    from conftest import prose_lines
    from episodic_cli.app import app
    from episodic_cli.engine.ask_options import AskOptions
    from episodic_cli.engine.workspace import Workspace

    docs = tmp_path / "docs"
    (docs / "harbour").mkdir(parents=True)
    (docs / "tides.md").write_text("# Tides\n\n" + "\n".join(prose_lines(1, 20)) + "\n")
    (docs / "harbour" / "README.md").write_text("# Harbour\n\nThe harbour kit keeps the ledger of ships.\n\n"
                                                + "\n".join(prose_lines(2, 20)) + "\n")
    (docs / "harbour" / "nets.md").write_text("# Nets\n\n" + "\n".join(prose_lines(3, 20)) + "\n")
    store = tmp_path / "store"
    result = CliRunner().invoke(app, ["ingest", str(docs), "--store", str(store), "--no-kv", "--no-map", "--json"])
    assert result.exit_code == 0, result.output
    ws = Workspace(store=str(store))
    try:
        with Store.open_existing(ws.store_dir) as st:
            harbour = {d.id for d in st.documents() if "/harbour/" in d.display_path}
            readme = next(d for d in st.documents() if d.display_path.endswith("harbour/README.md"))
            answers = []
            for question in ("What is harbour for?", "What does the harbour package do?"):
                answer, stream = ws.ask(st, question, AskOptions(k=2, neighbours=0, answer_tokens=8))
                for _ in stream:
                    pass
                answers.append(answer)
    finally:
        ws.close()
    for answer in answers:
        assert answer.scope.described.endswith("harbour/")
        assert {r.event.document_id for r in answer.retrieved} <= harbour
        assert readme.id in {r.event.document_id for r in answer.retrieved}
        assert not answer.scope.notes  # "the harbour package" is the folder, not a missing package file
