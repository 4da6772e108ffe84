"""HTML and XHTML as blocks of text (blocks.py): paragraphs, headings, code and tables, in reading order.

lxml parses (it recovers from broken markup as browsers do, and is already installed with python-docx and
ebooklib). The walk is lxml's iterwalk, not recursion: a page nested thousands of levels deep is still read. For a
web page, `main_root` picks the page's main content and `chrome` skips navigation, banners, sidebars and footers;
docs/usage.md ("Formats") says how this was chosen over trafilatura (bench/ingest/html_extract.py).

Plain engine module: no terminal output.
"""
from __future__ import annotations

import re

from lxml import etree

from .blocks import BlockWriter

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Elements that end the paragraph before them and start a new one after.
_BLOCKS = frozenset("""p div section article main body li ul ol dl dt dd blockquote figure figcaption caption
    address hr center details summary header footer aside nav form fieldset legend""".split())
_NEVER_TEXT = frozenset("script style noscript template svg math iframe object embed canvas video audio select "
                        "button input textarea head title map area".split())
_CHROME_TAGS = frozenset("nav aside footer form dialog menu".split())
_CHROME_ROLES = frozenset("navigation banner contentinfo search complementary menu menubar toolbar dialog "
                          "doc-toc".split())
# class/id words of page chrome in common site generators (Sphinx, MkDocs, mdBook, Docusaurus, WordPress).
_CHROME_WORDS = re.compile(
    r"(?:^|[\s_-])(?:nav|navbar|navigation|sidebar|sidebar-scrollbox|menu|breadcrumbs?|toc|footer|header-nav|"
    r"skip-link|cookie|cookies|banner|related|sphinxsidebar|headerlink|navheader|navfooter|pagination|share|social|"
    r"prev|next|edit-this-page|md-sidebar|md-header|md-footer)(?:$|[\s_-])", re.I)


def _local(tag) -> str:
    """The element's name without an XML namespace ("{http://www.w3.org/1999/xhtml}p" -> "p"); "" for comments."""
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1].lower()


def _attr(el, name: str) -> str:
    for key, value in el.attrib.items():
        if key.rsplit("}", 1)[-1] == name:  # epub:type, xml:id and plain names alike
            return value or ""
    return ""


def is_chrome(el) -> bool:
    """Navigation, banners, sidebars, footers: by element, ARIA role, or class/id word. A <header> inside the main
    content is the article's title, not the site's banner, so only the page-level one is chrome."""
    tag = _local(el.tag)
    if tag in _CHROME_TAGS or "hidden" in el.attrib:
        return True
    if _attr(el, "aria-hidden") == "true" or _attr(el, "role") in _CHROME_ROLES:
        return True
    if tag == "header" and not any(_local(a.tag) in ("main", "article") for a in el.iterancestors()):
        return True
    words = f"{_attr(el, 'class')} {_attr(el, 'id')}".strip()
    return bool(words) and bool(_CHROME_WORDS.search(words)) and tag not in ("body", "main", "article", "html")


def main_root(root):
    """The page's main content: its <main>, its role="main", its one <article>, else its <body>."""
    for path in ("//*[local-name()='main']", "//*[@role='main']"):
        found = root.xpath(path)
        if found:
            return found[0]
    articles = root.xpath("//*[local-name()='article']")
    if len(articles) == 1:
        return articles[0]
    body = root.xpath("//*[local-name()='body']")
    return body[0] if body else root


def _spaced(text: str | None) -> str:
    """Markup's own line breaks are spaces; only <br> breaks a line (BlockWriter keeps those)."""
    return text.replace("\r", " ").replace("\n", " ").replace("\t", " ") if text else ""


def _table_rows(table) -> list[list[str]]:
    rows = []
    for tr in table.iter():
        if _local(tr.tag) != "tr":
            continue
        rows.append([" ".join(cell.itertext()) for cell in tr if _local(cell.tag) in ("td", "th")])
    return rows


def write_blocks(root, writer: BlockWriter, anchor_prefix: str = "", skip_chrome: bool = False) -> None:
    """Every block under `root`, in document order, into `writer`; each element's id is an anchor
    `anchor_prefix + "#" + id` (an EPUB's table of contents points at them)."""
    buffer: list[str] = []
    # Comments and processing instructions go, their tails joined to the text around them (iterwalk yields no
    # events for them, so a tail would otherwise be lost: "<a>Chapter 2</a><!-- x --> says ...").
    etree.strip_tags(root, etree.Comment, etree.ProcessingInstruction)

    def flush() -> None:
        if buffer:
            writer.paragraph("".join(buffer))
            buffer.clear()

    walker = etree.iterwalk(root, events=("start", "end"))
    for event, el in walker:
        tag = _local(el.tag)
        if event == "start":
            ident = _attr(el, "id") or (_attr(el, "name") if tag == "a" else "")
            if ident:
                writer.anchor(f"{anchor_prefix}#{ident}")
            if tag in _NEVER_TEXT or (skip_chrome and el is not root and is_chrome(el)):
                walker.skip_subtree()
                continue
            if tag in _HEADINGS:
                flush()
                writer.heading(" ".join(el.itertext()), _HEADINGS[tag])
            elif tag == "pre":
                flush()
                writer.code("".join(el.itertext()))
            elif tag == "table":
                flush()
                writer.table(_table_rows(el))
            else:
                if tag in _BLOCKS:
                    flush()
                elif tag == "br":
                    buffer.append("\n")
                buffer.append(_spaced(el.text))
                continue
            walker.skip_subtree()
        else:  # end
            if tag in _BLOCKS:  # a skipped one too: "a <nav>...</nav> b" is two paragraphs
                flush()
            if el is not root:  # a block's tail starts the next paragraph: the flushes above ended this one
                buffer.append(_spaced(el.tail))
    flush()
