from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pdf_fixture is a sibling helper, not an installed module

from pdf_fixture import make_encrypted_pdf, make_pdf  # noqa: E402

from episodic_cli.engine.documents import sources  # noqa: E402
from episodic_cli.engine.documents.sources import (  # noqa: E402
    DIR_LINK,
    SourceDocument,
    SourceError,
    Skipped,
    discover,
    document_format,
    file_sha256,
    load_document,
)

FACT = "The vault access code is 7391-ZETA."


def _filler(page: int, n: int = 38) -> str:
    return "\n".join(f"Page {page} filler line {i} about nothing in particular." for i in range(n))


# --------------------------------------------------------------------------------------------------- PDF


def test_pdf_fact_on_page_three_with_blank_page_two(tmp_path: Path) -> None:
    page3 = _filler(3, 20) + "\n" + FACT + "\n" + _filler(3, 19)
    pdf = make_pdf(tmp_path / "report.pdf", [_filler(1), "", page3, _filler(4), _filler(5)])
    doc = load_document(pdf)

    assert doc.kind == "pdf" and doc.n_pages == 5 and doc.n_lines is None
    assert doc.path == pdf.resolve() and doc.display_path == str(pdf)
    assert len(doc.page_starts or []) == 5 and doc.page_starts == sorted(doc.page_starts or [])
    starts = doc.page_starts or []
    assert doc.text[starts[0] :].startswith("Page 1 filler line 0")
    assert doc.text[starts[2] :].startswith("Page 3 filler line 0")
    assert doc.text[starts[4] :].startswith("Page 5 filler line 0")
    assert doc.text.count("filler line") == 38 * 3 + 39

    i = doc.text.index(FACT)
    assert doc.locate(i, i + len(FACT)) == (3, 3, None, None)
    # A span crossing from page 3 into page 4, and one starting in page 1's tail across the blank page.
    j = doc.text.index("Page 4 filler line 2")
    assert doc.locate(i, j) == (3, 4, None, None)
    assert doc.locate(starts[1] - 10, starts[2] + 5) == (1, 3, None, None)
    # The "\n\n" separator at a span's edge is not attributed to the neighbouring page.
    assert doc.locate(starts[3] - 2, starts[3] + 6) == (4, 4, None, None)


def test_pdf_special_characters_and_many_lines(tmp_path: Path) -> None:
    lines = [f"row {i} (paren) back\\slash" for i in range(50)]
    doc = load_document(make_pdf(tmp_path / "dense.pdf", ["\n".join(lines)]))
    assert doc.text.splitlines() == lines


def test_pdf_detected_by_magic_without_extension(tmp_path: Path) -> None:
    target = tmp_path / "scan_0001"
    make_pdf(tmp_path / "tmp.pdf", ["magic bytes decide"]).rename(target)
    doc = load_document(target)
    assert doc.kind == "pdf" and "magic bytes decide" in doc.text


def test_encrypted_pdf_is_rejected(tmp_path: Path) -> None:
    pdf = make_encrypted_pdf(tmp_path / "locked.pdf", ["top secret"], "hunter2")
    with pytest.raises(SourceError, match="encrypted") as err:
        load_document(pdf)
    assert "qpdf" in str(err.value) and err.value.path == pdf


def test_empty_password_pdf_opens(tmp_path: Path) -> None:
    pdf = make_encrypted_pdf(tmp_path / "restricted.pdf", ["first page", "", FACT], "")
    doc = load_document(pdf)
    i = doc.text.index(FACT)
    assert doc.n_pages == 3 and doc.locate(i, i + len(FACT))[:2] == (3, 3)


def test_truncated_pdf_is_rejected(tmp_path: Path) -> None:
    good = make_pdf(tmp_path / "good.pdf", [_filler(1), _filler(2)]).read_bytes()
    bad = tmp_path / "truncated.pdf"
    bad.write_bytes(good[: len(good) // 3])
    with pytest.raises(SourceError, match="(not a readable PDF|no extractable text)"):
        load_document(bad)


def test_random_bytes_named_pdf_is_rejected(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pdf"
    junk.write_bytes(random.Random(7).randbytes(4096))
    with pytest.raises(SourceError, match="not a readable PDF"):
        load_document(junk)


def test_pdf_without_text_is_rejected(tmp_path: Path) -> None:
    # blank pages: nothing for OCR either (scans: test_formats.py)
    with pytest.raises(SourceError, match="no extractable text and no page images"):
        load_document(make_pdf(tmp_path / "scanned.pdf", ["", ""]))


# -------------------------------------------------------------------------------------------- text/code


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_text_line_numbers(tmp_path: Path, newline: str) -> None:
    lines = [f"note {i}" for i in range(1, 200)]
    lines[116] = FACT  # editor line 117
    f = tmp_path / "notes.md"
    f.write_bytes(newline.join(lines).encode() + newline.encode())
    doc = load_document(f, display_path="docs/notes.md")

    assert doc.kind == "text" and doc.display_path == "docs/notes.md"
    assert doc.n_lines == 199 and doc.page_starts is None and doc.n_pages is None
    assert "\r" not in doc.text
    i = doc.text.index(FACT)
    assert doc.locate(i, i + len(FACT)) == (None, None, 117, 117)
    assert doc.locate(i, i + len(FACT) + 1) == (None, None, 117, 117)  # trailing newline stays on line 117
    assert doc.locate(0, len(doc.text)) == (None, None, 1, 199)
    j = doc.text.index("note 120")
    assert doc.locate(i, j + 3) == (None, None, 117, 120)


def test_code_kind_bom_and_latin1(tmp_path: Path) -> None:
    code = tmp_path / "mod.py"
    code.write_bytes(b"\xef\xbb\xbfdef f():\n    return 1\n")
    doc = load_document(code)
    assert doc.kind == "code" and doc.text.startswith("def f") and doc.n_lines == 2

    legacy = tmp_path / "legacy.txt"
    legacy.write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1"))
    assert load_document(legacy).text == "caf\u00e9 cr\u00e8me\n"

    assert load_document(_write(tmp_path / "Makefile", "all:\n\ttrue\n")).kind == "code"
    assert load_document(_write(tmp_path / "README", "hello\n")).kind == "text"


RUSSIAN = ("Смотритель маяка Орла Венн спрятала медный ключ под девятой ступенью винтовой лестницы.\n"
           "Каждую ночь она поднималась наверх и зажигала лампу, пока рыбаки возвращались домой с уловом.\n"
           "Утром начальник порта записывал в журнал приливы и отливы, а чайки кружили над причалом.\n")
JAPANESE = ("灯台守のオルラ・ヴェンは、真鍮の鍵を螺旋階段の九段目の下に隠した。\n"
            "毎晩、彼女は上に登ってランプに火を灯し、漁師たちは港に帰ってきた。\n"
            "朝になると港長は潮の満ち引きを帳簿に書き、カモメが桟橋の上を飛んでいた。\n")


@pytest.mark.parametrize("text,encoding", [
    (RUSSIAN, "cp1251"),                  # was read as cp1252: mojibake ("Ñìîòðèòåëü")
    (JAPANESE, "shift_jis"),              # was refused as a binary file
    (RUSSIAN + JAPANESE, "utf-16"),       # with a BOM (Python's utf-16 writes one)
    ("Caf\u00e9 cr\u00e8me, na\u00efve \u201cquotes\u201d \u2014 \u20ac5.\n", "cp1252"),
    ("caf\u00e9 cr\u00e8me\n", "latin-1"),
    ("Zur\u00fcck zur Stra\u00dfe, sch\u00f6n und gr\u00fcn.\n", "cp1252"),
])
def test_text_of_an_unknown_encoding_is_read_in_it(tmp_path: Path, text: str, encoding: str) -> None:
    """Text files that are not UTF-8 are read in the encoding charset-normalizer finds (issue 35): the old chain,
    UTF-8 then cp1252 then latin-1, read cp1251 as mojibake and refused Shift-JIS as binary."""
    f = tmp_path / "notes.txt"
    f.write_bytes((text * 3).encode(encoding))
    doc = load_document(f)
    assert doc.text == text * 3
    assert doc.n_lines == (text * 3).count("\n")


def test_a_byte_the_encoding_found_cannot_decode_is_replaced_not_misread(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sources, "DETECT_BYTES", 2000)  # the stray byte lies past the sample
    f = tmp_path / "notes.txt"
    f.write_bytes((RUSSIAN * 20).encode("cp1251") + b"\x98" + RUSSIAN.encode("cp1251"))  # 0x98: unused in cp1251
    assert load_document(f).text == RUSSIAN * 20 + "\ufffd" + RUSSIAN


def test_an_html_page_that_declares_no_charset_is_read_in_the_encoding_found(tmp_path: Path) -> None:
    page = tmp_path / "page.html"  # was read as cp1252 (mojibake)
    body = "".join(f"<p>{line}</p>" for line in RUSSIAN.splitlines())
    page.write_bytes(f"<html><head><title>Маяк</title></head><body><main>{body}</main></body></html>".encode("cp1251"))
    text = load_document(page).text
    assert RUSSIAN.splitlines()[0] in text and "Маяк" in text


def test_a_long_file_is_read_in_the_encoding_its_first_foreign_text_shows(tmp_path: Path, monkeypatch) -> None:
    """The encoding is judged on a sample around the first non-ASCII byte, not on a pure-ASCII head; the whole file
    is then decoded a block at a time (seams included)."""
    monkeypatch.setattr(sources, "READ_BYTES", 1000)
    monkeypatch.setattr(sources, "DETECT_BYTES", 5000)
    head = "".join(f"ascii line {i}\n" for i in range(3000))
    text = head + JAPANESE * 40
    f = tmp_path / "log.txt"
    f.write_bytes(text.encode("shift_jis"))
    assert load_document(f).text == text


def test_binary_file_is_rejected(tmp_path: Path) -> None:
    blob = tmp_path / "data.txt"
    blob.write_bytes(b"abc\x00\x01\x02" * 100)
    with pytest.raises(SourceError, match="binary file"):
        load_document(blob)
    noisy = tmp_path / "noise.txt"  # no NUL, not UTF-8, mostly control bytes
    rng = random.Random(3)
    noisy.write_bytes(bytes(rng.choice(range(1, 32)) for _ in range(2000)) + b"\xff")
    with pytest.raises(SourceError, match="binary file"):
        load_document(noisy)


def test_a_stray_nul_past_the_start_of_a_text_file_is_dropped_not_refused(tmp_path: Path) -> None:
    """An Info manual flattened to text (gzip's) marks its index with NUL and backspace bytes 47 KB in; git reads a
    file as binary only for a NUL in its first 8,000 bytes, and so does epi."""
    body = "".join(f"Line {i} of the manual, about compression.\n" for i in range(400))
    f = tmp_path / "gzip.txt"
    f.write_bytes(body.encode() + b"Appendix B Concept index\n\x00\x08[index\x00\x08]\n* bugs: Problems.\n")
    doc = load_document(f)
    assert "\x00" not in doc.text and doc.text.startswith("Line 0 of the manual") and "* bugs: Problems." in doc.text
    early = tmp_path / "early.txt"
    early.write_bytes(b"text\x00" + body.encode())
    with pytest.raises(SourceError, match="binary file"):
        load_document(early)


def test_an_info_manual_in_a_folder_is_read_as_text(tmp_path: Path) -> None:
    """A GNU Info file (its nodes split by the 0x1f byte, as `gzip -d /usr/share/info/bzip2.info.gz` gives it) is a
    manual, not something to skip: the walk finds it and the reader keeps its words, not its separators."""
    info = tmp_path / "docs" / "bzip2.info"
    info.parent.mkdir()
    info.write_bytes(b"This is bzip2.info, produced by makeinfo.\n\n\x1f\nFile: bzip2.info,  Node: Top,  Next: Intro\n\n"
                     + b"".join(b"bzip2 compresses files using the Burrows-Wheeler block sorting algorithm, line %d.\n" % i
                                for i in range(40))
                     + b"\x1f\nFile: bzip2.info,  Node: Intro,  Prev: Top\n\n1 Introduction\n**************\n")
    (found,) = [item for item in discover([tmp_path / "docs"]) if not isinstance(item, Skipped)]
    doc = load_document(found[0])
    assert "Burrows-Wheeler block sorting" in doc.text and "1 Introduction" in doc.text
    assert document_format(doc.kind, str(info)) == "Info"


@pytest.mark.parametrize("content", [b"", b"  \n\r\n\t \n"])
def test_empty_file_is_rejected(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "empty.md"
    f.write_bytes(content)
    with pytest.raises(SourceError, match="is empty"):
        load_document(f)


def test_missing_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        load_document(tmp_path / "nope.txt")


def test_locate_is_fast_on_large_documents(tmp_path: Path) -> None:
    f = _write(tmp_path / "big.txt", "".join(f"line {i}\n" for i in range(200_000)))
    doc = load_document(f)
    for k in range(0, len(doc.text) - 50, 997):  # ~1.6k calls: must not rescan the text each time
        doc.locate(k, k + 40)
    assert doc.locate(len(doc.text) - 5, len(doc.text)) == (None, None, 200_000, 200_000)


# --------------------------------------------------------------------------------------------- discovery


def _write(path: Path, text: str = "x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _tree(root: Path) -> None:
    _write(root / ".gitignore", "*.log\nsecret/\n!keep.log\n")
    _write(root / "README.md", "# project\n")
    _write(root / "LICENSE", "MIT\n")
    _write(root / "main.py")
    _write(root / "debug.log", "noise\n")
    _write(root / "keep.log", "kept by negation\n")
    _write(root / "secret" / "token.txt", "s3cr3t\n")
    _write(root / "pkg" / ".gitignore", "generated.py\n")
    _write(root / "pkg" / "core.py")
    _write(root / "pkg" / "generated.py")
    _write(root / "pkg" / "sub" / "deep.rs", "fn main() {}\n")
    _write(root / "pkg" / "sub" / "trace.log", "ignored by the root rule\n")
    _write(root / "pkg" / "sub" / ".gitignore", "!wanted.log\n")  # a deeper file overrides the root's *.log
    _write(root / "pkg" / "sub" / "wanted.log", "re-included\n")
    _write(root / "node_modules" / "lib" / "index.js", "module.exports = 1\n")
    _write(root / ".venv" / "lib" / "site.py")
    _write(root / "__pycache__" / "main.py", "stale\n")
    _write(root / "pkg" / "__pycache__" / "core.txt", "stale\n")
    _write(root / "static" / "app.min.js", "a=1\n")
    _write(root / "poetry.lock", "[[package]]\n")
    _write(root / "image.png", "not text we index\n")
    (root / "blob.dat.txt").write_bytes(b"\x00\x01\x02binary")
    make_pdf(root / "docs" / "manual.pdf", ["manual page"])


def test_discover_code_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    _tree(root)
    assert "keep.log" not in [Path(r[1]).name for r in discover([root]) if not isinstance(r, Skipped)]  # .log: not a doc type
    # Make .log ingestible so the `*.log` / `!keep.log` rules are what decides.
    monkeypatch.setattr(sources, "TEXT_EXTS", sources.TEXT_EXTS | {".log"})
    results = list(discover([root]))
    found = [item for item in results if not isinstance(item, Skipped)]
    skipped = [item for item in results if isinstance(item, Skipped)]

    assert [os.path.relpath(d, root) for _, d in found] == sorted(
        [
            "LICENSE",
            "README.md",
            "docs/manual.pdf",
            "keep.log",
            "main.py",
            "pkg/core.py",
            "pkg/sub/deep.rs",
            "pkg/sub/wanted.log",
        ]
    )
    assert all(p.is_absolute() and p == Path(d).resolve() for p, d in found)
    assert [(s.path.name, s.reason) for s in skipped] == [("blob.dat.txt", "binary file")]
    assert list(discover([root])) == results  # stable across runs


def test_discover_subdirectory_inherits_parent_gitignore(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    _tree(root)
    (root / ".git").mkdir()  # inside a work tree, an argument below the top obeys the top's rules
    _write(root / ".git" / "info" / "exclude", "core.py\n")
    assert [d for _, d in discover([root / "pkg"])] == [str(root / "pkg" / "sub" / "deep.rs")]


def test_discover_explicit_dir_inside_ignored_tree(tmp_path: Path) -> None:
    home = tmp_path / "home"  # a dotfiles repo at $HOME that ignores everything by default
    (home / ".git").mkdir(parents=True)
    _write(home / ".gitignore", "*\n")
    _write(home / "docs" / "plan.md", "plan\n")
    _write(home / "docs" / ".gitignore", "draft.md\n")
    _write(home / "docs" / "draft.md", "draft\n")
    assert [d for _, d in discover([home / "docs"])] == [str(home / "docs" / "plan.md")]
    assert list(discover([home])) == []  # walking the repo itself still obeys it


def test_discover_file_args_missing_and_dedup(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    _tree(root)
    explicit = root / "debug.log"  # ignored when walking, but an explicit argument is taken as given
    results = list(discover([explicit, tmp_path / "missing.txt", root / "main.py", root]))
    assert results[0] == (explicit.resolve(), str(explicit))
    assert results[1] == Skipped(tmp_path / "missing.txt", "no such file or directory", fails_run=True)  # a typo fails the run
    assert results[2] == ((root / "main.py").resolve(), str(root / "main.py"))
    displays = [r[1] for r in results[3:] if not isinstance(r, Skipped)]
    assert str(root / "main.py") not in displays and str(root / "README.md") in displays  # yielded once, via the explicit argument


def test_discover_shows_paths_under_the_argument_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "docs" / "README.md", "docs\n")
    _write(tmp_path / "src" / "README.md", "src\n")
    monkeypatch.chdir(tmp_path)
    assert [d for _, d in discover([Path("docs/"), Path("src")])] == ["docs/README.md", "src/README.md"]
    # "." also holds the test's EPI_HOME, whose cache is a link to a directory: named as skipped, not walked
    assert [f[1] for f in discover([Path(".")]) if not isinstance(f, Skipped)] == ["docs/README.md", "src/README.md"]


@pytest.mark.skipif(os.name == "nt", reason="symlinks need privileges on Windows")
def test_discover_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    _write(root / "a.py")
    _write(tmp_path / "outside" / "far.md", "far\n")
    (root / "link.md").symlink_to(tmp_path / "outside" / "far.md")
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "outdir").symlink_to(tmp_path / "outside", target_is_directory=True)
    found = list(discover([root]))
    assert [f for f in found if not isinstance(f, Skipped)] == [
        ((root / "a.py").resolve(), str(root / "a.py")),
        ((tmp_path / "outside" / "far.md").resolve(), str(root / "link.md"))]
    # directory links are not followed (no loop, nothing from outside), and each is named (issue 30, 6)
    assert [f for f in found if isinstance(f, Skipped)] == [Skipped(root / "loop", DIR_LINK),
                                                            Skipped(root / "outdir", DIR_LINK)]


def test_discover_skips_oversized_json(tmp_path: Path) -> None:
    folder = tmp_path / "data"  # not tmp_path itself: it holds the test's EPI_HOME, with a directory link
    _write(folder / "small.json", "{}\n")
    _write(folder / "big.json", "[" + "1," * 600_000 + "1]\n")
    results = list(discover([folder]))
    assert results[0] == Skipped(folder / "big.json", results[0].reason)  # type: ignore[union-attr]
    assert "1 MB" in results[0].reason  # type: ignore[union-attr]
    assert results[1] == ((folder / "small.json").resolve(), str(folder / "small.json"))


# ------------------------------------------------------------------------------------------------ hashing


def test_sha256_stability(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"line one\r\nline two\r\n")
    expected = hashlib.sha256(b"line one\r\nline two\r\n").hexdigest()
    assert file_sha256(f) == expected == file_sha256(f)
    doc = load_document(f)
    assert doc.content_sha256 == expected  # hash of the bytes, not of the normalised text
    f.write_bytes(b"line one\nline two\n")
    assert file_sha256(f) != expected

    pdf = make_pdf(tmp_path / "p.pdf", ["same"])
    assert load_document(pdf).content_sha256 == file_sha256(pdf)
    assert make_pdf(tmp_path / "q.pdf", ["same"]).read_bytes() == pdf.read_bytes()  # deterministic fixture


def test_source_document_is_a_plain_dataclass() -> None:
    doc = SourceDocument(Path("/x"), "x", "text", "a\nb", "0" * 64, None, None, 2)
    assert doc.locate(2, 3) == (None, None, 2, 2)


# ------------------------------------------------------------------------ odd things in normal folders (review)


def test_a_file_name_that_is_not_utf8_is_skipped_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    _write(folder / "good.md", "good\n")
    with open(os.fsencode(folder) + b"/bad\xffname.txt", "wb") as f:  # bytes of another system's encoding
        f.write(b"text " * 50)
    found = list(discover([folder]))
    skipped = [f for f in found if isinstance(f, Skipped)]
    assert [f[1] for f in found if not isinstance(f, Skipped)] == [str(folder / "good.md")]
    assert len(skipped) == 1 and skipped[0].reason == sources.NOT_UTF8_NAME
    named = list(discover([skipped[0].path]))  # named on the command line: the same reason, failing the run
    assert len(named) == 1 and named[0].reason == sources.NOT_UTF8_NAME and named[0].fails_run


def test_a_folder_that_cannot_be_read_is_skipped_and_the_walk_goes_on(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "disk"
    _write(folder / "a.md", "a\n")
    _write(folder / "lost+found" / "b.md", "b\n")
    _write(folder / "z.md", "z\n")
    real_is_file, real_scandir = Path.is_file, os.scandir

    def is_file(self):  # what Python 3.11 does in a folder of mode 000 (as root the test cannot make one)
        if self.parent.name == "lost+found":
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_file(self)

    def scandir(path):
        if Path(path).name == "lost+found":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(Path, "is_file", is_file)
    monkeypatch.setattr(sources.os, "scandir", scandir)
    found = list(discover([folder]))
    assert [f[1] for f in found if not isinstance(f, Skipped)] == [str(folder / "a.md"), str(folder / "z.md")]
    assert [f.reason for f in found if isinstance(f, Skipped)] == ["cannot list directory (Permission denied)"]


def test_a_text_file_that_mentions_the_pdf_header_is_text(tmp_path: Path) -> None:
    notes = _write(tmp_path / "notes.md", "# PDF notes\n\nA PDF file starts with `%PDF-1.7`, then objects.\n")
    doc = load_document(notes)
    assert doc.kind != "pdf" and "%PDF-1.7" in doc.text


def test_html_charsets_are_read_as_browsers_read_them(tmp_path: Path) -> None:
    latin = tmp_path / "latin.html"  # labelled Latin-1, written by Windows: curly quotes and a dash
    latin.write_bytes(b'<html><head><meta charset="iso-8859-1"></head><body><p>He said \x93hello\x94 \x96 and '
                      b'left.</p></body></html>')
    assert "He said \u201chello\u201d \u2013 and left." in load_document(latin).text
    wrong = tmp_path / "utf16.html"  # labelled UTF-16, written as UTF-8 without a BOM
    wrong.write_bytes('<html><head><meta charset="utf-16"></head><body><p>Café au lait.</p></body></html>'
                      .encode("utf-8"))
    assert "Café au lait." in load_document(wrong).text
    comments = tmp_path / "placeholder.html"
    comments.write_text("<!-- generated later -->\n")
    with pytest.raises(sources.NothingToRead):  # skipped with its reason in a folder, like an empty page
        load_document(comments)


def test_a_pdf_with_nothing_on_its_pages_is_skipped_like_an_empty_page(tmp_path: Path) -> None:
    with pytest.raises(sources.NothingToRead):
        load_document(make_pdf(tmp_path / "blank.pdf", ["", ""]))


def test_an_old_word_file_renamed_docx_says_so(tmp_path: Path) -> None:
    renamed = tmp_path / "report.docx"
    renamed.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600)  # Word 97-2003's OLE header
    with pytest.raises(SourceError, match="old Word 97-2003 file renamed .docx"):
        load_document(renamed)
    truncated = tmp_path / "half.docx"
    truncated.write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(SourceError, match="not a zip archive"):  # was "Package not found at '...'"
        load_document(truncated)
