"""An EPUB 3 built from chapters of an mdBook site (the Rust book installed with rustup), as mdbook-epub builds one:
each chapter page's <main> becomes an XHTML file of the spine, and the nav document lists the chapters and their
sections with the book's own numbering ("8. Common Collections", "8.1. Storing Lists of Values with Vectors"),
taken from the site's table of contents (toc-*.js).

For the held-out sets (bench/answers/heldout.py): a document written `epub-from-mdbook:BOOK_DIR:ch08,ch09` is built here
once into the given folder and read like any EPUB a user has.
"""
from __future__ import annotations

import glob
import hashlib
import html
import re
import zipfile
from pathlib import Path

import lxml.etree
import lxml.html

_ENTRY_RE = re.compile(r'href="(?P<href>[^"]+\.html)"><strong aria-hidden="true">(?P<num>[\d.]+)</strong>\s*'
                       r"(?P<title>[^<]+)")


def toc_entries(book: Path) -> dict[str, tuple[str, str]]:
    """file name -> (number as the book writes it, title), from the site's table of contents script."""
    scripts = sorted(glob.glob(str(book / "toc-*.js"))) or sorted(glob.glob(str(book / "toc.js")))
    text = Path(scripts[0]).read_text(encoding="utf-8").replace('\\"', '"')
    return {m["href"]: (m["num"], html.unescape(m["title"].strip())) for m in _ENTRY_RE.finditer(text)}


def _chapter_xhtml(page: Path) -> str:
    root = lxml.html.parse(str(page)).getroot()
    main = root.xpath("//main")[0]
    for a in main.xpath(".//a[@class='header']"):  # mdBook wraps each heading's text in a self-link
        a.drop_tag()
    body = lxml.etree.tostring(main, method="xml", encoding="unicode")
    title = html.escape(" ".join(root.findtext(".//title") or "").strip())
    return ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml">'
            f"<head><title>{title}</title></head><body>{body}</body></html>")


def build(book: Path, prefixes: list[str], out: Path) -> Path:
    entries = toc_entries(book)
    pages = [p for prefix in prefixes for p in sorted(book.glob(f"{prefix}-*.html"))]
    items, nav, spine = [], [], []
    open_chapter = False
    for i, page in enumerate(pages):
        number, title = entries.get(page.name, ("", page.stem))
        name = f"text/{page.name.replace('.html', '.xhtml')}"
        items.append((f"p{i}", name, _chapter_xhtml(page)))
        spine.append(f'<itemref idref="p{i}"/>')
        label = html.escape(f"{number} {title}".strip())
        if number.count(".") <= 1:  # "8." opens a chapter; "8.1." is one of its sections
            nav.append(("</ol></li>" if open_chapter else "") + f'<li><a href="{name}">{label}</a><ol>')
            open_chapter = True
        else:
            nav.append(f'<li><a href="{name}">{label}</a></li>')
    nav.append("</ol></li>" if open_chapter else "")
    nav_doc = ('<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
               'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title></head><body>'
               f'<nav epub:type="toc"><ol>{"".join(nav)}</ol></nav></body></html>')
    manifest = "".join(f'<item id="{i}" href="{n}" media-type="application/xhtml+xml"/>' for i, n, _ in items)
    ident = hashlib.sha256("".join(x for _, _, x in items).encode()).hexdigest()[:16]
    opf = ('<?xml version="1.0" encoding="utf-8"?>\n<package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
           'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
           f'<dc:identifier id="id">{ident}</dc:identifier><dc:title>The Rust Programming Language</dc:title>'
           '<dc:language>en</dc:language></metadata><manifest>'
           f'<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>{manifest}'
           f'</manifest><spine>{"".join(spine)}</spine></package>')
    members = [("mimetype", "application/epub+zip"),
               ("META-INF/container.xml",
                '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:'
                'container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/'
                'oebps-package+xml"/></rootfiles></container>'),
               ("OEBPS/content.opf", opf), ("OEBPS/nav.xhtml", nav_doc)]
    members += [(f"OEBPS/{name}", data) for _, name, data in items]
    if _same_members(out, members):  # a store keyed by this file's hash would otherwise be read again
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    with zipfile.ZipFile(tmp, "w") as zf:
        for name, data in members:  # a fixed date: the same chapters give the same bytes
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp.replace(out)
    return out


def _same_members(path: Path, members: list[tuple[str, str | bytes]]) -> bool:
    """Whether the EPUB at `path` already holds exactly these files (dates aside)."""
    try:
        with zipfile.ZipFile(path) as zf:
            held = {name: zf.read(name) for name in zf.namelist()}
    except (OSError, zipfile.BadZipFile):
        return False
    want = {name: data.encode() if isinstance(data, str) else data for name, data in members}
    return held == want


def resolve(document: str, folder: Path) -> Path:
    """`epub-from-mdbook:BOOK_DIR:ch08,ch09` -> the EPUB built from those chapters, in `folder`."""
    _, book, chapters = document.split(":", 2)
    prefixes = chapters.split(",")
    return build(Path(book), prefixes, folder / f"rust-book-{'-'.join(prefixes)}.epub")
