"""The Python API (`from episodic_cli import Archive`, episodic_cli/api.py) on the shared store with the real bundled
model: answers with cited evidence, streaming, search, events, documents, outlines, the map's summaries, ingest,
and the errors it shares with the CLI. One Archive serves the module, as one would a notebook."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import PDF_FACT_PAGE, PDF_QUESTION, TEXT_FACT, TEXT_FACT_LINE, TEXT_QUESTION, prose_lines
from episodic_cli.app import app

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def archive(shared_store):
    from episodic_cli import Archive

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EPI_HOME", str(shared_store.home))
        with Archive(shared_store.store_dir) as a:
            a.load()
            yield a


def cli_error(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, result.output
    return result.stderr.strip()


# ------------------------------------------------------------------------------------------------ imports


def test_import_episodic_cli_loads_neither_the_engine_nor_mcp():
    code = ("import sys, episodic_cli; before = set(sys.modules); from episodic_cli import Archive; "
            "print(sorted(m for m in before if m.startswith(('episodic_cli.', 'llama_cpp', 'mcp')))); "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.splitlines() == ["[]", "[]"], out.stdout


def test_the_api_draws_nothing_on_a_terminal():
    tree = ast.parse((ROOT / "episodic_cli" / "api.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {("." * n.level) + (n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {n for n in names if n.lstrip(".").split(".")[0] in {"app", "render", "repl", "rich", "typer",
                                                                      "mcp", "mcp_server"}}, names


# ------------------------------------------------------------------------------------------------ answers


def test_ask_answers_with_evidence_and_sources_cited_on_the_page(archive, shared_store):
    answer = archive.ask(PDF_QUESTION)
    assert answer.text and answer.text == answer.text.strip()
    assert answer.question == PDF_QUESTION and answer.kind == "lookup" and answer.mode == "kv"
    on_page = [s for s in answer.sources if s.page_start is not None
               and s.page_start <= PDF_FACT_PAGE <= s.page_end and "Orla Venn" in s.text]
    assert on_page, [s.citation for s in answer.sources]
    source = on_page[0]
    assert source.document == str(shared_store.pdf) and isinstance(source.event_id, int)
    assert source.citation.startswith(str(shared_store.pdf)) and ("p. " in source.citation or "pp. " in
                                                                  source.citation)
    assert [s.number for s in answer.sources] == list(range(1, len(answer.sources) + 1))
    assert answer.evidence, answer  # the quotes: sentences of the sources, each with its place
    for q in answer.evidence:
        event = next(s for s in answer.sources if s.event_id == q.event_id)
        assert q.quote and " ".join(q.quote.split()) in " ".join(event.text.split())
        assert q.citation.startswith(q.document)
        if event.page_start is not None:  # a PDF's quote names its page, a text file's its lines
            assert q.page_start is not None and event.page_start <= q.page_start <= event.page_end
        else:
            assert q.line_start is not None and event.line_start <= q.line_start <= event.line_end
    assert any("Orla Venn" in q.quote and q.page_start == PDF_FACT_PAGE for q in answer.evidence), answer.evidence
    assert 0 < answer.timings.retrieve_s <= answer.timings.first_token_s <= answer.timings.total_s
    json.dumps(answer.as_json())  # plain data all the way down


def test_ask_gives_what_epi_ask_json_gives(archive, shared_ask):
    """The CLI is a thin layer over the API: the same question and options, the same sources and answer."""
    cli = json.loads(shared_ask.stdout)
    answer = archive.ask(TEXT_QUESTION, k=1, neighbours=0)
    assert [s.event_id for s in answer.sources] == [s["event_id"] for s in cli["sources"]]
    assert answer.text == cli["text"] and answer.short == cli["short"]
    assert [q.quote for q in answer.evidence] == [e["quote"] for e in cli["evidence"]]
    assert answer.supported == cli["supported"]
    cited = [s for s in answer.sources if TEXT_FACT in s.text][0]
    assert cited.line_start <= TEXT_FACT_LINE <= cited.line_end and cited.page_start is None


def test_ask_stream_yields_the_answer_piece_by_piece_then_the_answer(archive):
    pieces = list(archive.ask_stream(TEXT_QUESTION, k=1, neighbours=0))
    *tokens, answer = pieces
    assert tokens and all(isinstance(t, str) for t in tokens)
    assert type(answer).__name__ == "Answer"
    assert "".join(tokens).strip() == answer.text


def test_answer_tokens_caps_the_answer(archive):
    from episodic_cli import EpiError

    answer = archive.ask(TEXT_QUESTION, k=1, neighbours=0, short=False, answer_tokens=6)
    assert answer.text and len(archive.workspace.model.tokenize(answer.text)) <= 8, answer.text  # re-tokenized
    with pytest.raises(EpiError, match="token limit must be at least 1"):
        archive.ask(TEXT_QUESTION, answer_tokens=0)


def test_a_second_look_streams_its_marker_and_keeps_the_answer_set_aside(archive):
    from episodic_cli import api

    # one token holds no word of the sources, so it is answered again (tests/test_second_look.py); at k=5 what
    # is retrieved is more than the second look reads (at k=1 it would read the same, and does not look again)
    *pieces, answer = archive.ask_stream(TEXT_QUESTION, narrow=False, mode="kv", answer_tokens=1)
    at = [i for i, p in enumerate(pieces) if isinstance(p, api.SecondLook)]
    assert len(at) == 1 and str(pieces[at[0]]) == "\n\n"
    assert answer.first_answer == "".join(pieces[:at[0]]).strip()
    assert answer.text == "".join(pieces[at[0] + 1:]).strip()
    assert answer.as_json()["first_answer"] == answer.first_answer
    off = archive.ask(TEXT_QUESTION, narrow=False, mode="kv", answer_tokens=1, second_look=False)
    assert off.first_answer is None and off.text == answer.first_answer


def test_a_follow_up_reads_the_earlier_turn(archive):
    first = archive.ask(TEXT_QUESTION, k=1, neighbours=0)
    follow = archive.ask("and who chose it?", history=[first], k=1, neighbours=0)
    assert follow.text and follow.question == "and who chose it?"
    assert follow.search, "a follow-up is searched as the standalone question it means"


def test_user_errors_are_the_cli_s_one_line(archive, shared_store):
    from episodic_cli import EpiError

    with pytest.raises(EpiError) as empty:
        archive.ask("   ")
    assert f"error: {empty.value}" == cli_error("ask", "   ", "--store", str(shared_store.store_dir))
    with pytest.raises(EpiError) as doc:
        archive.ask(PDF_QUESTION, doc="nothing-like-this.pdf")
    assert f"error: {doc.value}" == cli_error("ask", PDF_QUESTION, "--doc", "nothing-like-this.pdf", "--store",
                                              str(shared_store.store_dir))
    with pytest.raises(EpiError) as unknown:
        archive.read_event(987654)
    assert f"error: {unknown.value}" == cli_error("show", "987654", "--store", str(shared_store.store_dir))
    with pytest.raises(EpiError, match="unknown read"):
        archive.ask(PDF_QUESTION, read="everything")
    with pytest.raises(EpiError, match="the search is empty"):
        archive.search(" ")


def test_bad_values_are_one_line_errors_not_exceptions_of_other_types(archive):
    """From a review: ids and counts past SQLite's integers, ids that are not numbers, malformed history, a question
    that is not a string and a lone surrogate each raised OverflowError, ValueError, KeyError, AttributeError or
    TypeError."""
    from episodic_cli import EpiError

    for call in (lambda: archive.read_event(10**30), lambda: archive.read_event("abc"),
                 lambda: archive.read_event(1, neighbours=10**30), lambda: archive.outline(10**30),
                 lambda: archive.search("keeper", k=10**30), lambda: archive.ask(None),
                 lambda: archive.ask("and then?", history=["hi"]),
                 lambda: archive.ask("and then?", history=[{"role": "user"}]),
                 lambda: archive.search("a\ud800b")):
        assert isinstance(_raises(call), EpiError), call


def test_a_second_question_waits_for_the_stream_being_read(archive):
    from episodic_cli import EpiError

    stream = archive.ask_stream(TEXT_QUESTION, k=1, neighbours=0)
    next(stream)
    with pytest.raises(EpiError, match="still being read"):
        archive.ask(TEXT_QUESTION, k=1, neighbours=0)
    *_, answer = list(stream)  # the first answer is whole, and the archive answers again after it
    assert answer.text and archive.ask(TEXT_QUESTION, k=1, neighbours=0).text
    stream = archive.ask_stream(TEXT_QUESTION, k=1, neighbours=0)
    next(stream)
    stream.close()  # a stream closed early frees the archive too
    assert archive.ask(TEXT_QUESTION, k=1, neighbours=0).text


def test_an_archive_used_in_a_worker_thread_closes_from_the_main_thread(shared_store):
    from episodic_cli import Archive

    archive = Archive(shared_store.store_dir)
    worker = threading.Thread(target=archive.documents)
    worker.start()
    worker.join()
    archive.close()  # raised sqlite3.ProgrammingError and kept the store
    assert archive.documents()  # reopened in this thread


def test_another_thread_is_refused_with_a_message(archive):
    from episodic_cli import EpiError

    caught = []
    worker = threading.Thread(target=lambda: caught.append(_raises(archive.documents)))
    worker.start()
    worker.join()
    assert isinstance(caught[0], EpiError) and "another thread" in str(caught[0])


def _raises(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


# ------------------------------------------------------------------------------------------------ the archive


def test_search_returns_cited_events_best_first(archive, shared_store):
    hits = archive.search(PDF_QUESTION, k=3)
    assert 1 <= len(hits) <= 3 and [h.rank for h in hits] == sorted(h.rank for h in hits)
    fact = [h for h in hits if "Orla Venn hid the brass key" in " ".join(h.text.split())]
    assert fact and fact[0].page_start <= PDF_FACT_PAGE <= fact[0].page_end
    assert fact[0].citation.startswith(str(shared_store.pdf)) and fact[0].excerpt
    only_text = archive.search(PDF_QUESTION, k=2, doc=shared_store.text.name)
    assert only_text and all(h.document == str(shared_store.text) for h in only_text)
    with_neighbours = archive.search(TEXT_QUESTION, k=1, neighbours=1)
    assert with_neighbours[0].rank == 0 and all(h.rank is None for h in with_neighbours[1:])


def test_read_event_with_its_neighbours_in_document_order(archive):
    hit = archive.search(TEXT_QUESTION, k=1)[0]
    events = archive.read_event(hit.event_id, neighbours=1)
    assert [e.requested for e in events].count(True) == 1
    asked = next(e for e in events if e.requested)
    assert asked.event_id == hit.event_id and asked.text == hit.text and asked.citation == hit.citation
    assert [e.ordinal for e in events] == list(range(events[0].ordinal, events[0].ordinal + len(events)))
    assert 2 <= len(events) <= 3 and all(e.document == asked.document for e in events)


def test_documents_as_epi_ls_lists_them(archive, shared_store):
    docs = {d.name: d for d in archive.documents()}
    assert set(docs) == {str(shared_store.pdf), str(shared_store.text)}
    ls = json.loads(CliRunner().invoke(app, ["ls", "--store", str(shared_store.store_dir), "--json"]).stdout)
    for row in ls["documents"]:
        d = docs[row["path"]]
        assert (d.kind, d.format, d.tokens, d.events, d.pages, d.lines) == (
            row["kind"], row["format"], row["tokens"], row["events"], row["pages"], row["lines"])


def test_outline_of_a_stored_document(archive, shared_store):
    outline = archive.outline(shared_store.text.name)
    assert outline.document == str(shared_store.text) and outline.events > 0
    text = outline.text()
    assert text.splitlines()[0].startswith(str(shared_store.text))
    for node in _walk(outline.nodes):
        assert 1 <= node.events <= outline.events and node.first_event <= node.last_event
    assert archive.outline(archive.documents()[0].id).document == archive.documents()[0].name


def _walk(nodes):
    for n in nodes:
        yield n
        yield from _walk(n.children)


def test_outline_from_the_events_sections():
    """Chapters, sections and code symbols nest as the events' section paths say, with their extents."""
    from episodic_cli.api import outline_of
    from episodic_cli.store import DocumentRecord

    ch1, ch2 = ["chapter", "1", "The Harbour"], ["chapter", "2", "The Stair"]
    s21 = ["section", "2.1", "Steps"]
    sec = lambda path, *also: json.dumps({"path": path, "also": list(also)})  # noqa: E731
    places = [(10, 1, 0, None, None, 1, 9, sec([ch1])), (11, 1, 1, None, None, 10, 20, sec([ch1], [ch2])),
              (12, 1, 2, None, None, 21, 30, sec([ch2, s21])), (13, 1, 3, None, None, 31, 40, None)]
    doc = DocumentRecord(path="/b.txt", display_path="b.txt", kind="text", content_sha256="x", n_tokens=400,
                         n_events=4, n_pages=None, n_lines=40, ingest_seconds=0.0, id=1)
    outline = outline_of(doc, places)
    assert [n.label for n in outline.nodes] == ['ch. 1 "The Harbour"', 'ch. 2 "The Stair"']
    one, two = outline.nodes
    assert (one.first_event, one.last_event, one.events, one.line_start, one.line_end) == (10, 11, 2, 1, 20)
    assert (two.first_event, two.last_event, two.events, two.line_start, two.line_end) == (11, 12, 2, 10, 30)
    assert [c.label for c in two.children] == ['§2.1 "Steps"'] and two.children[0].depth == 1
    assert outline.text().splitlines()[1:] == ['- ch. 1 "The Harbour" — lines 1-20 · events 10-11',
                                               '- ch. 2 "The Stair" — lines 10-30 · events 11-12',
                                               '  - §2.1 "Steps" — lines 21-30 · event 12']


def test_parts_are_named_by_number_title_or_label():
    from episodic_cli.api import parts_named
    from episodic_cli.store.summaries import SummaryRecord, part_key

    def part(path, label):
        return SummaryRecord(level="part", key=part_key(1, path), label=label, text="...", model="m",
                             content_sha256="x", n_tokens=10, document_id=1)

    three = part([["chapter", "III", "The Betrayal"]], 'ch. III "The Betrayal"')
    four = part([["chapter", "4", "Home"]], 'ch. 4 "Home"')
    code = part(None, "lines 1-40")
    parts = [three, four, code]
    assert parts_named(parts, "chapter 3") == [three]
    assert parts_named(parts, "ch. 3") == [three]
    assert parts_named(parts, "3") == [three]
    assert parts_named(parts, "betrayal") == [three]
    assert parts_named(parts, 'ch. 4 "Home"') == [four]
    assert parts_named(parts, "lines 1-40") == [code]
    assert parts_named(parts, "chapter 9") == []


def test_summary_without_a_map_says_what_writes_it(archive):
    from episodic_cli import EpiError

    with pytest.raises(EpiError, match="no map yet.*epi map"):
        archive.summary()


# ------------------------------------------------------------------------------------------------ ingest


def test_ingest_reads_new_files_and_skips_unchanged_ones(tmp_path):
    from episodic_cli import Archive, EpiError

    doc = tmp_path / "tides.txt"
    doc.write_text("\n".join(prose_lines(7, 10)) + "\nThe tide tables were kept by Mira Okafor in a red tin.\n",
                   encoding="utf-8")
    with Archive(tmp_path / "store") as archive:
        report = archive.ingest([doc])
        assert report.ok and [d["status"] for d in report.documents] == ["ingested"]
        assert report.warm is None and report.map is None  # SmolLM2 read it: its own blocks are the answer's
        assert [d.name for d in archive.documents()] == [str(doc)]
        assert any("Mira Okafor" in h.text for h in archive.search("who kept the tide tables?", k=2))
        assert [d["status"] for d in archive.ingest([doc]).documents] == ["unchanged"]
        # one path as a string is that path, not its characters ("." and "/" were read)
        (tmp_path / "private.txt").write_text("not for the store\n", encoding="utf-8")
        assert [d["status"] for d in archive.ingest(str(doc)).documents] == ["unchanged"]
        assert len(archive.documents()) == 1
        with pytest.raises(EpiError, match="nothing to ingest"):
            archive.ingest([tmp_path / "missing.txt"])


def test_ingest_with_an_answer_model_reads_with_it_in_one_pass(second_model, tmp_path, monkeypatch):
    """One reader (issue 36 item 1): the Archive's answer model cuts the events and keeps its blocks as it reads, so
    nothing is warmed after; warm=False reads with the fast bundled reader instead."""
    from episodic_cli import Archive

    monkeypatch.delenv("EPI_MODEL")
    doc = tmp_path / "tides.txt"
    doc.write_text("\n".join(prose_lines(7, 10)), encoding="utf-8")
    tiers = {}
    for name, warm in (("one", True), ("fast", False)):
        with Archive(tmp_path / name, model=str(second_model)) as archive:
            report = archive.ingest([doc], warm=warm, write_map=False)
        assert report.ok and report.warm is None and report.map is None
        (tier,) = [d.name for d in (tmp_path / name / "kv").iterdir() if d.is_dir()]
        tiers[name] = tier
    assert tiers["one"] != tiers["fast"]  # the answer model's own tier, not the bundled reader's


def test_summary_returns_the_map_s_summaries(shared_store, tmp_path):
    """On a copy of the shared store with a map written into it (the summaries' texts stand in for a model's)."""
    import shutil

    import numpy as np

    from episodic_cli import Archive, EpiError
    from episodic_cli.store import Store
    from episodic_cli.store.summaries import SummaryRecord, collection_key, current_collections, document_key, part_key

    store_dir = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store_dir)
    vec = np.ones(384, dtype=np.float32) / np.sqrt(384)
    with Store.open_existing(store_dir) as st:
        pdf = next(d for d in st.documents() if d.display_path == str(shared_store.pdf))
        shelf = st.summaries()
        put = lambda **kw: shelf.put(SummaryRecord(model="test", n_tokens=100, embedding=vec, **kw))  # noqa: E731
        ((key, sha),) = current_collections(st.documents()).items()  # the folder holding the store's documents
        put(level="collection", key=key, label="docs/", text="Two documents.", content_sha256=sha)
        # a folder whose documents went since its summary was written
        put(level="collection", key=collection_key("gone/"), label="gone/", text="Old notes.", content_sha256="c")
        put(level="document", key=document_key(pdf.id), label="keeper.pdf", text="A keeper hides a key.",
            content_sha256=pdf.content_sha256, document_id=pdf.id, page_start=1, page_end=5)
        put(level="part", key=part_key(pdf.id, [["chapter", "2", "The Stair"]]), label='ch. 2 "The Stair"',
            text="The key goes under a step.", content_sha256=pdf.content_sha256, document_id=pdf.id,
            page_start=3, page_end=4)
    with Archive(store_dir) as archive:
        top = archive.summary()
        assert [(s.level, s.text, s.stale) for s in top] == [("collection", "Two documents.", False),
                                                             ("collection", "Old notes.", True),
                                                             ("document", "A keeper hides a key.", False)]
        assert top[2].document == str(shared_store.pdf)
        assert top[2].citation.startswith(f"{shared_store.pdf}, summary of the whole document")
        assert [s.level for s in archive.summary(shared_store.pdf.name)] == ["document", "part"]
        part = archive.summary(shared_store.pdf.name, part="chapter 2")
        assert [s.label for s in part] == ['ch. 2 "The Stair"'] and part[0].page_start == 3
        assert "summary of ch. 2" in part[0].citation
        with pytest.raises(EpiError, match='no part of .* matches .chapter 7.*ch. 2 "The Stair"'):
            archive.summary(shared_store.pdf.name, part="chapter 7")
