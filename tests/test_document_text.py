"""A document's text read without holding it whole (engine/documents/text.py): a long text spooled to disk reads back
exactly like the str it replaces, through every path ingest reads it by (slices, lines, newline counts, the
streaming decoder, headings, sections, citations' lines, the tokenizer's chunk cuts)."""
from __future__ import annotations

import random

import pytest

from episodic_cli.engine.documents import text as document_text
from episodic_cli.engine.documents import sources
from episodic_cli.engine.documents import structure
from episodic_cli.engine.documents.text import SpooledText, TextSpool, count_newlines, iter_lines
from episodic_cli.engine.documents.sources import SourceError, load_document
from episodic_cli.engine.ingest.token_stream import next_cut

SAMPLE = ("Chapter 1: The Harbour\n\nOrla Venn hid the brass key \u2014 caf\u00e9 cr\u00e8me \U0001F511 under the "
          "ninth step.\n1.1 The Ninth Step\n\n  indented line\n\n\nTitle\n=====\nlast line without newline")


def spooled(text: str, tmp_path) -> SpooledText:
    spool = TextSpool(tmp_path, limit=2)
    for i in range(0, len(text), 5):  # written in small pieces, as the decoder does
        spool.write(text[i : i + 5])
    out = spool.finish()
    assert isinstance(out, SpooledText) and len(out) == len(text)
    return out


def test_a_spooled_text_slices_and_indexes_like_the_str(tmp_path):
    text = SAMPLE * 7
    long = spooled(text, tmp_path)
    rng = random.Random(3)
    for _ in range(300):
        a, b = sorted(rng.randrange(-len(text) - 3, len(text) + 3) for _ in range(2))
        assert long[a:b] == text[a:b]
        assert long[a:] == text[a:] and long[:b] == text[:b]
    for i in (0, 5, len(text) - 1, -1, -len(text)):
        assert long[i] == text[i]
    with pytest.raises(IndexError):
        long[len(text)]
    long.close()


def test_a_short_text_stays_a_str_and_a_discarded_spool_holds_nothing(tmp_path):
    spool = TextSpool(tmp_path, limit=100)
    spool.write("short")
    assert spool.finish() == "short"
    big = TextSpool(tmp_path, limit=2)
    big.write("\u00e9" * 10)
    assert big.utf8_bytes == 20 and big.n_chars == 10
    big.discard()
    assert big.finish() == ""


@pytest.mark.parametrize("text", [SAMPLE, SAMPLE + "\n", "\n", "x", "\n\nx\n\n", "no newline at all"])
def test_lines_and_newline_counts_read_by_blocks_equal_split(text, tmp_path):
    expected = []
    pos = 0
    for line in text.split("\n"):
        expected.append((pos, line))
        pos += len(line) + 1
    assert list(iter_lines(text)) == expected
    long = spooled(text * 3, tmp_path)
    expected3 = list(iter_lines(text * 3))
    for block in (1, 2, 7, 1 << 20):
        assert list(iter_lines(long, block)) == expected3
    for a, b in ((0, len(long)), (3, 11), (5, 5)):
        assert count_newlines(long, a, b) == (text * 3)[a:b].count("\n")


def test_chunk_cuts_of_a_spooled_text_equal_the_str_ones(tmp_path):
    text = (SAMPLE + " word" * 40 + "\n") * 30
    long = spooled(text, tmp_path)
    for kind in ("exact", "space_prefix"):
        for start in range(0, len(text), 97):
            assert next_cut(long, start, kind, target=50, limit=400) == next_cut(text, start, kind, 50, 400)


# ------------------------------------------------------------------------------- files read a block at a time


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Read files 7 bytes at a time and spool anything longer than 10 characters: every seam is exercised."""
    monkeypatch.setattr(sources, "READ_BYTES", 7)
    monkeypatch.setattr(document_text, "IN_MEMORY_CHARS", 10)
    monkeypatch.setattr(document_text, "READ_CHARS", 13)


@pytest.mark.parametrize("encoding,newline", [("utf-8", "\n"), ("utf-8", "\r\n"), ("utf-8-sig", "\r"),
                                              ("cp1252", "\r\n"), ("utf-16", "\n")])
def test_a_file_read_in_blocks_and_spooled_equals_the_whole_read(tmp_path, monkeypatch, encoding, newline):
    body = SAMPLE.replace("\U0001F511", "") if encoding == "cp1252" else SAMPLE
    body = body.replace("\u2014", "-") if encoding == "cp1252" else body
    path = tmp_path / "notes.md"
    path.write_bytes((body + "\n").replace("\n", newline).encode(encoding))
    whole = load_document(path)
    assert isinstance(whole.text, str) and whole.text == body + "\n"
    with monkeypatch.context() as mp:
        mp.setattr(sources, "READ_BYTES", 7)
        mp.setattr(document_text, "IN_MEMORY_CHARS", 10)
        mp.setattr(document_text, "READ_CHARS", 13)
        long = load_document(path)
        assert isinstance(long.text, SpooledText)
        assert long.text[:] == whole.text
        assert (long.content_sha256, long.n_lines, long.kind) == (whole.content_sha256, whole.n_lines, whole.kind)
        assert long.text_bytes == len(whole.text.encode("utf-8"))
        spans = [(0, 20), (24, 60), (61, 90), (91, 120), (121, len(body))]
        for a, b in spans:  # in order, as ingest asks
            assert long.locate(a, b) == whole.locate(a, b)
            assert long.section(a, b) == whole.section(a, b)
        assert long.locate(24, 60) == whole.locate(24, 60)  # behind the last asked: counted again from the top
        long.close()


def test_binary_and_empty_files_are_still_refused_when_read_in_blocks(tmp_path, tiny_blocks):
    blob = tmp_path / "blob.txt"
    blob.write_bytes(b"plain start " * 3 + b"\x00\x01\x02" * 50)
    with pytest.raises(SourceError, match="binary"):
        load_document(blob)
    noisy = tmp_path / "noisy.txt"  # control bytes and high bytes, no NUL: no encoding reads it as text
    noisy.write_bytes((bytes(range(1, 8)) + bytes(range(0x80, 0xA0))) * 20 + b"words")
    with pytest.raises(SourceError, match="binary"):
        load_document(noisy)
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\t\n" * 40)
    with pytest.raises(SourceError, match="empty"):
        load_document(blank)


def test_headings_and_symbols_of_a_spooled_text_equal_the_str_ones(tmp_path, tiny_blocks):
    prose = ("CHAPTER III\nThe Storm\n\nstorm line\n\n2.4 The Lighthouse\n\nlight line\n\nTitle Here\n"
             "==========\nbody\n") * 4
    md = ("# Guide\n\ntext\n\n## Install\n\n```\n# not a heading\n```\nSetext\n------\n"
          "   # Indented\n\n- item\n---\n\n## Using C#\n") * 4  # a long text keeps a line scan; same headings
    rst = "=====\nIntro\n=====\n\ntext\n\nUsage\n-----\n\nmore\n" * 4
    js = "class Store {\n  get(key) {\n    return 1;\n  }\n}\nfunction helper(a) {\n  return a;\n}\n" * 4
    for name, text, parse in (("a.txt", prose, structure.text_headings), ("a.md", md, structure.markdown_headings),
                              ("a.rst", rst, structure.rst_headings), ("a.js", js, structure.regex_symbols)):
        long = spooled(text, tmp_path)
        assert parse(long) == parse(text), name
        assert parse(text), name  # the sample has structure to find


def _path_at_by_scan(sections, x):
    return sorted((s for s in sections if s.start <= x < s.end), key=lambda s: (s.level, s.start))


def test_the_section_index_finds_what_a_scan_of_every_section_finds():
    rng = random.Random(7)
    heads = [(rng.randrange(0, 5000), rng.randrange(0, 5), "section", None, f"t{i}") for i in range(300)]
    sections = structure.sections_from_heads(heads, 5000)
    # sections_from_heads: each heading runs to the next one of the same or a lower level at a later offset
    ordered = sorted(heads, key=lambda h: (h[0], h[1]))
    for (start, level, *_), s in zip(ordered, sections):
        assert s.end == next((h[0] for h in ordered if h[1] <= level and h[0] > start), 5000)
    index = structure.SectionIndex(sections)
    for x in list(range(-1, 5002, 7)) + [s.start for s in sections] + [s.end for s in sections]:
        assert index.path_at(x) == _path_at_by_scan(sections, x), x
    for _ in range(200):
        a = rng.randrange(0, 5000)
        b = a + rng.randrange(1, 400)
        assert index.bounds_inside(a, b) == sorted({v for s in sections for v in (s.start, s.end) if a < v < b})
