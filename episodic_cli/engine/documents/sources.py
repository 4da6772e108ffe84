"""Source discovery and parsing: turn user paths into SourceDocuments with page/line-addressable text.

Plain engine module: no terminal output. Every per-file failure is a SourceError whose message is one
user-facing line saying what to do; discovery reports notable skips as Skipped values instead of raising.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import logging
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from . import page_ocr, structure
from .blocks import BlockDocument
from .docx_file import DOCX_EXT, read_docx
from .encoding import DETECT_BYTES, guess_encodings
from .epub_file import EPUB_EXT, read_epub
from .html_file import HTML_EXTS, NoText, NotReadable, read_html
from .text import Text, TextSpool, close_text, count_newlines
from ..errors import EpiError
from ..heap import release_free_memory

# pypdf (strict=False) logs a warning for every repaired xref/object; with no handler configured Python's
# last-resort handler would print those to stderr in the middle of the CLI's output. A NullHandler keeps them
# quiet unless the application configures logging itself (records still propagate to its handlers).
logging.getLogger("pypdf").addHandler(logging.NullHandler())

# Sizes are decimal (20 MB = 20 * 10**6 bytes), as everywhere epi reads or shows one.
MAX_FILE_BYTES = 20 * 10**6
# EPUB and Word files are zip archives whose size is mostly pictures: a walk takes them up to this size.
MAX_PACKAGE_BYTES = 200 * 10**6
MAX_JSON_BYTES = 10**6
READ_BYTES = 1 << 20  # a file is read and decoded this much at a time
_SNIFF_BYTES = 8192

# ".info": a GNU Info manual unpacked (gzip -d of /usr/share/info/*.info.gz), read as text: its node separators and
# index marks are stray control bytes the text reader drops or tolerates (_decode_into).
TEXT_EXTS = frozenset({".txt", ".md", ".markdown", ".rst", ".org", ".tex", ".info"})
CODE_EXTS = frozenset(
    """.py .pyi .c .h .cc .cpp .hpp .cu .rs .go .java .kt .scala .swift .js .jsx .ts .tsx .mjs .cjs .rb .php
    .cs .sh .bash .zsh .ps1 .lua .pl .r .jl .sql .css .scss .toml .yaml .yml .ini .cfg .json .xml .proto
    .cmake .gradle .m .mm .hs .ml .ex .exs .erl .clj .el .vim .dart .zig .nim .f90""".split()
)
PDF_EXT = ".pdf"
# Formats read by a parser of their own (engine/documents/*_file.py) into numbered blocks (blocks.py).
BLOCK_EXTS = {EPUB_EXT: "epub", DOCX_EXT: "docx", **{ext: "html" for ext in HTML_EXTS}}
_PACKAGE_EXTS = (EPUB_EXT, DOCX_EXT)
# Extensionless files worth reading, by lower-cased name; prose docs are "text", build recipes are "code".
_DOC_NAMES = frozenset(
    "readme license licence copying notice authors contributors contributing changelog changes history "
    "news install todo security codeowners".split()
)
_CODE_NAMES = frozenset(
    "makefile gnumakefile dockerfile containerfile vagrantfile jenkinsfile procfile gemfile rakefile "
    "brewfile justfile".split()
)
_LOCK_NAMES = frozenset({"package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", ".pnp.cjs", ".pnp.loader.mjs",
                         # a built documentation site's generated indexes: lists of every name, not text to read
                         "searchindex.js", "genindex.html", "py-modindex.html"})
SKIP_DIRS = frozenset(
    """.git .hg .svn node_modules .venv venv env __pycache__ .mypy_cache .pytest_cache .tox .nox dist build
    site-packages .idea .vscode target vendor third_party bower_components .next coverage htmlcov
    _static _sources .yarn""".split()  # a Sphinx site's scripts and styles, and the copies of its pages' sources
)

_BINARY_HINT = "epi reads PDF, EPUB, HTML, Word (.docx), text, Markdown, reST and source code"
# C0 controls other than the whitespace/escape ones real text uses, plus DEL and C1 (a latin-1 decode of binary).
_CONTROL_RE = re.compile(r"[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
_NON_ASCII_RE = re.compile(rb"[\x80-\xff]")
_MULTI_NEWLINE_RE = re.compile(r"\n{3,}")
_TRAILING_WS_RE = re.compile(r"[ \t\f\v]+$", re.MULTILINE)


class SourceError(EpiError):
    """One-line, user-facing reason a file cannot be ingested; the message says what to do."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


class NothingToRead(SourceError):
    """A well-formed document with no text (a docs site's search page): skipped with the reason, like an empty file
    in a folder, not a failure."""


@dataclass
class SourceDocument:
    path: Path
    display_path: str
    kind: str  # "pdf" | "text" | "code"
    text: Text  # a str, or for a long text a SpooledText read by slices (documents/text.py)
    content_sha256: str
    page_starts: list[int] | None
    n_pages: int | None
    n_lines: int | None
    # PDF outline (bookmarks): (level, title, 0-based page) in reading order; None when the PDF has none.
    outline: list[tuple[int, str, int]] | None = None
    text_bytes: int = 0  # the text's size in UTF-8 (what the store will hold of it)
    # EPUB, HTML and Word: where each numbered block starts and the sections the format itself gives (blocks.py)
    blocks: BlockDocument | None = None
    note: str | None = None  # what the user should know about how it was read ("pages 3-9 read by OCR")
    _sections: object | None = field(default=None, init=False, repr=False, compare=False)
    _lines_at: tuple[int, int] = field(default=(0, 0), init=False, repr=False, compare=False)

    def close(self) -> None:
        """Let go of a spooled text's temporary file (a str needs nothing)."""
        close_text(self.text)

    def section(self, char_start: int, char_end: int) -> str | None:
        """Where [char_start, char_end) sits in the document's structure, as stored in events.section (JSON; None
        when the document shows no structure there). See engine/documents/structure.py."""
        if self._sections is None:
            try:
                self._sections = structure.SectionIndex(structure.extract(self))
            except Exception:  # noqa: BLE001 - structure is an extra: a parser's surprise must not fail an ingest
                self._sections = structure.SectionIndex([])
        return structure.encode(structure.event_section(self._sections, char_start, char_end, self.text))

    def locate(self, char_start: int, char_end: int) -> tuple[int | None, int | None, int | None, int | None]:
        """(page_start, page_end, line_start, line_end), 1-based inclusive, for the span [char_start, char_end)."""
        first, last = self._span_chars(char_start, char_end)
        if self.blocks is not None:  # block numbers ride in the line columns (BLOCK_KINDS)
            return None, None, *self.blocks.locate(first, last)
        if self.page_starts is not None:
            # bisect_right: an empty page shares its start offset with the next one, and a character at that
            # offset belongs to the later (non-empty) page.
            return bisect_right(self.page_starts, first), bisect_right(self.page_starts, last), None, None
        return None, None, self._line_of(first), self._line_of(last)

    def _line_of(self, char: int) -> int:
        """1-based line of a character, counting newlines on from the last character asked: ingest locates its events
        in order, so a document's newlines are counted once (no table of line starts: 8 bytes a line on a log of
        millions); asking behind that point counts again from the top."""
        at, newlines = self._lines_at
        if char < at:
            at, newlines = 0, 0
        newlines += count_newlines(self.text, at, char)
        self._lines_at = (char, newlines)
        return newlines + 1

    def _span_chars(self, char_start: int, char_end: int) -> tuple[int, int]:
        """First and last (inclusive) character of the span, trimmed of edge whitespace so that a chunk that
        begins with the page separator or ends on a newline is not attributed to the neighbouring page/line."""
        size = len(self.text)
        if size == 0:
            return 0, 0
        start = min(max(char_start, 0), size - 1)
        end = min(max(char_end, start + 1), size)
        span = self.text[start:end]
        stripped = span.lstrip()
        if not stripped:  # all-whitespace span: fall back to the raw bounds
            return start, end - 1
        s = start + len(span) - len(stripped)
        return s, s + len(stripped.rstrip()) - 1


EMPTY_FILE = "empty file"  # the reason of a quiet skip: an empty __init__.py is normal in a code folder
DIR_LINK = "a link to a directory, not followed (pass the directory itself to ingest it)"


@dataclass
class Skipped:
    path: Path
    reason: str
    # A path the user named that cannot be read (a typo, a symlink loop): the run goes on with the other paths but
    # must not look successful to a script.
    fails_run: bool = False

    @property
    def quiet(self) -> bool:
        return self.reason == EMPTY_FILE


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------- discovery


def _is_candidate(name: str) -> bool:
    lower = name.lower()
    if lower.endswith(".lock") or lower in _LOCK_NAMES or lower.endswith((".min.js", ".min.css")):
        return False
    ext = os.path.splitext(lower)[1]
    if ext:
        return ext in TEXT_EXTS or ext in CODE_EXTS or ext == PDF_EXT or ext in BLOCK_EXTS
    return lower in _DOC_NAMES or lower in _CODE_NAMES


def _load_ignore(path: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except Exception:
        # One malformed pattern must not discard the whole file (git ignores bad lines too).
        good = []
        for line in lines:
            try:
                pathspec.GitIgnoreSpec.from_lines([line])
                good.append(line)
            except Exception:
                continue
        return pathspec.GitIgnoreSpec.from_lines(good)


# An ignore source: the spec plus its directory as a "/"-terminated prefix relative to the top of the tree
# ("" for the top itself); git evaluates patterns relative to the directory holding the .gitignore.
_Rules = list[tuple[str, pathspec.GitIgnoreSpec]]


def _ignored(rules: _Rules, rel: str, is_dir: bool) -> bool:
    # Deeper .gitignore files override shallower ones, and .git/info/exclude (first in the list) ranks lowest;
    # within one spec check_file already applies git's last-match-wins, negations included.
    for prefix, spec in reversed(rules):
        if not rel.startswith(prefix):
            continue
        verdict = spec.check_file(rel[len(prefix) :] + ("/" if is_dir else "")).include
        if verdict is not None:
            return verdict
    return False


def _is_file(path: Path) -> bool:
    """Path.is_file, False where it cannot be told (a folder that cannot be read raises PermissionError on 3.11)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _utf8_name(path: Path) -> bool:
    """Whether the file name can be stored: a name that is not valid UTF-8 (bytes from another system's encoding)
    reaches Python as surrogates, which SQLite refuses."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


NOT_UTF8_NAME = "its name is not valid UTF-8 (bytes of another encoding); rename the file to ingest it"


def _initial_rules(root: Path) -> tuple[str, _Rules]:
    """Rules inherited from the enclosing git work tree (exclude file and ancestors' .gitignore files), and
    root's path relative to the work-tree top, so a subdirectory argument is filtered the way git would."""
    top = next((d for d in (root, *root.parents) if (d / ".git").exists()), root)
    rules: _Rules = []
    exclude = top / ".git" / "info" / "exclude"
    if _is_file(exclude) and (spec := _load_ignore(exclude)):
        rules.append(("", spec))
    rel_root = "" if top == root else root.relative_to(top).as_posix() + "/"
    parts = root.relative_to(top).parts
    for depth in range(len(parts)):  # ancestors strictly above root; root's own file is read by the walk
        d = top.joinpath(*parts[:depth])
        if _is_file(d / ".gitignore") and (spec := _load_ignore(d / ".gitignore")):
            rules.append(("/".join(parts[:depth]) + ("/" if depth else ""), spec))
        if _ignored(rules, "/".join(parts[: depth + 1]), True):
            # The user named a directory git would ignore (e.g. a dotfiles repo in $HOME ignoring "*"): an
            # explicit argument wins, as for files, so inherited rules must not silently empty the walk.
            return rel_root, []
    return rel_root, rules


def _walk(root: Path) -> Iterator[tuple[Path, str] | Skipped]:
    rel_root, rules = _initial_rules(root)
    yield from _walk_dir(root, rel_root, "", rules)


def _walk_dir(directory: Path, top_rel: str, display_rel: str, rules: _Rules) -> Iterator[tuple[Path, str] | Skipped]:
    if _is_file(directory / ".gitignore") and (spec := _load_ignore(directory / ".gitignore")):
        rules = [*rules, (top_rel, spec)]
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        yield Skipped(directory, f"cannot list directory ({exc.strerror or exc})")
        return
    for entry in entries:
        name = entry.name
        path = Path(entry.path)
        try:
            is_real_dir = entry.is_dir(follow_symlinks=False)
            is_file = entry.is_file()  # follows file symlinks on purpose
        except OSError:
            continue
        if is_real_dir:
            if name in SKIP_DIRS or name.endswith(".egg-info") or _ignored(rules, top_rel + name, True):
                continue
            yield from _walk_dir(path, f"{top_rel}{name}/", f"{display_rel}{name}/", rules)
            continue
        # Directory symlinks (is_dir false above, is_file false here) are never followed: no loops, no escapes. Said
        # once each, since what they lead to (often outside the folder) is then silently missing from the store.
        if not is_file and entry.is_symlink() and path.is_dir() and not _ignored(rules, top_rel + name, True):
            yield Skipped(path, DIR_LINK)
            continue
        if not is_file or not _is_candidate(name) or _ignored(rules, top_rel + name, False):
            continue
        if not _utf8_name(path):
            yield Skipped(path, NOT_UTF8_NAME)
            continue
        try:
            size = entry.stat().st_size
        except OSError as exc:
            yield Skipped(path, f"cannot read ({exc.strerror or exc})")
            continue
        if size == 0:
            yield Skipped(path, EMPTY_FILE)
            continue
        package = name.lower().endswith(_PACKAGE_EXTS)
        if size > (MAX_PACKAGE_BYTES if package else MAX_FILE_BYTES):
            limit = f"{(MAX_PACKAGE_BYTES if package else MAX_FILE_BYTES) // 10**6} MB"
            yield Skipped(path, f"larger than {limit} (pass the file explicitly to ingest it anyway)")
            continue
        if name.lower().endswith(".json") and size > MAX_JSON_BYTES:
            yield Skipped(path, f"JSON file larger than {MAX_JSON_BYTES // 10**6} MB, probably data (pass it "
                                "explicitly to ingest it)")
            continue
        try:  # a file that cannot be opened is skipped whatever its format
            with open(path, "rb") as f:
                head = f.read(_SNIFF_BYTES)
        except OSError as exc:
            yield Skipped(path, f"cannot read ({exc.strerror or exc})")
            continue
        if not package and not name.lower().endswith(PDF_EXT):  # PDFs and zips legitimately hold binary
            if b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
                yield Skipped(path, "binary file")
                continue
            if _is_blank(path, head, size):
                yield Skipped(path, EMPTY_FILE)
                continue
        yield path, display_rel + name


def _is_blank(path: Path, head: bytes, size: int) -> bool:
    """Whitespace only (load_document would refuse it as empty); reads past the sniffed head only when that head
    is blank, which a real document's never is."""
    if head.removeprefix(codecs.BOM_UTF8).strip():
        return False
    if size <= len(head):
        return True
    try:
        with open(path, "rb") as f:
            return not any(block.strip() for block in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return False  # let load_document report why it cannot be read


def _unreadable_argument(arg: Path) -> str | None:
    """Why a path named on the command line cannot be ingested, or None when it exists. A symlink loop and a broken
    symlink are told apart from a plain typo: "no such file" would send the user looking for the wrong fault."""
    try:
        os.stat(arg)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop: the link leads back to itself; fix or remove it"
        if os.path.islink(arg):
            return f"broken symlink: it points to {os.readlink(arg)}, which does not exist"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "no such file or directory"
        return f"cannot read ({exc.strerror or exc})"
    return None


def discover(paths: Iterable[Path]) -> Iterator[tuple[Path, str] | Skipped]:
    """Yield (absolute_path, display_path) for every ingestible file under `paths`, or Skipped for notable skips.

    Arguments keep the user's order; directory contents come in sorted order. A file reached twice (listed
    and inside a listed directory, or via a symlink) is yielded once."""
    seen: set[Path] = set()
    for arg in paths:
        arg = Path(arg)
        problem = _unreadable_argument(arg) or (None if _utf8_name(arg) else NOT_UTF8_NAME)
        if problem:
            yield Skipped(arg, problem, fails_run=True)
            continue
        if arg.is_dir():  # an explicit directory argument is walked even if it is a symlink or ignored
            found: Iterable[tuple[Path, str] | Skipped] = _walk(arg.resolve())
        elif arg.is_file():
            found = [(arg, str(arg))]
        else:
            yield Skipped(arg, "not a regular file or directory", fails_run=True)
            continue
        for item in found:
            if isinstance(item, Skipped):
                yield item
                continue
            resolved = item[0].resolve()
            if resolved not in seen:
                seen.add(resolved)
                # Paths inside a directory argument are shown under it as the user wrote it ("src/a.py"), the way
                # grep does, so that `epi ingest docs/ src/` keeps its two README.md files apart in citations.
                shown = item[1] if arg.is_file() else os.path.normpath(os.path.join(str(arg), item[1]))
                yield resolved, shown


# ------------------------------------------------------------------------------------------------- parsing

_FORMAT_NAMES = {"pdf": "PDF", "epub": "EPUB", "html": "HTML", "docx": "Word", ".md": "Markdown",
                 ".markdown": "Markdown", ".rst": "reST", ".org": "Org", ".tex": "LaTeX", ".info": "Info"}


def document_format(kind: str, path: str) -> str:
    """The format a stored document was read as, for `epi ls`: "PDF", "EPUB", "HTML", "Word", "Markdown",
    "reST", "text", or "code (.py)"."""
    if kind in _FORMAT_NAMES:
        return _FORMAT_NAMES[kind]
    ext = os.path.splitext(path.lower())[1]
    if kind == "code":
        return f"code ({ext})" if ext else "code"
    return _FORMAT_NAMES.get(ext, "text")



def _kind_for(path: Path) -> str:
    ext = path.suffix.lower()
    if ext in CODE_EXTS or (not ext and path.name.lower() in _CODE_NAMES):
        return "code"
    return "text"  # docs, extensionless docs, and anything unknown the user passed explicitly


def _normalise_page(raw: str) -> str:
    text = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _TRAILING_WS_RE.sub("", text)
    return _MULTI_NEWLINE_RE.sub("\n\n", text).strip("\n")


def _short(exc: Exception) -> str:
    msg = " ".join(str(exc).split()) or type(exc).__name__
    return msg if len(msg) <= 120 else msg[:117] + "..."


def _pdf_outline(reader) -> list[tuple[int, str, int]]:
    """The outline's entries as (level, title, 0-based page), nesting depth from 1; [] when it has none or pypdf
    cannot read it (a damaged outline must not fail the document)."""
    found: list[tuple[int, str, int]] = []

    def walk(items, level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
                continue
            try:
                page = reader.get_destination_page_number(item)
                title = str(item.title or "").strip()
            except Exception:  # noqa: BLE001 - pypdf raises many types on odd outlines
                continue
            if page is not None and page >= 0 and title:
                found.append((level, title, page))

    try:
        walk(reader.outline, 1)
    except Exception:  # noqa: BLE001
        return []
    return found


def page_ranges(pages: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    runs: list[list[int]] = []
    for p in pages:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _has_images(page) -> bool:
    try:
        return len(page.images) > 0
    except Exception:  # noqa: BLE001 - pypdf raises many types on odd image streams
        return False


def _read_pdf(file, shown: str, path: Path, spool: TextSpool,
              on_page: Callable[[int, int], None] | None) -> tuple[list[int], list[tuple[int, str, int]], str | None]:
    """The pages' text, normalised, written to `spool` with a blank line between pages; (page starts, outline, a
    note on pages read by OCR or left unread). A page with images and no text layer is a scan: OCR reads it when
    installed (page_ocr.py), and otherwise it is named in the note, never dropped silently."""
    # Imported lazily: only PDF ingestion pays pypdf's import cost.
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    encrypted_msg = (
        f"{shown} is encrypted (password-protected); decrypt it first, e.g. with `qpdf --decrypt`"
    )
    try:
        reader = PdfReader(file, strict=False)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")  # many "encrypted" PDFs only restrict printing/copying
            except DependencyError:
                raise SourceError(
                    f"{shown} is encrypted with AES, which needs the `cryptography` package; install it "
                    "or decrypt the file first, e.g. with `qpdf --decrypt`",
                    path,
                ) from None
            if not opened:
                raise SourceError(encrypted_msg, path)
        pages = list(reader.pages)
    except SourceError:
        raise
    except Exception as exc:  # pypdf raises many unrelated types on damaged input
        raise SourceError(f"{shown} is not a readable PDF ({_short(exc)})", path) from exc
    if not pages:
        raise SourceError(f"{shown} is not a readable PDF (it has no pages)", path)

    starts: list[int] = []
    failures: list[Exception] = []
    has_text = False
    scanned: list[int] = []  # 1-based pages with images and no text layer
    by_ocr: list[int] = []
    for number, page in enumerate(pages, 1):
        if starts:
            spool.write("\n\n")
        starts.append(spool.n_chars)
        try:
            text = _normalise_page(page.extract_text() or "")
        except Exception as exc:  # keep physical numbering: a broken page becomes an empty one
            failures.append(exc)
            continue
        if not text.strip() and _has_images(page):
            scanned.append(number)
            try:
                ocr = page_ocr.available()
            except page_ocr.OcrModelError as exc:
                raise SourceError(f"{shown}: {exc}", path) from None
            if ocr:
                if on_page is not None:
                    on_page(number, len(pages))
                try:
                    text = _normalise_page(page_ocr.read_page(page))
                except Exception:  # noqa: BLE001 - an image OCR cannot decode leaves the page unread, and named
                    text = ""
                if text.strip():
                    by_ocr.append(number)
        has_text = has_text or bool(text.strip())
        spool.write(text)
    if len(failures) == len(pages):
        raise SourceError(f"{shown} is not a readable PDF ({_short(failures[0])})", path)
    unread = [p for p in scanned if p not in by_ocr]
    if not has_text:
        if unread and not page_ocr.available():
            raise SourceError(f"{shown}: pages {page_ranges(unread)} have no text layer (scanned images); "
                              f"{page_ocr.OCR_HINT}", path)
        if unread:
            raise SourceError(f"{shown} has no text: OCR found none on its scanned pages ({page_ranges(unread)})",
                              path)
        raise NothingToRead(f"{shown} has no extractable text and no page images; nothing to ingest", path)
    notes = []
    if by_ocr:
        notes.append(f"pages {page_ranges(by_ocr)} read by OCR")
    if unread:
        why = "OCR found no text on them" if page_ocr.available() else page_ocr.OCR_HINT
        notes.append(f"pages {page_ranges(unread)} have no text layer and were not read ({why})")
    return starts, _pdf_outline(reader), "; ".join(notes) or None


class _NotThisCodec(Exception):
    """The file does not decode with the codec tried; the next one is tried."""


class _Empty(Exception):
    """Whitespace only."""


def _detection_sample(file) -> bytes:
    """What charset-normalizer judges a text that is not UTF-8 on: up to DETECT_BYTES of the file from a little before
    its first non-ASCII byte (a long ASCII head says nothing about the encoding), cut after the sample's last line
    end so that no multi-byte character is cut in two (no legacy encoding uses byte 0x0A inside a character)."""
    file.seek(0)
    offset = 0
    for block in iter(lambda: file.read(READ_BYTES), b""):
        m = _NON_ASCII_RE.search(block)
        if m is None:
            offset += len(block)
            continue
        file.seek(max(0, offset + m.start() - 4096))
        sample = file.read(DETECT_BYTES)
        cut = sample.rfind(b"\n")
        return sample[: cut + 1] if cut > 0 and len(sample) == DETECT_BYTES else sample
    return b""


def _decode_into(file, codec: str, refuse_nul: bool, spool: TextSpool, binary: SourceError,
                 errors: str = "strict") -> tuple[str, int]:
    """Decode the whole file with `codec` a block at a time into `spool`, newlines normalised (so that line numbers
    match an editor's); (the file's sha256, its number of lines). Raises `binary` for a binary file's marks: with
    `refuse_nul`, a NUL byte in the first `_SNIFF_BYTES` (git's rule, and the folder walk's); a NUL further on is a
    stray mark in a text file (an Info manual's index markers, a log's bad write), dropped and counted with the
    other control characters."""
    file.seek(0)
    sha = hashlib.sha256()
    decoder = codecs.getincrementaldecoder(codec)(errors)
    n_decoded = controls = newlines = 0
    carried_cr, last, has_text = False, "", False
    first = True
    while True:
        block = file.read(READ_BYTES)
        final = not block
        sha.update(block)
        if refuse_nul and first and b"\x00" in block[:_SNIFF_BYTES]:
            raise binary
        first = False
        try:
            piece = decoder.decode(block, final=final)
        except UnicodeDecodeError:
            raise _NotThisCodec from None
        # Text may carry a stray control character; binary blobs carry many (counted before newlines are folded).
        n_decoded += len(piece)
        controls += len(_CONTROL_RE.findall(piece))
        piece = piece.replace("\x00", "")
        if carried_cr:  # a CR that ended the previous block: it may be half of a CRLF
            piece = "\r" + piece
        carried_cr = piece.endswith("\r") and not final
        if carried_cr:
            piece = piece[:-1]
        piece = piece.replace("\r\n", "\n").replace("\r", "\n")
        has_text = has_text or bool(piece.strip())
        newlines += piece.count("\n")
        last = piece[-1:] or last
        spool.write(piece)
        release_free_memory()  # the block's temporaries (several MB) would otherwise pile up as free heap (heap.py)
        if final:
            break
    if controls > max(8, n_decoded // 100):
        raise binary
    if not has_text:
        raise _Empty
    return sha.hexdigest(), newlines + (0 if last == "\n" else 1)


def _load_blocks(path: Path, shown: str, kind: str, spool_dir: Path | None) -> SourceDocument:
    """An EPUB, HTML or Word file, read by its own parser into numbered blocks."""
    try:
        sha = file_sha256(path)
        if kind == "epub":
            blocks = read_epub(path, spool_dir)
        elif kind == "docx":
            blocks = read_docx(path, spool_dir)
        else:
            blocks = read_html(path.read_bytes(), spool_dir)
    except NoText as exc:
        raise NothingToRead(str(exc), path) from None
    except NotReadable as exc:
        raise SourceError(f"{shown}: {exc}", path) from None
    except FileNotFoundError:
        raise SourceError(f"{shown}: no such file; check the path", path) from None
    except PermissionError:
        raise SourceError(f"{shown}: permission denied; check the file's permissions", path) from None
    return SourceDocument(path.resolve(), shown, kind, blocks.text, sha, None, None, len(blocks.starts),
                          text_bytes=blocks.utf8_bytes, blocks=blocks)


def load_document(path: Path, display_path: str | None = None, spool_dir: Path | None = None,
                  on_page: Callable[[int, int], None] | None = None) -> SourceDocument:
    """Read one file into a SourceDocument. The file is read a block at a time and a long text is spooled to a
    temporary file in `spool_dir` (documents/text.py): memory does not grow with the file's size. `on_page(page,
    pages)` is called before each scanned page OCR reads (seconds a page)."""
    path = Path(path)
    shown = display_path if display_path is not None else str(path)
    block_kind = BLOCK_EXTS.get(path.suffix.lower())
    if block_kind is not None and not path.is_dir():
        return _load_blocks(path, shown, block_kind, spool_dir)
    try:
        file = open(path, "rb")
    except FileNotFoundError:
        raise SourceError(f"{shown}: no such file; check the path", path) from None
    except IsADirectoryError:
        raise SourceError(f"{shown} is a directory; pass directories to discovery, not as a document", path) from None
    except PermissionError:
        raise SourceError(f"{shown}: permission denied; check the file's permissions", path) from None
    except OSError as exc:
        raise SourceError(f"{shown} cannot be read ({exc.strerror or exc})", path) from None
    empty = SourceError(f"{shown} is empty; nothing to ingest", path)
    spool = TextSpool(spool_dir)
    try:
        with file:
            head = file.read(1024)
            resolved = path.resolve()
            # A PDF by its name, or by its header at the start (a text file that mentions "%PDF-1.7" is text)
            if path.suffix.lower() == PDF_EXT or head.lstrip()[:5] == b"%PDF-":
                file.seek(0)
                sha, has_bytes = hashlib.sha256(), False
                for block in iter(lambda: file.read(READ_BYTES), b""):
                    sha.update(block)
                    has_bytes = has_bytes or bool(block.strip())
                if not has_bytes:
                    raise empty
                file.seek(0)
                starts, outline, note = _read_pdf(file, shown, path, spool, on_page)
                return SourceDocument(resolved, shown, "pdf", spool.finish(), sha.hexdigest(), starts, len(starts),
                                      None, outline or None, text_bytes=spool.utf8_bytes, note=note)
            binary = SourceError(f"{shown} looks like a binary file; {_BINARY_HINT}", path)
            if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 with BOM (e.g. Windows PowerShell output)
                tries = [("utf-16", False, "strict")]
            else:
                tries = [("utf-8-sig", True, "strict")]
            guesses: list[str] | None = None
            while tries:
                codec, refuse_nul, errors = tries.pop(0)
                try:
                    sha, n_lines = _decode_into(file, codec, refuse_nul, spool, binary, errors)
                except _NotThisCodec:
                    spool.discard()
                    spool = TextSpool(spool_dir)
                    if guesses is None and refuse_nul:
                        # Not UTF-8: the encoding charset-normalizer finds likeliest (cp1251, Shift-JIS, cp1252, ...),
                        # judged on a sample; should the rest of the file not decode in it, the bytes it cannot decode
                        # are replaced (a lower-ranked encoding that happens to decode every byte reads worse). None
                        # at all: not text. The control-character count still rejects binary that got this far.
                        guesses = guess_encodings(_detection_sample(file))[:1]
                        tries = [(g, True, "strict") for g in guesses] + [(g, True, "replace") for g in guesses]
                    continue
                return SourceDocument(resolved, shown, _kind_for(path), spool.finish(), sha, None, None, n_lines,
                                      text_bytes=spool.utf8_bytes)
            raise binary
    except _Empty:
        spool.discard()
        raise empty from None
    except OSError as exc:
        spool.discard()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # the ingest run stops on a full disk with what it needs (ingest/pipeline.py)
        raise SourceError(f"{shown} cannot be read ({exc.strerror or exc})", path) from None
    except BaseException:
        spool.discard()
        raise
