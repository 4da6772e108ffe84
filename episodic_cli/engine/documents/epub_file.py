"""An EPUB book (2 or 3) as a block document (blocks.py): its spine's chapters in reading order, its sections from
the book's own table of contents (the EPUB 3 nav document, else the EPUB 2 NCX).

ebooklib reads the package (container, OPF, spine, nav/NCX); markup_text.py reads each XHTML file. DRM is told
apart from font obfuscation by META-INF/encryption.xml's algorithms: an encrypted chapter cannot be read, an
obfuscated font does not matter. Blocks are numbered per spine file, so citations read `ch. 3 "Title", ¶ 12`.

Plain engine module: no terminal output.
"""
from __future__ import annotations

import logging
import warnings
import zipfile
from pathlib import Path
from urllib.parse import unquote

from .blocks import BlockDocument, BlockWriter, toc_sections
from .html_file import NoText, NotReadable, decode, parse
from .markup_text import write_blocks

EPUB_EXT = ".epub"
# Font obfuscation (IDPF and Adobe): fonts are mangled so they cannot be lifted; the text is not encrypted.
_FONT_OBFUSCATION = frozenset({"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"})
_ENC = "{http://www.w3.org/2001/04/xmlenc#}"
_DOCUMENT_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/x-dtbook+xml"})


def _drm_reason(zf: zipfile.ZipFile) -> str | None:
    names = set(zf.namelist())
    if "META-INF/rights.xml" in names:
        return "it is protected by DRM (Adobe ADEPT rights.xml)"
    if "META-INF/encryption.xml" not in names:
        return None
    from lxml import etree

    try:
        root = etree.fromstring(zf.read("META-INF/encryption.xml"))
    except Exception:  # noqa: BLE001 - a damaged encryption.xml still says the book is encrypted
        return "it is encrypted (META-INF/encryption.xml cannot be read)"
    for data in root.iter(f"{_ENC}EncryptedData"):
        method = data.find(f"{_ENC}EncryptionMethod")
        algorithm = method.get("Algorithm", "") if method is not None else ""
        ref = data.find(f"{_ENC}CipherData/{_ENC}CipherReference")
        uri = ref.get("URI", "") if ref is not None else ""
        if algorithm not in _FONT_OBFUSCATION and not uri.lower().endswith((".otf", ".ttf", ".woff", ".woff2")):
            return f"it is protected by DRM ({unquote(uri) or 'content'} is encrypted)"
    return None


def _flatten_toc(items, level: int = 1) -> list[tuple[str, str, int]]:
    """ebooklib's nested TOC as (href, title, level) in reading order; a section with no link of its own points at
    its first child."""
    from ebooklib import epub

    out: list[tuple[str, str, int]] = []
    for item in items:
        if isinstance(item, tuple) and len(item) == 2:
            section, children = item
            below = _flatten_toc(children, level + 1)
            href = getattr(section, "href", "") or (below[0][0] if below else "")
            if href:
                out.append((href, getattr(section, "title", "") or "", level))
            out.extend(below)
        elif isinstance(item, epub.Link):
            out.append((item.href, item.title or "", level))
    return out


def read_epub(path: Path, spool_dir: Path | None = None) -> BlockDocument:
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise NotReadable("it is not an EPUB (not a zip archive; a damaged or partly downloaded file?)") from None
    with zf:
        if "META-INF/container.xml" not in zf.namelist():
            raise NotReadable("it is not an EPUB (a zip archive without META-INF/container.xml)")
        drm = _drm_reason(zf)
        if drm:
            raise NotReadable(f"{drm}; epi reads DRM-free books only (remove the DRM with the tool you bought it with, "
                              "or get a DRM-free copy)")
    from ebooklib import epub

    try:
        with warnings.catch_warnings():  # ebooklib warns about options it will change in a future release
            warnings.simplefilter("ignore")
            logging.getLogger("ebooklib").setLevel(logging.ERROR)
            book = epub.read_epub(str(path), {"ignore_ncx": True})
    except Exception as exc:  # noqa: BLE001 - ebooklib raises KeyError, EpubException, lxml errors, zip errors
        raise NotReadable(f"it is not a readable EPUB ({' '.join(str(exc).split())[:120] or type(exc).__name__})") \
            from None
    navs = {item.get_name() for item in book.get_items() if isinstance(item, epub.EpubNav)}
    writer = BlockWriter(spool_dir)
    try:
        for idref, _linear in book.spine:
            item = book.get_item_with_id(idref)
            if item is None or item.media_type not in _DOCUMENT_TYPES or item.get_name() in navs:
                continue  # the nav document is the table of contents, read below as structure, not as text
            name = item.get_name()
            writer.new_group()
            writer.anchor(name)
            try:
                root = parse(decode(item.get_content()))
            except NotReadable:
                continue  # an empty or unparsable chapter file: the rest of the book is still worth reading
            body = root.xpath("//*[local-name()='body']")
            write_blocks(body[0] if body else root, writer, anchor_prefix=name)
        if not writer.starts:
            raise NoText("no text in its chapters (a book of images only?)")
        entries = []
        for href, title, level in _flatten_toc(book.toc):
            file, _, fragment = unquote(href).partition("#")
            at = writer.anchors.get(f"{file}#{fragment}") if fragment else None
            at = writer.anchors.get(file) if at is None else at
            if at is not None:
                entries.append((at, title, level))
        return writer.finish(toc_sections(entries, writer.n_chars) if entries else None)
    except BaseException:
        writer.discard()
        raise
