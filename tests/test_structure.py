"""Document structure (engine/documents/structure.py): chapters and sections of PDFs (outline and page headings), plain text,
Markdown and reST, and the classes and functions around code; what an event stores and how citations show it."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # pdf_fixture is a sibling helper, not an installed module

from pdf_fixture import pdf_bytes  # noqa: E402

from episodic_cli.engine.documents import structure  # noqa: E402
from episodic_cli.engine.documents.sources import load_document  # noqa: E402


def _paths(doc, needle: str) -> dict:
    i = doc.text.index(needle)
    return json.loads(doc.section(i, i + len(needle)))


def _filler(tag: str, n: int = 6) -> str:
    return "\n".join(f"{tag} line {i} says something ordinary about the harbour." for i in range(n))


def make_outlined_pdf(path: Path) -> Path:
    """Five pages: ch. 1 on p. 1-2 (with a section 1.1 on p. 2), ch. 2 on p. 3-5; the outline nests 1.1 under ch. 1."""
    from pypdf import PdfReader, PdfWriter

    pages = ["Chapter 1: The Harbour\n" + _filler("one-a"),
             _filler("one-b", 3) + "\n1.1 The Night Watch\n" + _filler("watch"),
             "Chapter 2: The Betrayal\n" + _filler("two-a"),
             _filler("two-b"),
             _filler("two-c")]
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(pages))))
    ch1 = writer.add_outline_item(title="Chapter 1: The Harbour", page_number=0)
    writer.add_outline_item(title="1.1 The Night Watch", page_number=1, parent=ch1)
    writer.add_outline_item(title="Chapter 2: The Betrayal", page_number=2)
    with open(path, "wb") as f:
        writer.write(f)
    return path


def test_pdf_outline_gives_chapters_and_nested_sections(tmp_path):
    doc = load_document(make_outlined_pdf(tmp_path / "book.pdf"))
    assert doc.outline == [(1, "Chapter 1: The Harbour", 0), (2, "1.1 The Night Watch", 1),
                           (1, "Chapter 2: The Betrayal", 2)]
    assert _paths(doc, "one-a line 2")["path"] == [["chapter", "1", "The Harbour"]]
    # Before the section's title on page 2: still chapter 1 only; after it, inside 1.1.
    assert _paths(doc, "one-b line 1")["path"] == [["chapter", "1", "The Harbour"]]
    assert _paths(doc, "watch line 3")["path"] == [["chapter", "1", "The Harbour"], ["section", "1.1", "The Night Watch"]]
    assert _paths(doc, "two-c line 5")["path"] == [["chapter", "2", "The Betrayal"]]
    # A span across the chapter boundary keeps the chapter holding most of it and names the other one.
    i, j = doc.text.index("watch line 4"), doc.text.index("two-a line 4")
    crossing = json.loads(doc.section(i, j))
    assert crossing["path"] == [["chapter", "2", "The Betrayal"]]
    assert [["chapter", "1", "The Harbour"], ["section", "1.1", "The Night Watch"]] in crossing["also"]
    assert structure.describe(crossing) == 'ch. 2 "The Betrayal"'


def test_pdf_without_outline_finds_chapter_headings_on_pages(tmp_path):
    from pdf_fixture import make_pdf

    pdf = make_pdf(tmp_path / "plain.pdf", ["CHAPTER III\nThe Storm\n" + _filler("storm"),
                                            _filler("more"), "CHAPTER IV\n" + _filler("calm")])
    doc = load_document(pdf)
    assert doc.outline is None
    assert _paths(doc, "more line 2")["path"] == [["chapter", "III", "The Storm"]]
    assert structure.describe(_paths(doc, "storm line 1")) == 'ch. III "The Storm"'
    assert _paths(doc, "calm line 3")["path"][0][:2] == ["chapter", "IV"]


def test_plain_text_chapters_numbered_and_underlined_headings(tmp_path):
    text = "\n".join([
        "Preface text that belongs to no chapter.", "",
        "CHAPTER ONE", "", "A Quiet Town", "", _filler("town"), "",
        "1. Steps to take:", "the list item above ends with a colon, so it is not a heading.", "",
        "Chapter 2: Storm Warnings", "", _filler("storm"), "",
        "2.4 The Lighthouse", "", _filler("light"), "",
        "Notes", "=====", "", _filler("notes"),
    ])
    doc = load_document(_write(tmp_path / "story.txt", text))
    assert doc.section(0, 20) is None
    assert _paths(doc, "town line 2")["path"] == [["chapter", "ONE", "A Quiet Town"]]
    assert _paths(doc, "the list item above")["path"] == [["chapter", "ONE", "A Quiet Town"]]
    assert _paths(doc, "light line 1")["path"] == [["chapter", "2", "Storm Warnings"], ["section", "2.4", "The Lighthouse"]]
    assert _paths(doc, "notes line 1")["path"][-1] == ["section", None, "Notes"]
    assert structure.describe(_paths(doc, "light line 1")) == 'ch. 2 "Storm Warnings", \u00a72.4 "The Lighthouse"'


def test_vim_style_numbered_sections(tmp_path):
    text = "\n".join(["*usr_03.txt*\tFor Vim version 9.0.", "", "=" * 40, "*03.1*\tWord movement", "",
                      _filler("word"), "", "=" * 40, "*03.2*\tMoving to the start or end of a line", "",
                      _filler("line")])
    doc = load_document(_write(tmp_path / "usr_03.txt", text))
    assert _paths(doc, "word line 3")["path"] == [["section", "03.1", "Word movement"]]
    assert _paths(doc, "line line 3")["path"][0][:2] == ["section", "03.2"]


def test_markdown_and_rest_headings(tmp_path):
    md = "\n".join(["# Guide", "intro", "## Install", "pip install it", "```", "# not a heading", "```",
                    "Usage", "-----", "run it", "### 2.4 Options", "flags here"])
    doc = load_document(_write(tmp_path / "guide.md", md))
    assert _paths(doc, "pip install")["path"] == [["section", None, "Guide"], ["section", None, "Install"]]
    assert _paths(doc, "not a heading")["path"][-1][2] == "Install"
    assert _paths(doc, "run it")["path"][-1][2] == "Usage"
    assert _paths(doc, "flags here")["path"][-1] == ["section", "2.4", "Options"]

    rst = "\n".join(["=====", "Title", "=====", "", "Intro.", "", "Chapter 3: Setup", "================", "",
                     "setup text", "", "Details", "-------", "", "detail text"])
    doc = load_document(_write(tmp_path / "guide.rst", rst))
    assert _paths(doc, "setup text")["path"] == [["section", None, "Title"], ["chapter", "3", "Setup"]]
    assert _paths(doc, "detail text")["path"][-1] == ["section", None, "Details"]


def test_python_classes_and_functions_with_decorators(tmp_path):
    code = "\n".join(["import os", "", "class Cache:", '    """A cache."""', "", "    @property",
                      "    def size(self):", "        return 1", "", "    def get(self, key):",
                      "        value = self._d.get(key)", "        return value", "", "",
                      "def helper():", "    return Cache()", ""])
    doc = load_document(_write(tmp_path / "util.py", code))
    assert _paths(doc, "value = self")["path"] == [["class", None, "Cache"], ["def", None, "get"]]
    assert _paths(doc, "@property")["path"] == [["class", None, "Cache"], ["def", None, "size"]]
    assert _paths(doc, "return Cache()")["path"] == [["def", None, "helper"]]
    assert doc.section(0, 8) is None  # the import line is outside every definition
    assert structure.describe(_paths(doc, "value = self")) == "class Cache, def get"


def test_other_languages_by_regex(tmp_path):
    js = "\n".join(["export class Store {", "  constructor() {", "    this.x = 1;", "  }", "}", "",
                    "function load(path) {", "  return read(path);", "}", "",
                    "const save = async (data) => {", "  write(data);", "};"])
    doc = load_document(_write(tmp_path / "store.js", js))
    assert _paths(doc, "this.x = 1")["path"][0] == ["class", None, "Store"]
    assert _paths(doc, "return read")["path"] == [["function", None, "load"]]
    assert _paths(doc, "write(data)")["path"] == [["function", None, "save"]]
    go = "\n".join(["package main", "", "func (c *Cache) Get(k string) int {", "\treturn c.m[k]", "}"])
    doc = load_document(_write(tmp_path / "cache.go", go))
    assert _paths(doc, "return c.m")["path"] == [["func", None, "Get"]]
    # A Python file that does not parse falls back to the regex.
    doc = load_document(_write(tmp_path / "broken.py", "def ok():\n    return (\n\ndef other():\n    pass\n"))
    assert _paths(doc, "pass")["path"] == [["def", None, "other"]]


def test_numbers_roman_words_and_damaged_values():
    assert structure.number_value("III") == "3" and structure.number_value("three") == "3"
    assert structure.number_value("02.10") == "2.10" and structure.number_value("third") == "3"
    assert structure.number_value("A") == "a" and structure.number_value("iiii") is None
    assert structure.decode("not json") is None and structure.decode(None) is None
    assert structure.describe(None) is None


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_markdown_headings_follow_commonmark(tmp_path):
    """CommonMark (markdown-it-py): up to three spaces may indent an ATX heading; `- item` above `---` is a list item
    and a thematic break, not a setext heading; a closing run of #s needs a space before it (`C#` keeps its #)."""
    md = "\n".join(["   # Title", "intro text", "", "- item", "---", "", "after the rule", "",
                    "## Using C#", "sharp text", "", "Real Section", "------------", "section body",
                    "    # indented code, not a heading"])
    heads = [(s.start, s.level, s.title) for s in structure.markdown_headings(md)]
    assert heads == [(0, 1, "Title"), (md.index("## Using"), 2, "Using C#"),
                     (md.index("Real Section"), 2, "Real Section")]
    doc = load_document(_write(tmp_path / "notes.md", md))
    assert _paths(doc, "after the rule")["path"] == [["section", None, "Title"]]
    assert _paths(doc, "section body")["path"] == [["section", None, "Title"], ["section", None, "Real Section"]]
