"""Real files of the formats epi reads by parser (EPUB 2 and 3, HTML, Word) and a scanned PDF, written from scratch
so the tests see exactly what a publisher's tools or a scanner would produce, byte for byte under the test's control."""
from __future__ import annotations

import io
import zipfile
from html import escape
from pathlib import Path

CONTAINER = """<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""


def _chapter_xhtml(title: str, paragraphs: list[str], heading_id: str) -> str:
    body = "\n".join(f"<p>{escape(p)}</p>" for p in paragraphs)
    return f"""<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>{escape(title)}</title><style>p {{ margin: 0 }}</style></head>
<body><section epub:type="chapter"><h2 id="{heading_id}">{escape(title)}</h2>
{body}
</section></body></html>"""


def make_epub(path: Path, chapters: list[tuple[str, list[str]]], toc: str = "nav", encrypt: str | None = None) -> Path:
    """An EPUB of `chapters` (title, paragraphs), one XHTML file each. toc="nav": EPUB 3 with a nav document (in
    the spine, as many books have it); toc="ncx": EPUB 2 with only toc.ncx. `encrypt`: a META-INF/encryption.xml
    algorithm applied to chapter 1 (DRM) or to a font (obfuscation)."""
    files = [(f"ch{i:02d}.xhtml", f"c{i}", title, paras) for i, (title, paras) in enumerate(chapters, 1)]
    manifest = "\n".join(f'<item id="{cid}" href="{name}" media-type="application/xhtml+xml"/>'
                         for name, cid, _, _ in files)
    spine = "\n".join(f'<itemref idref="{cid}"/>' for _, cid, _, _ in files)
    if toc == "nav":
        nav_items = "\n".join(f'<li><a href="{name}#h{cid}">{escape(title)}</a></li>'
                              for name, cid, title, _ in files)
        nav = f"""<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Contents</title></head>
<body><nav epub:type="toc" id="toc"><h1>Contents</h1><ol>{nav_items}</ol></nav></body></html>"""
        opf = f"""<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">test-book</dc:identifier>
<dc:title>Test Book</dc:title><dc:language>en</dc:language></metadata>
<manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
{manifest}</manifest>
<spine><itemref idref="nav"/>{spine}</spine></package>"""
        extra = {"OEBPS/nav.xhtml": nav}
    else:
        points = "\n".join(f"""<navPoint id="np{i}" playOrder="{i}"><navLabel><text>{escape(title)}</text></navLabel>
<content src="{name}"/></navPoint>""" for i, (name, _cid, title, _) in enumerate(files, 1))
        ncx = f"""<?xml version="1.0" encoding="utf-8"?>
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">
<head><meta name="dtb:uid" content="test-book"/></head>
<docTitle><text>Test Book</text></docTitle><navMap>{points}</navMap></ncx>"""
        opf = f"""<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">test-book</dc:identifier>
<dc:title>Test Book</dc:title><dc:language>en</dc:language></metadata>
<manifest><item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
{manifest}</manifest>
<spine toc="ncx">{spine}</spine></package>"""
        extra = {"OEBPS/toc.ncx": ncx}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")  # first and stored, as the spec says
        zf.writestr("META-INF/container.xml", CONTAINER, compress_type=zipfile.ZIP_DEFLATED)
        if encrypt:
            target = "OEBPS/ch01.xhtml" if "font" not in encrypt else "OEBPS/fonts/serif.otf"
            algorithm = encrypt.removeprefix("font:")
            zf.writestr("META-INF/encryption.xml", f"""<?xml version="1.0"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" xmlns:enc="http://www.w3.org/2001/04/xmlenc#">
<enc:EncryptedData><enc:EncryptionMethod Algorithm="{algorithm}"/>
<enc:CipherData><enc:CipherReference URI="{target}"/></enc:CipherData></enc:EncryptedData></encryption>""")
        zf.writestr("OEBPS/content.opf", opf, compress_type=zipfile.ZIP_DEFLATED)
        for name, data in extra.items():
            zf.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
        for name, cid, title, paras in files:
            zf.writestr(f"OEBPS/{name}", _chapter_xhtml(title, paras, f"h{cid}"), compress_type=zipfile.ZIP_DEFLATED)
    return path


def make_html(path: Path, title: str, sections: list[tuple[str, list[str]]], code: str | None = None) -> Path:
    """A documentation page as site generators write it: a banner, a sidebar of links, the content in <main>
    (h1 title, h2 sections, an optional <pre> code block), and a footer."""
    nav = "".join(f'<li><a href="other{i}.html">Sidebar link to another page number {i}</a></li>' for i in range(12))
    parts = [f"<h1>{escape(title)}</h1>"]
    for heading, paras in sections:
        parts.append(f"<h2>{escape(heading)}</h2>")
        parts.extend(f"<p>{escape(p)}</p>" for p in paras)
    if code:
        parts.append(f"<pre><code>{escape(code)}</code></pre>")
    page = f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)} - Docs</title>
<script>var tracking = "should never be read";</script><style>body {{ font: 14px serif }}</style></head>
<body><header class="site-header"><a href="/">Example Project Documentation Home</a></header>
<nav class="sidebar"><ul>{nav}</ul></nav>
<main>{''.join(parts)}</main>
<footer>Copyright footer text that is not part of the page content</footer></body></html>"""
    path.write_text(page, encoding="utf-8")
    return path


def make_docx(path: Path, title: str, sections: list[tuple[str, list[str]]], table: list[list[str]] | None = None
              ) -> Path:
    import docx

    document = docx.Document()
    document.add_heading(title, level=0)
    for heading, paras in sections:
        document.add_heading(heading, level=1)
        for p in paras:
            document.add_paragraph(p)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    document.save(str(path))
    return path


def make_scanned_pdf(path: Path, pages: list[str], font: str | None = None) -> Path:
    """A PDF whose pages are pictures of text, with no text layer: what a scanner makes. `font`: a TrueType file
    (Pillow's default font otherwise)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(font, 28) if font else ImageFont.load_default(size=28)
    images = []
    for text in pages:
        image = Image.new("L", (1240, 1754), 255)  # A4 at 150 dpi
        draw = ImageDraw.Draw(image)
        y = 120
        for line in text.split("\n"):
            draw.text((100, y), line, fill=0, font=font)
            y += 48
        images.append(image)
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", save_all=True, append_images=images[1:], resolution=150)
    path.write_bytes(buffer.getvalue())
    return path
