"""How a retrieved event is cited: document, place in its structure, pages or lines."""
from __future__ import annotations

from ..documents.blocks import BLOCK_KINDS
from ..documents.structure import describe as describe_section
from .retrieve import RetrievedEvent

# Control characters in a file name (a newline is legal on POSIX) would break an `epi ls` row or a citation in two:
# they are shown escaped, as Python writes them; every other character, non-ASCII included, as it is.
_ESCAPES = {c: ascii(chr(c))[1:-1] for c in (*range(0x20), 0x7F)}


def printable(name: str) -> str:
    """A document name on one line: 'a\\nb.txt' for a name holding a newline."""
    return name.translate(_ESCAPES)


def citation(r: RetrievedEvent, structure: bool = True) -> str:
    """`book.pdf, ch. 3 "The Betrayal", pp. 41-42`, `src/util.py, class Cache, def get, lines 80-112`; the place in
    the document's structure only where the event records one (and `structure`)."""
    ev = r.event
    head = printable(r.document.display_path)
    if r.summary is not None:
        return summary_citation(r)
    place = describe_section(r.section) if structure else None
    if place:
        head = f"{head}, {place}"
    if ev.page_start is not None:
        pages = f"p. {ev.page_start}" if ev.page_start == ev.page_end else f"pp. {ev.page_start}-{ev.page_end}"
        return f"{head}, {pages}"
    if ev.line_start is not None:
        return f"{head}, {place_words(r.document.kind, ev.line_start, ev.line_end)}"
    return head


def place_words(kind: str, first: int, last: int | None) -> str:
    """"lines 3-9" for text and code; "¶ 12-14" (block numbers, documents/blocks.py) for EPUB, HTML and Word."""
    last = first if last is None else last
    if kind in BLOCK_KINDS:
        return f"\u00b6 {first}" if first == last else f"\u00b6 {first}-{last}"
    return f"line {first}" if first == last else f"lines {first}-{last}"


def summary_citation(r: RetrievedEvent) -> str:
    """`book.pdf, summary of ch. 3 "The Betrayal" (pp. 41-55)`: a map summary names what it covers."""
    s = r.summary
    span = ""
    if s.page_start is not None:
        last = s.page_end or s.page_start
        span = f"p. {s.page_start}" if s.page_start == last else f"pp. {s.page_start}-{last}"
    elif s.line_start is not None:
        span = place_words(r.document.kind, s.line_start, s.line_end)
    what = "summary of " + (s.label if s.level != "document" else "the whole document")
    head = printable(r.document.display_path) if s.level != "collection" else printable(s.label)
    if s.level == "collection":
        what = "summary of the collection"
    return f"{head}, {what}" + (f" ({span})" if span and s.label != span else "")
