"""EPUB, HTML, Word and scanned PDFs: real files of each kind (tests/markup_fixtures.py) read into blocks with the
format's own structure, ingested with the real model, asked chapter- and section-scoped questions; bad files end as
one line each with the store unchanged."""
from __future__ import annotations

import json
import os
import zipfile

import pytest
from typer.testing import CliRunner

from conftest import prose_lines
from markup_fixtures import make_docx, make_epub, make_html, make_scanned_pdf
from pdf_fixture import make_pdf
from episodic_cli.app import app
from episodic_cli.engine.documents import page_ocr
from episodic_cli.engine.documents.sources import SourceError, discover, load_document
from episodic_cli.engine.documents.structure import all_paths, decode
from episodic_cli.store import Store

runner = CliRunner()
BETRAYAL = "In the third chapter the steward Corwin Hale betrayed Lady Maren by selling the harbour charts to Skell."
TITLES = ["The Arrival", "The Feast", "The Betrayal", "The Reckoning"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def chapters() -> list[tuple[str, list[str]]]:
    out = []
    for i, title in enumerate(TITLES, 1):
        paras = [" ".join(prose_lines(seed=i * 10 + j, n=2)) for j in range(6)]
        if i == 3:
            paras.insert(3, BETRAYAL)
        out.append((f"Chapter {i}: {title}", paras))
    return out


def failed(result, name: str) -> str:
    lines = [ln for ln in result.stderr.splitlines() if name in ln and "✗" in ln]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


# ------------------------------------------------------------------------------------------------ reading


@pytest.mark.parametrize("toc", ["nav", "ncx"])
def test_epub_chapters_come_from_its_table_of_contents(tmp_path, toc):
    doc = load_document(make_epub(tmp_path / "book.epub", chapters(), toc=toc))
    assert doc.kind == "epub"
    assert [(s.kind, s.number, s.title) for s in doc.blocks.sections] == [
        ("chapter", str(i), t) for i, t in enumerate(TITLES, 1)]
    assert "Contents" not in doc.text  # the nav document is structure, not text
    at = doc.text.index(BETRAYAL)
    # ¶ counts restart in each chapter file: the heading is block 1, the planted paragraph the 5th block
    assert doc.locate(at, at + len(BETRAYAL)) == (None, None, 5, 5)
    assert json.loads(doc.section(at, at + len(BETRAYAL)))["path"] == [["chapter", "3", "The Betrayal"]]


def test_html_keeps_the_content_and_drops_the_chrome(tmp_path):
    page = make_html(tmp_path / "install.html", "Installing Harbour",
                     [("Requirements", ["Harbour needs 310 MB of disk and Python 3.10 or newer."]),
                      ("First run", ["The first run builds the index in about four minutes."])],
                     code="pip install harbour\n\nharbour --init")
    doc = load_document(page)
    text = doc.text
    assert doc.kind == "html"
    for kept in ("Installing Harbour", "310 MB", "about four minutes", "pip install harbour\nharbour --init"):
        assert kept in text
    for chrome in ("Sidebar link", "Documentation Home", "Copyright footer", "should never be read"):
        assert chrome not in text
    assert [(s.level, s.title) for s in doc.blocks.sections] == [
        (1, "Installing Harbour"), (2, "Requirements"), (2, "First run")]


def test_docx_headings_by_style_and_tables_as_text(tmp_path):
    doc = load_document(make_docx(tmp_path / "handbook.docx", "Staff Handbook",
                                  [("Leave", ["Staff get 30 days of leave a year."]),
                                   ("Travel", ["Book trains two weeks ahead."])],
                                  table=[["City", "Daily rate"], ["Oslo", "120 EUR"]]))
    assert doc.kind == "docx"
    assert "Oslo | 120 EUR" in doc.text
    assert [(s.level, s.title) for s in doc.blocks.sections] == [(0, "Staff Handbook"), (1, "Leave"), (1, "Travel")]
    at = doc.text.index("30 days")
    assert doc.locate(at, at + 7) == (None, None, 3, 3)  # title, heading, then the paragraph


def test_folders_find_the_new_formats(tmp_path):
    make_epub(tmp_path / "a.epub", chapters())
    make_html(tmp_path / "b.htm", "Page", [("One", ["Some text on the page here."])])
    make_docx(tmp_path / "c.docx", "Doc", [("One", ["Some text in the file here."])])
    found = [p.name for p, _ in (x for x in discover([tmp_path]) if isinstance(x, tuple))]
    assert found == ["a.epub", "b.htm", "c.docx"]


# ------------------------------------------------------------------------------------------------ scans


def test_scanned_pdf_is_read_by_ocr_and_cited_by_page(tmp_path):
    pytest.importorskip("rapidocr_onnxruntime", reason="the `ocr` extra is not installed (./install.sh --no-ocr)")
    pdf = make_scanned_pdf(tmp_path / "scan.pdf", ["The ledger was kept in the blue cabinet.",
                                                   "The vault code is 4471 and only the clerk knows it."])
    doc = load_document(pdf)
    assert doc.kind == "pdf" and doc.note == "pages 1-2 read by OCR"
    at = doc.text.index("4471")
    assert doc.locate(at, at + 4)[:2] == (2, 2)


def test_a_changed_ocr_model_is_one_line(tmp_path, monkeypatch):
    # failure injection: a model file that is not the pinned release's
    monkeypatch.setitem(page_ocr.MODEL_SHA256, "ch_PP-OCRv4_rec_infer.onnx", "0" * 64)
    page_ocr._engine.cache_clear()
    try:
        with pytest.raises(SourceError, match="OCR model ch_PP-OCRv4_rec_infer.onnx differs from the pinned release"):
            load_document(make_scanned_pdf(tmp_path / "scan.pdf", ["A scanned page."]))
    finally:
        page_ocr._engine.cache_clear()


def test_scanned_pages_without_ocr_are_named_never_dropped(tmp_path, monkeypatch):
    # failure injection: the `ocr` extra missing
    monkeypatch.setattr(page_ocr, "_engine", lambda: None)
    scan = make_scanned_pdf(tmp_path / "scan.pdf", ["A page of a scanned book."] * 3)
    with pytest.raises(SourceError) as exc:
        load_document(scan)
    assert "pages 1-3 have no text layer" in str(exc.value) and "pip install 'epi[ocr]'" in str(exc.value)
    result = invoke("ingest", scan, "--store", tmp_path / "store")
    assert result.exit_code == 1
    assert "pages 1-3 have no text layer" in failed(result, "scan.pdf")


# ------------------------------------------------------------------------------------------------ end to end


def test_epub_chapter_question_is_scoped_and_cited_by_chapter(tmp_path):
    book = make_epub(tmp_path / "book.epub", chapters(), toc="nav")
    store = tmp_path / "store"
    assert invoke("ingest", book, "--store", store).exit_code == 0
    result = invoke("ask", "who betrayed whom in chapter 3?", "--store", store, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["scope"]
    assert out["sources"] and all(s["section"].startswith('ch. 3 "The Betrayal"') for s in out["sources"])
    assert any(BETRAYAL in s["text"] for s in out["sources"])
    listing = json.loads(invoke("ls", "--store", store, "--json").stdout)["documents"]
    assert [(d["format"], d["lines"], d["blocks"] > 0) for d in listing] == [("EPUB", None, True)]
    shown = invoke("ls", "--store", store).stdout
    assert "EPUB" in shown and "¶" in shown


def test_html_and_docx_sections_are_cited(tmp_path):
    # sections of ~300 tokens each, so that events fall inside one section
    page = make_html(tmp_path / "guide.html", "Harbour Guide",
                     [("Moorings", prose_lines(1, 12)),
                      ("Fees", ["A mooring at the east pier costs 42 crowns a night in summer.", *prose_lines(3, 11)]),
                      ("Tides", prose_lines(5, 12))])
    handbook = make_docx(tmp_path / "rules.docx", "Harbour Rules",
                         [("Night watch", ["The night watch rings the chapel bell at every change of tide.",
                                           *prose_lines(2, 11)]),
                          ("Cargo", prose_lines(4, 12))])
    store = tmp_path / "store"
    assert invoke("ingest", page, handbook, "--store", store).exit_code == 0
    for question, fact, doc, where in (
            ("How much does a mooring at the east pier cost?", "42 crowns", "guide.html", '"Fees"'),
            ("When does the night watch ring the chapel bell?", "every change of tide", "rules.docx", '"Night watch"')):
        out = json.loads(invoke("ask", question, "--store", store, "--json", "-k", "1").stdout)
        found = [s for s in out["sources"] if fact in s["text"]]
        assert found and found[0]["document"].endswith(doc), out["sources"]
        assert found[0]["line_start"] is not None  # the block number
        with Store.open_existing(store) as st:  # the event's stored place: its main section or one it also holds
            (event,) = st.get_events([found[0]["event_id"]])
        titles = [node[2] for path in all_paths(decode(event.section)) for node in path]
        assert where.strip('"') in titles, titles
    shown = invoke("show", "1", "--store", store).stdout
    assert "¶" in shown


# ------------------------------------------------------------------------------------------------ bad input


def _good(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("The harbour office keeps the tide tables for the whole coast. " * 4 + "\n", encoding="utf-8")
    return good


@pytest.mark.parametrize("case", ["not-a-zip", "zip-not-epub", "drm", "truncated-docx", "huge-html", "scan-no-ocr"])
def test_bad_files_are_one_line_and_the_store_is_kept(tmp_path, monkeypatch, case):
    store = tmp_path / "store"
    good = _good(tmp_path)
    assert invoke("ingest", good, "--store", store).exit_code == 0
    before = json.loads(invoke("ls", "--store", store, "--json").stdout)["documents"]
    if case == "not-a-zip":
        bad, needle = tmp_path / "book.epub", "not an EPUB (not a zip archive"
        bad.write_bytes(b"this is not a zip file at all" * 10)
    elif case == "zip-not-epub":
        bad, needle = tmp_path / "photos.epub", "without META-INF/container.xml"
        with zipfile.ZipFile(bad, "w") as zf:
            zf.writestr("photo.txt", "not a book")
    elif case == "drm":
        aes = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
        bad = make_epub(tmp_path / "bought.epub", chapters(), encrypt=aes)
        needle = "protected by DRM (OEBPS/ch01.xhtml is encrypted)"
    elif case == "truncated-docx":
        whole = make_docx(tmp_path / "whole.docx", "T", [("H", ["Text of the document."])]).read_bytes()
        bad, needle = tmp_path / "cut.docx", "not a readable Word file"
        bad.write_bytes(whole[: len(whole) // 2])
    elif case == "huge-html":
        bad, needle = tmp_path / "dump.html", "more than one page holds"
        with open(bad, "wb") as f:
            f.write(b"<html><body><p>")
            f.write(b"x" * (50 * 1024 * 1024))
    else:
        monkeypatch.setattr(page_ocr, "_engine", lambda: None)  # failure injection: the `ocr` extra missing
        bad, needle = make_scanned_pdf(tmp_path / "scan.pdf", ["A scanned page."]), "have no text layer"
    result = invoke("ingest", bad, "--store", store)
    assert result.exit_code == 1, result.output
    assert needle in failed(result, bad.name)
    assert json.loads(invoke("ls", "--store", store, "--json").stdout)["documents"] == before


def test_font_obfuscation_is_not_drm(tmp_path):
    book = make_epub(tmp_path / "fonts.epub", chapters(), encrypt="font:http://www.idpf.org/2008/embedding")
    assert BETRAYAL in load_document(book).text


def test_pdf_with_text_and_scanned_pages_names_the_unread_ones(tmp_path, monkeypatch):
    from pypdf import PdfReader, PdfWriter

    text_pdf = make_pdf(tmp_path / "text.pdf", ["A page with a real text layer about tides."])
    scan = make_scanned_pdf(tmp_path / "scan.pdf", ["A scanned page."] * 2)
    writer = PdfWriter()
    for source in (text_pdf, scan):
        for page in PdfReader(source).pages:
            writer.add_page(page)
    mixed = tmp_path / "mixed.pdf"
    with open(mixed, "wb") as f:
        writer.write(f)
    monkeypatch.setattr(page_ocr, "_engine", lambda: None)  # failure injection: the `ocr` extra missing
    doc = load_document(mixed)
    assert "real text layer" in doc.text
    assert doc.note.startswith("pages 2-3 have no text layer and were not read")


def test_questions_name_the_new_formats_files():
    from episodic_cli.engine.retrieval import scope

    assert scope.parse("what does guide.html say about fees in book.epub or rules.docx?").files == [
        "guide.html", "book.epub", "rules.docx"]


def test_a_books_numbered_top_level_entries_are_chapters():
    from episodic_cli.engine.documents.blocks import toc_sections

    entries = [(0, "Cover", 1), (10, "1. Loomings", 1), (20, "III", 1), (30, "Chapter 4: The Gam", 1),
               (40, "2.1 Rigging", 2), (50, "Epilogue", 1)]
    assert [(s.kind, s.number, s.title) for s in toc_sections(entries, 100)] == [
        ("section", None, "Cover"), ("chapter", "1", "Loomings"), ("chapter", "III", ""),
        ("chapter", "4", "The Gam"), ("section", "2.1", "Rigging"), ("section", None, "Epilogue")]


def test_a_page_with_nothing_to_read_is_skipped_not_failed(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    make_html(site / "guide.html", "Guide", [("Moorings", ["A mooring at the east pier costs 42 crowns a night."])])
    # a built docs site's search page: navigation and a script, no content
    (site / "search.html").write_text('<html><body><nav class="sidebar"><a href="guide.html">Guide to the harbour'
                                      '</a></nav><main><script>search()</script></main></body></html>', "utf-8")
    store = tmp_path / "store"
    result = invoke("ingest", site, "--store", store, "--json")
    assert result.exit_code == 0, result.output
    records = {json.loads(x)["path"].rsplit("/", 1)[-1]: json.loads(x) for x in result.stdout.splitlines()}
    assert records["guide.html"]["status"] == "ingested"
    assert records["search.html"]["status"] == "skipped" and "no text outside its navigation" in \
        records["search.html"]["error"]
    alone = invoke("ingest", site / "search.html", "--store", store)
    assert alone.exit_code == 1 and "no text outside its navigation" in alone.stderr


def test_a_built_docs_site_reads_its_pages_not_its_machinery(tmp_path):
    site = tmp_path / "html"
    (site / "_static").mkdir(parents=True)
    (site / "_sources").mkdir()
    make_html(site / "index.html", "Harbour", [("Moorings", ["A mooring costs 42 crowns a night."])])
    (site / "_static" / "theme.js").write_text("function toggle() { return 1; }\n", "utf-8")
    (site / "_sources" / "index.rst.txt").write_text("Harbour\n=======\n\nA mooring costs 42 crowns.\n", "utf-8")
    (site / "searchindex.js").write_text('Search.setIndex({"docnames": ["index"]})\n', "utf-8")
    (site / "genindex.html").write_text("<html><body><main><h1>Index</h1><p>mooring</p></main></body></html>", "utf-8")
    found = [shown for item in discover([site]) if isinstance(item, tuple) for shown in [item[1]]]
    assert [os.path.basename(f) for f in found] == ["index.html"]
