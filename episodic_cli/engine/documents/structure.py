"""Where a piece of a document sits in its structure: chapters, sections and headings of prose, and the classes and
functions that enclose a piece of code.

`extract(doc)` finds the document's sections as character ranges: PDF outline entries (pypdf, read by
sources._read_pdf) placed where their title appears on the page, headings detected on PDF pages when there is no
outline, Markdown (ATX and setext, by markdown-it-py's CommonMark parse) and reST (adorned titles) headings,
plain-text headings ("CHAPTER III", "Chapter 3: Title", "3. Title", "2.4 Title", underlined titles), Python classes and
functions (the `ast` module) and, for other languages, a regex over definition lines with an indentation-based end.
Other headings are found in one pass over the lines, reading ahead two (a text.Text may be a spooled long text).
`event_section(index, c0, c1)` is what an event stores (events.section, docs/store-format.md): the path of sections
that covers most of it and the other paths it touches; `describe` turns that into the citation's words
(`ch. 3 "The Betrayal"`, `class Cache, def get`).

A node is [kind, number, title]: kind "part", "chapter", "appendix", "section" (a numbered or plain heading) or a
code keyword ("class", "def", "function", "fn", ...); number as written in the document ("III", "02.1") or None.
Plain engine module: no terminal output, no llama.cpp.
"""
from __future__ import annotations

import ast
import json
import re
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import islice

import numpy as np

from .text import IN_MEMORY_CHARS, Text, iter_lines

CODE_KINDS = frozenset("class def function func fn method struct enum trait impl interface module object sub".split())
TITLE_MAX = 80          # longer "headings" are sentences
DISPLAY_TITLE_MAX = 48  # citations cut longer titles

_NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                 "sixteen seventeen eighteen nineteen twenty").split()
ORDINAL_WORDS = ("zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
                  "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth").split()
_ROMAN_RE = re.compile(r"(?=[ivxlcdm])m{0,3}(cm|cd|d?c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})", re.I)
_ROMAN_VALUES = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100, "d": 500, "m": 1000}
NUMBER_ALT = r"\d{1,4}|[ivxlcdm]{1,8}|" + "|".join(_NUMBER_WORDS[1:])

_CHAPTER_RE = re.compile(
    rf"^(?P<kind>chapter|chap\.|part|book|appendix)\s+(?P<num>{NUMBER_ALT}|[a-z])\b\.?\s*(?:[:.\-\u2013\u2014]\s*)?"
    r"(?P<title>.*)$", re.I)
_NUMBERED_RE = re.compile(r"^\*?(?P<num>\d{1,3}(?:\.\d{1,3})*)(?:\*|\.)?[ \t]+(?P<title>\S.*)$")
# The line scan's Markdown (markdown_headings on a spooled text): an ATX heading indented up to 3 spaces, whose closing
# #s need a blank before them; a setext underline; lines that open a block a setext title cannot be (a list item, a
# block quote, a thematic break, an ATX heading).
_MD_ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?=[ \t]|$)(.*)$")
_MD_ATX_CLOSE_RE = re.compile(r"(?:^|[ \t])#+$")
_MD_SETEXT_RE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_MD_NOT_PARAGRAPH_RE = re.compile(r"^ {0,3}(?:[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|#{1,6}(?:[ \t]|$))")
_FENCE_RE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_ADORNMENT_RE = re.compile(r"^([=\-~^*+#`:'\"_.])\1{2,}[ \t]*$")


def roman_to_int(text: str) -> int | None:
    t = text.lower()
    if not t or not _ROMAN_RE.fullmatch(t):
        return None
    total = 0
    for a, b in zip(t, t[1:] + " "):
        v = _ROMAN_VALUES[a]
        total += -v if b != " " and _ROMAN_VALUES[b] > v else v
    return total


def number_value(text: str | None) -> str | None:
    """A chapter or section number as compared: "III" -> "3", "three" -> "3", "02.1" -> "2.1", "A" -> "a"."""
    if text is None:
        return None
    t = text.strip().strip("*.").lower()
    if not t:
        return None
    if re.fullmatch(r"\d+(?:\.\d+)*", t):
        return ".".join(str(int(p)) for p in t.split("."))
    if t in _NUMBER_WORDS:
        return str(_NUMBER_WORDS.index(t))
    if t in ORDINAL_WORDS:
        return str(ORDINAL_WORDS.index(t))
    m = re.fullmatch(r"(\d+)(?:st|nd|rd|th)", t)
    if m:
        return str(int(m.group(1)))
    roman = roman_to_int(t)
    if roman is not None:
        return str(roman)
    return t if re.fullmatch(r"[a-z]", t) else None


@dataclass
class Section:
    start: int   # character range [start, end) of the document
    end: int
    level: int   # nesting depth: a section ends where the next one of the same or a lower level begins
    kind: str
    number: str | None
    title: str

    @property
    def node(self) -> list:
        return [self.kind, self.number, self.title]


# ------------------------------------------------------------------------------------------------ headings


def parse_heading(text: str, strict: bool) -> tuple[str, str | None, str] | None:
    """(kind, number, title) of a heading line. strict (plain text and PDF pages): only chapter-like or numbered
    lines that read like titles; lenient (Markdown, reST, PDF outline): any text, numbered or not."""
    line = " ".join(text.split())
    if not line or len(line) > TITLE_MAX + 20:
        return None
    m = _CHAPTER_RE.match(line)
    if m:
        kind = m.group("kind").lower().rstrip(".")
        kind = {"chap": "chapter", "book": "part"}.get(kind, kind)
        title = m.group("title").strip()
        if strict and (len(title) > TITLE_MAX or title.endswith((",", ";")) or _sentence_like(title)):
            return None
        if kind == "appendix" or number_value(m.group("num")) is not None:
            return kind, m.group("num"), title
    m = _NUMBERED_RE.match(line)
    if m:
        title = m.group("title").strip()
        if not strict or _title_like(title):
            return "section", m.group("num").strip("*"), title
        return None
    if strict:
        return None
    return "section", None, line


def _sentence_like(title: str) -> bool:
    return len(title.split()) > 12 or bool(re.search(r"[.!?]\s+\S", title))


def _title_like(title: str) -> bool:
    """A numbered line that is a heading, not an item of a numbered list: short, capitalised, no sentence end."""
    words = title.split()
    return (0 < len(words) <= 10 and len(title) <= TITLE_MAX and title[0].isupper()
            and not title.endswith((".", ",", ";", ":")) and not _sentence_like(title))


LineWindow = tuple[int, int, str, "str | None", list[tuple[int, str]]]


def _line_windows(text: Text, ahead: int = 2) -> Iterator[LineWindow]:
    """(index, offset, line, the previous line or None, up to `ahead` next lines as (offset, line)) for each line,
    read as a stream: a heading is recognised by its neighbours, never by the whole text."""
    lines = iter_lines(text)
    window = deque(islice(lines, ahead + 1))
    previous, i = None, 0
    while window:
        pos, line = window.popleft()
        yield i, pos, line, previous, list(window)
        window.extend(islice(lines, 1))
        previous, i = line, i + 1


def sections_from_heads(heads: list[tuple[int, int, str, str | None, str]], size: int) -> list[Section]:
    """Headings (offset, level, kind, number, title) -> sections: each runs to the next heading of the same or a
    lower level (a later offset), or to the end of the document. Found walking back from the last heading with the
    nearest later offset of each level: linear in the headings (a long log may have tens of thousands)."""
    heads = sorted(heads, key=lambda h: (h[0], h[1]))
    ends = [size] * len(heads)
    nearest: dict[int, int] = {}  # level -> the smallest offset of that level after the heading at hand
    i = len(heads) - 1
    while i >= 0:
        first = i  # the headings at this offset: none of them ends another
        while first > 0 and heads[first - 1][0] == heads[i][0]:
            first -= 1
        for k in range(first, i + 1):
            ends[k] = min((at for level, at in nearest.items() if level <= heads[k][1]), default=size)
        for k in range(first, i + 1):
            nearest[heads[k][1]] = heads[k][0]
        i = first - 1
    return [Section(start, end, level, kind, number, title)
            for (start, level, kind, number, title), end in zip(heads, ends)]


def _prose_level(kind: str, number: str | None, chapters: bool) -> int:
    if kind == "part":
        return 0
    if kind in ("chapter", "appendix"):
        return 1
    depth = len(number.split(".")) if number else 1
    return depth + (1 if chapters else 0)


def text_headings(text: Text, page_lines: bool = False) -> list[Section]:
    """Plain text: chapter/part lines ("CHAPTER III", "Chapter 3: Title"; a bare "CHAPTER III" takes the next short
    line as its title), numbered headings set off by a blank line ("3. Title", "2.4 Title", Vim's "*02.1*  Title"),
    and titles underlined with a row of = - ~ ... . `page_lines` (PDF pages, where extraction keeps no blank lines):
    numbered headings need two levels ("2.4 Title") unless they open a page."""
    found: list[tuple[int, str, str | None, str, int]] = []  # offset, kind, number, title, adornment level or -1
    styles: list[str] = []
    for i, pos, line, previous, following in _line_windows(text):
        stripped = line.strip()
        if not stripped or len(stripped) > TITLE_MAX + 20:
            continue
        prev_blank = previous is None or not previous.strip() or bool(_ADORNMENT_RE.match(previous.strip()))
        nxt = following[0][1].strip() if following else ""
        head = parse_heading(stripped, strict=True)
        if head is not None and head[0] != "section":
            kind, number, title = head
            # A bare "CHAPTER III" takes its title from the next non-blank line (within two) when that reads like one.
            below = next((ln.strip() for _, ln in following[:2] if ln.strip()), "")
            if not title and below and len(below) <= TITLE_MAX and not _sentence_like(below) \
                    and not below.endswith((".", ",", ";")) and parse_heading(below, strict=True) is None:
                title = below
            found.append((pos + line.index(stripped[0]), kind, number, title, -1))
            continue
        if head is not None:
            opens_page = page_lines and (previous is None or not previous.strip())
            ok = (len(head[1].split(".")) >= 2 or opens_page) if page_lines else prev_blank
            if ok and line[:1] not in (" ", "\t"):
                found.append((pos, *head, -1))
            continue
        if (not page_lines and _ADORNMENT_RE.match(nxt) and line[:1] not in (" ", "\t")
                and 0.6 * len(stripped) <= len(nxt) <= 1.5 * len(stripped) + 2 and not _sentence_like(stripped)
                and not _ADORNMENT_RE.match(stripped)):
            if nxt[0] not in styles:
                styles.append(nxt[0])
            found.append((pos, "section", None, stripped, styles.index(nxt[0])))
    chapters = any(f[1] in ("chapter", "appendix") for f in found)
    heads = []
    for pos, kind, number, title, style in found:
        level = _prose_level(kind, number, chapters) if style < 0 else style + 1 + (1 if chapters else 0)
        heads.append((pos, level, kind, number, title))
    return sections_from_heads(heads, len(text))


MARKDOWN_PARSE_MAX_CHARS = IN_MEMORY_CHARS  # longer Markdown keeps the line scan (markdown_headings says why)


def markdown_headings(text: Text) -> list[Section]:
    """ATX (# Title) and setext (Title / ===) headings, as CommonMark reads them (markdown-it-py): not in fenced or
    indented code, up to three spaces of indent, `- item` above `---` a list item and a rule; the level is the #s
    (= is 1, - is 2). Only top-level headings are sections: one inside a list item or a block quote is not.

    A text short enough to be held as a str (IN_MEMORY_CHARS, 2M characters) is parsed in one go: markdown-it holds
    every block's tokens at once (2M characters of list-heavy Markdown: ~80 MB for ~3 s, beside minutes of ingest
    for such a file). A longer text is spooled to disk to keep memory bounded, and a CommonMark parse cannot go a
    slice at a time (a list or a fence runs across any cut), so it keeps the line scan, which follows the same rules
    for the usual cases but does not track lists or block quotes."""
    if isinstance(text, str) and len(text) <= MARKDOWN_PARSE_MAX_CHARS:
        return _markdown_headings_parsed(text)
    return _markdown_headings_scanned(text)


@cache
def _markdown_parser():
    from markdown_it import MarkdownIt

    # Block structure only: the inline rules (emphasis, links) would build a token tree for every paragraph, and a
    # heading's title is its inline token's source text, which the block parse already sets.
    return MarkdownIt("commonmark").disable(["inline", "text_join"])


def _markdown_heading(pos: int, level: int, source: str) -> tuple[int, int, str, str | None, str]:
    title = " ".join(source.split())  # a setext title may run over several lines
    kind, number, title = parse_heading(title, strict=False) or ("section", None, title)
    return pos, level, kind, number, title


def _markdown_headings_parsed(text: str) -> list[Section]:
    # markdown-it counts a lone \r as a line break; a space in its place keeps its line numbers those of split("\n").
    tokens = _markdown_parser().parse(text.replace("\r", " ") if "\r" in text else text)
    starts = line_offsets(text)
    heads = []
    for i, token in enumerate(tokens):
        if token.type != "heading_open" or token.level != 0 or not token.map:
            continue
        source = tokens[i + 1].content if i + 1 < len(tokens) and tokens[i + 1].type == "inline" else ""
        if source.strip():
            heads.append(_markdown_heading(int(starts[token.map[0]]), int(token.tag[1:]), source))
    return sections_from_heads(heads, len(text))


def _markdown_headings_scanned(text: Text) -> list[Section]:
    """The line scan for texts too long to parse whole (see markdown_headings): fences, ATX and setext headings by
    CommonMark's line rules, read as a stream two lines at a time."""
    heads, fenced = [], None
    for _, pos, line, _, following in _line_windows(text, ahead=1):
        fence = _FENCE_RE.match(line)
        if fence:
            fenced = None if fenced == fence.group(1) else (fenced or fence.group(1))
            continue
        if fenced:
            continue
        m = _MD_ATX_RE.match(line)
        nxt = following[0][1] if following else ""
        if m:
            source = _MD_ATX_CLOSE_RE.sub("", m.group(2).strip()).strip()
            if source:
                heads.append(_markdown_heading(pos, len(m.group(1)), source))
        elif (_MD_SETEXT_RE.match(nxt) and line.strip() and not line.startswith("    ") and line[:1] != "\t"
              and not _MD_NOT_PARAGRAPH_RE.match(line) and not _ADORNMENT_RE.match(line.strip())):
            heads.append(_markdown_heading(pos, 1 if nxt.strip()[0] == "=" else 2, line))
    return sections_from_heads(heads, len(text))


def rst_headings(text: Text) -> list[Section]:
    """reST section titles: a line underlined (and maybe overlined) by punctuation at least as long as it; levels
    follow the order in which the adornment styles first appear, as docutils does."""
    heads, styles = [], []
    resume_at = 0  # the line after the last title's adornment
    for i, pos, line, _, following in _line_windows(text):
        if i < resume_at:
            continue
        nxt = following[0][1].rstrip() if following else ""
        over = _ADORNMENT_RE.match(line.strip()) is not None and line[:1] not in (" ", "\t")
        if over and len(following) >= 2 and following[0][1].strip() and following[1][1].strip() == line.strip():
            title, style, at, step = following[0][1].strip(), "o" + line.strip()[0], following[0][0], 3
        elif (line.strip() and line[:1] not in (" ", "\t") and not over and _ADORNMENT_RE.match(nxt)
              and len(nxt.strip()) >= len(line.strip())):
            title, style, at, step = line.strip(), nxt.strip()[0], pos, 2
        else:
            continue
        if style not in styles:
            styles.append(style)
        kind, number, title = parse_heading(title, strict=False) or ("section", None, title)
        heads.append((at, styles.index(style) + 1, kind, number, title))
        resume_at = i + step
    return sections_from_heads(heads, len(text))


def outline_sections(text: Text, page_starts: list[int], outline: list[tuple[int, str, int]]) -> list[Section]:
    """PDF outline entries (level, title, 0-based page) placed where their title's words appear on that page (the
    page's start when they do not)."""
    heads = []
    for level, title, page in outline:
        if not 0 <= page < len(page_starts):
            continue
        start = page_starts[page]
        end = page_starts[page + 1] if page + 1 < len(page_starts) else len(text)
        words = re.findall(r"\w+", title)
        at, before = start, ""
        if words:
            page = text[start:end]
            m = re.search(r"\W+".join(map(re.escape, words)), page, re.I)
            if m:
                at = start + m.start()
                before = page[page.rfind("\n", 0, m.start()) + 1:m.start()]  # the line's start on the page
        kind, number, name = parse_heading(title, strict=False) or ("section", None, title.strip())
        numbered = re.fullmatch(r"[ \t]*(\d{1,3}(?:\.\d{1,3})*)\.?[ \t]+", before)
        if number is None and kind == "section" and numbered:  # "2.1 ASN.1 syntax" on the page, "ASN.1 syntax" in the outline
            number, at = numbered.group(1), at - len(before)
        heads.append((at, level, kind, number, name))
    return sections_from_heads(heads, len(text))


# ------------------------------------------------------------------------------------------------ code


def line_offsets(text: str) -> np.ndarray:
    """Character offset where each line of `text` starts (0 first), as int64: 8 bytes a line where a list of Python
    ints took 36 (a 10M-token log has about a million lines)."""
    starts = array("q", [0])
    at = text.find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return np.frombuffer(starts, dtype=np.int64)


def python_symbols(text: str) -> list[Section] | None:
    """Classes and functions (with their decorators) from Python's own parser; None when it cannot parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    starts = line_offsets(text)
    out: list[Section] = []

    def offset(line: int) -> int:
        return int(starts[min(max(line, 1), len(starts)) - 1])

    def walk(node: ast.AST, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                last = getattr(child, "end_lineno", None) or child.lineno
                end = starts[last] if last < len(starts) else len(text)
                kind = "class" if isinstance(child, ast.ClassDef) else "def"
                out.append(Section(offset(first), end, depth, kind, None, child.name))
                walk(child, depth + 1)
            else:
                walk(child, depth)

    walk(tree, 1)
    return out


_KEYWORDS = frozenset("if else elif for while switch case return catch try do new delete sizeof throw".split())
_DEF_RES = [
    re.compile(r"^(?P<ind>[ \t]*)(?:(?:export|default|pub(?:\([\w:]+\))?|public|private|protected|internal|static|"
               r"abstract|final|async|unsafe|extern|inline|virtual|override|open|data|sealed)\s+)*"
               r"(?P<kind>class|interface|struct|enum|trait|impl|module|object|def|fn|func|function|sub)\s+"
               r"(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_$][\w$]*)"),
    re.compile(r"^(?P<ind>[ \t]*)(?:export\s+)?(?:const|let|var)\s+(?P<name>[A-Za-z_$][\w$]*)\s*=\s*(?:async\s+)?"
               r"(?:function\b|\([^)]*\)\s*=>|[A-Za-z_$][\w$]*\s*=>)"),
    re.compile(r"^(?P<ind>[ \t]*)(?:[\w:<>\[\],*&]+[ \t]+)+\**(?P<name>[A-Za-z_]\w*)\s*\([^;{}]*\)\s*"
               r"(?:const\s*)?(?:throws\s+[\w., ]+)?\s*\{?\s*$"),
]
_CLOSER_RE = re.compile(r"^[ \t]*(?:[}\])]|end\b|\{)")


def regex_symbols(text: Text) -> list[Section]:
    """Definition lines of common languages; a definition ends before the next non-blank line indented no deeper
    (a closing brace or `end` at its own indentation still belongs to it)."""
    out: list[Section] = []
    open_: list[tuple[int, int, str, str, int]] = []  # indent, start, kind, name, depth

    def indent(line: str) -> int:
        return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())

    def close(upto: int, pos: int) -> None:
        while open_ and open_[-1][0] >= upto:
            ind, start, kind, name, depth = open_.pop()
            out.append(Section(start, pos, depth, kind, None, name))

    for pos, line in iter_lines(text):
        if not line.strip():
            continue
        ind = indent(line)
        if open_ and ind <= open_[-1][0] and not _CLOSER_RE.match(line):
            close(ind, pos)
        for n, pattern in enumerate(_DEF_RES):
            m = pattern.match(line)
            if m and m.group("name") not in _KEYWORDS:
                kind = m.group("kind") if n == 0 else "function"
                close(ind, pos)
                open_.append((ind, pos, kind, m.group("name"), len(open_) + 1))
                break
    close(-1, len(text))
    return sorted(out, key=lambda s: (s.start, s.level))


# ------------------------------------------------------------------------------------------------ per document


def extract(doc) -> list[Section]:
    """The sections of a sources.SourceDocument (any structure it has; [] when none is found)."""
    ext = doc.path.suffix.lower()
    if getattr(doc, "blocks", None) is not None:  # EPUB, HTML, Word: the format's own headings or contents
        return doc.blocks.sections
    if doc.kind == "pdf":
        outline = getattr(doc, "outline", None)
        if outline:
            return outline_sections(doc.text, doc.page_starts or [0], outline)
        return text_headings(doc.text, page_lines=True)
    if doc.kind == "code":
        if ext in (".py", ".pyi") and isinstance(doc.text, str):  # Python's parser reads the whole text: short ones
            found = python_symbols(doc.text)
            if found is not None:
                return found
        return regex_symbols(doc.text)
    if ext in (".md", ".markdown"):
        return markdown_headings(doc.text)
    if ext == ".rst":
        return rst_headings(doc.text)
    return text_headings(doc.text)


class SectionIndex:
    """A document's sections by position: the path of sections enclosing any offset (outermost first: by level,
    then start) found by bisection. event_section is asked once per event, and scanning every section per event is
    quadratic on a long document with many headings."""

    def __init__(self, sections: list[Section]):
        self.sections = sections
        self.bounds = sorted({x for s in sections for x in (s.start, s.end)})
        opening: dict[int, list[int]] = {}
        for i, s in enumerate(sections):
            opening.setdefault(s.start, []).append(i)
        open_: list[int] = []
        self.paths: list[list[Section]] = []  # paths[k]: the path over [bounds[k], bounds[k + 1])
        for x in self.bounds:
            # what is still open at x, and what opens there (an empty section opens and closes at once)
            open_ = [i for i in open_ + opening.get(x, []) if sections[i].end > x]
            self.paths.append(sorted((sections[i] for i in sorted(open_)), key=lambda s: (s.level, s.start)))

    def __bool__(self) -> bool:
        return bool(self.sections)

    def path_at(self, x: int) -> list[Section]:
        k = bisect_right(self.bounds, x) - 1
        return self.paths[k] if k >= 0 else []

    def bounds_inside(self, c0: int, c1: int) -> list[int]:
        """Section starts and ends strictly between c0 and c1."""
        return self.bounds[bisect_right(self.bounds, c0):bisect_left(self.bounds, c1)]


def event_section(sections: SectionIndex | list[Section], c0: int, c1: int, text: Text | None = None) -> dict | None:
    """{"path": the nodes enclosing most of [c0, c1), outermost first, "also": the other paths the span holds a real
    part of}, or None when no section encloses any of it. A part counts when it is a fifth of the span or a whole
    section: an event that ends on the next chapter's heading or a function's first line is not "in" it. `text`
    (the document's) makes the sizes count non-blank characters."""
    index = sections if isinstance(sections, SectionIndex) else SectionIndex(sections)
    if not index or c1 <= c0:
        return None
    cuts = [c0, *index.bounds_inside(c0, c1), c1]
    pieces = []
    for a, b in zip(cuts, cuts[1:]):
        size = len("".join(text[a:b].split())) if text is not None else b - a
        pieces.append((size, index.path_at(a)))
    total = sum(size for size, _ in pieces) or 1
    main = max(pieces, key=lambda p: p[0])[1]  # the longest piece; the first one on a tie
    paths: list[list] = []
    for size, path in pieces:
        if path and path is not main and (size >= 0.2 * total or (c0 <= path[-1].start and path[-1].end <= c1)):
            nodes = [s.node for s in path]
            if nodes not in paths:
                paths.append(nodes)
    main_nodes = [s.node for s in main]
    also = [p for p in paths if p != main_nodes]
    if not main_nodes and not also:
        return None
    out: dict = {"path": main_nodes}
    if also:
        out["also"] = also
    return out


def encode(section: dict | None) -> str | None:
    return None if section is None else json.dumps(section, ensure_ascii=False, separators=(",", ":"))


def decode(value: str | None) -> dict | None:
    """events.section as stored (None for events stored before structure was recorded, or a damaged value)."""
    if not value:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("path"), list) else None


def all_paths(section: dict | None) -> list[list]:
    if section is None:
        return []
    return [p for p in [section.get("path") or [], *(section.get("also") or [])] if p]


def _short_title(title: str) -> str:
    title = " ".join(title.split())
    return title if len(title) <= DISPLAY_TITLE_MAX else title[: DISPLAY_TITLE_MAX - 1].rstrip() + "\u2026"


def describe_node(node: list) -> str:
    kind, number, title = node
    if kind in CODE_KINDS:
        return f"{kind} {title}"
    quoted = f'"{_short_title(title)}"' if title else ""
    label = {"chapter": "ch.", "part": "part", "appendix": "appendix", "section": "\u00a7"}.get(kind, kind)
    if number is None:
        return quoted or label
    sep = "" if label == "\u00a7" else " "
    return f"{label}{sep}{number}" + (f" {quoted}" if quoted else "")


def describe(section: dict | None) -> str | None:
    """The citation's words for an event's place: code shows its whole path (class Cache, def get); prose its outer
    and inner headings (ch. 3 "The Betrayal", \u00a7 3.2 "At the inn")."""
    if section is None:
        return None
    path = section.get("path") or []
    if not path:
        return None
    if all(n[0] in CODE_KINDS for n in path):
        shown = path[-3:]
    else:
        shown = path if len(path) <= 2 else [path[0], path[-1]]
    return ", ".join(describe_node(n) for n in shown)

