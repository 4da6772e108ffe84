"""A document read from markup (an EPUB's chapters, an HTML page, a Word file) as a text of numbered blocks.

Markup has no pages or meaningful lines, so these documents are cited by block ("paragraph") number, the way
e-readers and legal texts do: every paragraph, heading, list item, code block and table is one block, blocks are
joined by one blank line ("\\n\\n") and never hold one themselves, so the number of a block is one more than the blank
lines before it (engine/retrieval/evidence.py counts them the same way for a quote). An EPUB restarts the count at
each file of its spine (a chapter, usually), so `ch. 3, ¶ 12` is found by paging through that chapter.

Plain engine module: no terminal output.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from .structure import Section, number_value, parse_heading, sections_from_heads
from .text import Text, TextSpool

# Document kinds whose events record block numbers (in the line columns) instead of lines.
BLOCK_KINDS = frozenset({"epub", "html", "docx"})

_SPACE_RE = re.compile(r"[ \t\r\f\v\u00a0\u2000-\u200b\u202f\u205f\u3000]+")


def _clean_prose(text: str) -> str:
    """Runs of spaces as one; a line break kept (poetry, addresses) but never a blank line."""
    lines = (_SPACE_RE.sub(" ", line).strip() for line in text.replace("\x00", "").split("\n"))
    return "\n".join(line for line in lines if line)


def _clean_code(text: str) -> str:
    """Code keeps its indentation; its blank lines go (a blank line is what separates blocks)."""
    lines = (line.rstrip() for line in text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return "\n".join(line for line in lines if line.strip())


@dataclass
class BlockDocument:
    """What a markup reader produces: the text, where each block starts, each block's shown number and group (the
    spine file of an EPUB; one group elsewhere), and the sections (headings or a table of contents)."""

    text: Text
    starts: list[int]
    numbers: list[int]
    groups: list[int]
    sections: list[Section]
    utf8_bytes: int

    def locate(self, first: int, last: int) -> tuple[int, int]:
        """The block numbers holding characters `first` and `last` (inclusive); a span that runs into the next group
        ends at the last block of its first group (the section path names the rest)."""
        i = max(bisect_right(self.starts, first) - 1, 0)
        j = max(bisect_right(self.starts, last) - 1, i)
        if self.groups[j] != self.groups[i]:
            j = bisect_right(self.groups, self.groups[i]) - 1  # groups only grow along the document
        return self.numbers[i], self.numbers[j]


class BlockWriter:
    """Collects blocks in reading order. Anchors (an element's id, a table of contents' target) are placed at the
    start of the next block written; headings become sections unless the caller gives its own (an EPUB's TOC)."""

    def __init__(self, spool_dir: Path | None = None):
        self._spool = TextSpool(spool_dir)
        self.starts: list[int] = []
        self.numbers: list[int] = []
        self.groups: list[int] = []
        self.heads: list[tuple[int, int, str, str | None, str]] = []
        self.anchors: dict[str, int] = {}
        self._pending: list[str] = []
        self._group = -1
        self._number = 0

    def new_group(self) -> None:
        self._group += 1
        self._number = 0

    def anchor(self, name: str) -> None:
        if name not in self.anchors and name not in self._pending:
            self._pending.append(name)

    def heading(self, text: str, level: int) -> None:
        title = _clean_prose(text).replace("\n", " ")
        if self._add(title):
            kind, number, name = parse_heading(title, strict=False) or ("section", None, title)
            self.heads.append((self.starts[-1], level, kind, number, name))

    def paragraph(self, text: str) -> None:
        self._add(_clean_prose(text))

    def code(self, text: str) -> None:
        self._add(_clean_code(text))

    def table(self, rows: list[list[str]]) -> None:
        cells = (" | ".join(c for c in (_clean_prose(x).replace("\n", " ") for x in row) if c) for row in rows)
        self._add("\n".join(r for r in cells if r))

    @property
    def n_chars(self) -> int:
        return self._spool.n_chars

    def _add(self, text: str) -> bool:
        if not text:
            return False
        if self._group < 0:
            self.new_group()
        if self.starts:
            self._spool.write("\n\n")
        start = self._spool.n_chars
        for name in self._pending:
            self.anchors[name] = start
        self._pending = []
        self._number += 1
        self.starts.append(start)
        self.numbers.append(self._number)
        self.groups.append(self._group)
        self._spool.write(text)
        return True

    def finish(self, sections: list[Section] | None = None) -> BlockDocument:
        """The document; `sections` replaces the ones its headings give (None: use the headings)."""
        size = self._spool.n_chars
        for name in self._pending:  # an anchor after the last block points at the end
            self.anchors[name] = size
        found = sections if sections is not None else sections_from_heads(self.heads, size)
        return BlockDocument(self._spool.finish(), self.starts, self.numbers, self.groups, found,
                             self._spool.utf8_bytes)

    def discard(self) -> None:
        self._spool.discard()


def toc_sections(entries: list[tuple[int, str, int]], size: int) -> list[Section]:
    """Table-of-contents entries (offset, title, nesting level from 1) as sections; a title that names a chapter or
    part ("Chapter 3: The Betrayal", "PART II") keeps its kind and number so questions can scope to it. A book's
    top-level entries are its chapters, so a numbered one there ("1. Loomings", "III", "12") is a chapter too."""
    top = min((level for _, title, level in entries if title.strip()), default=1)
    heads = []
    for at, title, level in entries:
        title = " ".join(title.split())
        if not title:
            continue
        kind, number, name = parse_heading(title, strict=False) or ("section", None, title)
        if level == top and kind == "section":
            bare = number_value(title.rstrip("."))
            if number is not None and "." not in number:
                kind = "chapter"
            elif number is None and bare is not None and bare.isdigit():
                kind, number, name = "chapter", title.rstrip("."), ""
        heads.append((at, level, kind, number, name))
    return sections_from_heads(heads, size)
