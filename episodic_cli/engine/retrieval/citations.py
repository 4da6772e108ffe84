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
    part = describe_section(r.section) if structure else None
    if part:
        head = f"{head}, {part}"
    where = place(r.document.kind, ev.page_start, ev.page_end, ev.line_start, ev.line_end)
    return f"{head}, {where}" if where else head


def place(kind: str, page_start: int | None, page_end: int | None = None, line_start: int | None = None,
          line_end: int | None = None) -> str:
    """Where a passage is, as every citation writes it: "p. 3", "pp. 3-5", "lines 3-9", "¶ 12" (pages first; "" when
    neither is known). The one place this text is built, so `epi ask`, the API and `epi mcp` cite alike."""
    if page_start is not None:
        last = page_start if page_end is None else page_end
        return f"p. {page_start}" if last == page_start else f"pp. {page_start}-{last}"
    if line_start is not None:
        return place_words(kind, line_start, line_end)
    return ""


def place_words(kind: str, first: int, last: int | None) -> str:
    """"lines 3-9" for text and code; "¶ 12-14" (block numbers, documents/blocks.py) for EPUB, HTML and Word."""
    last = first if last is None else last
    if kind in BLOCK_KINDS:
        return f"\u00b6 {first}" if first == last else f"\u00b6 {first}-{last}"
    return f"line {first}" if first == last else f"lines {first}-{last}"


def summary_citation(r: RetrievedEvent) -> str:
    """`book.pdf, summary of ch. 3 "The Betrayal" (pp. 41-55)`: a map summary names what it covers."""
    s = r.summary
    span = place(r.document.kind, s.page_start, s.page_end, s.line_start, s.line_end)
    what = "summary of " + (s.label if s.level != "document" else "the whole document")
    head = printable(r.document.display_path) if s.level != "collection" else printable(s.label)
    if s.level == "collection":
        what = "summary of the collection"
    return f"{head}, {what}" + (f" ({span})" if span and s.label != span else "")
