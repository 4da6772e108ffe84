"""A saved web page or a page of a built documentation site (.html, .htm) as a block document (blocks.py).

The bytes are decoded by the charset the page declares (a BOM, <meta charset>, or http-equiv), else UTF-8, else the
encoding charset-normalizer finds (encoding.py); lxml then parses the page and markup_text.py keeps its main content without the navigation around it.

Plain engine module: no terminal output.
"""
from __future__ import annotations

import codecs
import re
from pathlib import Path

from .blocks import BlockDocument, BlockWriter
from .encoding import DETECT_BYTES, guess_encodings
from .markup_text import main_root, write_blocks

HTML_EXTS = frozenset({".html", ".htm", ".xhtml"})
# A page is read whole by lxml (about ten times its size in memory); a bigger "page" is a data dump, not a document.
MAX_HTML_BYTES = 20 * 10**6  # 20 MB, decimal

_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
# Declared charsets as browsers read them (the WHATWG Encoding Standard): a page labelled Latin-1 or ASCII is
# windows-1252 in practice (its curly quotes and dashes would be C1 controls), and a UTF-16 label on bytes with no
# BOM (a BOM is read first) cannot be true: such a page is read as UTF-8.
_LABELLED_AS = {**dict.fromkeys(("iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "latin-1", "l1", "ascii",
                                 "us-ascii", "cp819", "ibm819", "windows-1252"), "cp1252"),
                **dict.fromkeys(("iso-8859-9", "iso8859-9", "latin5", "l5"), "cp1254"),
                **dict.fromkeys(("iso-8859-11", "tis-620"), "cp874"),
                **dict.fromkeys(("utf-16", "utf-16le", "utf-16be", "utf16"), "utf-8")}


class NotReadable(Exception):
    """The page cannot be read; the message is the reason, for sources.py's one line."""


class NoText(NotReadable):
    """A well-formed file with nothing to read: a docs site's search page, a book of pictures. Normal in a folder,
    so it is skipped with its reason, not failed."""


def decode(data: bytes) -> str:
    boms = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
    for bom, codec in boms:
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    m = _CHARSET_RE.search(data[:4096])
    if m:
        try:
            label = m.group(1).decode("ascii").lower()
            return data.decode(_LABELLED_AS.get(label, label), errors="replace")
        except LookupError:
            pass  # an unknown charset name: guess as below
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    # No declared charset and not UTF-8: the encoding charset-normalizer finds (cp1251, Shift-JIS, cp1252, ...).
    sample = data[:DETECT_BYTES]
    if len(data) > DETECT_BYTES and b"\n" in sample:
        sample = sample[: sample.rfind(b"\n") + 1]  # whole characters only
    guesses = guess_encodings(sample)
    return data.decode(guesses[0] if guesses else "cp1252", errors="replace")


def parse(text: str):
    """The page's element tree (lxml's HTML parser: it recovers from broken markup as browsers do)."""
    import lxml.html

    # lxml refuses a str that declares its own encoding in an XML prolog; the text is decoded already.
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", text, count=1)
    if not re.sub(r"<!--.*?-->", "", text, flags=re.S).strip():
        raise NoText("it holds no markup")  # empty, or comments only: nothing to read, as a page with no text
    try:
        return lxml.html.document_fromstring(text)
    except Exception as exc:  # noqa: BLE001 - lxml's parser errors share no useful base
        raise NotReadable(f"lxml cannot parse it ({' '.join(str(exc).split())[:100]})") from None


def read_html(data: bytes, spool_dir: Path | None = None) -> BlockDocument:
    """The page's main text as blocks; its <title> opens it as a heading when the content has no <h1>."""
    if len(data) > MAX_HTML_BYTES:
        raise NotReadable(f"{len(data) / 1e6:.0f} MB of HTML is more than one page holds (epi reads pages up to "
                          f"{MAX_HTML_BYTES // 10**6} MB); save the page's text instead")
    root = parse(decode(data))
    content = main_root(root)
    writer = BlockWriter(spool_dir)
    try:
        title = " ".join(" ".join(root.xpath("//title//text()")).split())
        if title and not content.xpath(".//*[local-name()='h1']"):
            writer.heading(title, 1)
        write_blocks(content, writer, skip_chrome=True)
        if not writer.starts:
            raise NoText("no text outside its navigation (a search or index page?)")
        return writer.finish()
    except BaseException:
        writer.discard()
        raise
