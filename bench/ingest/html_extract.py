"""Which HTML extractor keeps a page's text and headings best: epi's (markup_text.py: the page's <main>/<article>,
navigation skipped by element, role and class) against trafilatura (favor_recall, XML output with headings), on real
documentation pages found on this machine (mdBook, Node.js API docs, npm docs, DocBook).

For each page the reference is the site generator's own content container (chosen by hand per site, below) and its
own navigation container. Measured per page, then averaged per site:
- text kept: share of the content's paragraphs (<p> of 40+ characters) found in the output;
- headings kept: share of the content's h1-h4 found as headings in the output;
- code kept: share of the content's <pre> blocks whose first line is in the output;
- chrome leaked: share of the navigation's link texts (12+ characters, not also in the content) in the output.

Usage: python bench/ingest/html_extract.py [--pages 10] [--out bench/results/html_extract.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
import sys
import time
from pathlib import Path

import lxml.etree
import lxml.html

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from episodic_cli.engine.documents.html_file import read_html  # noqa: E402

RUST = "/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"
SITES = {  # name: (file glob, content xpath, navigation xpath)
    "mdbook (Rust book)": (f"{RUST}/book/ch*.html", "//main", "//nav[@id='mdbook-sidebar']"),
    "mdbook (Cargo)": (f"{RUST}/cargo/reference/*.html", "//main", "//nav[@id='mdbook-sidebar']"),
    "Node.js API": ("/usr/share/doc/nodejs/api/*.html", "//div[@id='apicontent']",
                    "//div[@id='column2'] | //div[@id='toc']"),
    "npm docs": ("/usr/lib/node_modules/npm/docs/output/commands/*.html", "//div[@id='_content']",
                 "//div[@id='_table_of_contents'] | //div[@id='banner']"),
    "DocBook (Valgrind)": ("/usr/share/doc/valgrind/html/*.html", "//div[@class='chapter' or @class='sect1']",
                           "//table[@class='nav'] | //div[@class='toc']"),
}


def norm(text: str) -> str:
    """Compared without whitespace: extractors differ in the spaces they put between inline elements."""
    return "".join(text.split()).lower()


def reference(page: bytes, content_xpath: str, nav_xpath: str) -> dict | None:
    root = lxml.html.document_fromstring(page)
    content = root.xpath(content_xpath)
    if not content:
        return None
    c = content[0]
    content_text = norm("".join(c.itertext()))
    paras = [norm("".join(p.itertext())) for p in c.iter("p")]
    heads = [norm("".join(h.itertext())) for h in c.iter("h1", "h2", "h3", "h4")]
    codes = [norm(("".join(p.itertext()).strip().split("\n") or [""])[0]) for p in c.iter("pre")]
    links = [norm("".join(a.itertext())) for n in root.xpath(nav_xpath) for a in n.iter("a")]
    return {"paras": [p for p in paras if len(p) >= 32], "heads": [h for h in heads if h],
            "codes": [x for x in codes if len(x) >= 8],
            "chrome": sorted({x for x in links if len(x) >= 10 and x not in content_text})}


def epi_extract(page: bytes) -> tuple[str, list[str]]:
    doc = read_html(page)
    return norm(doc.text[0:len(doc.text)]), [norm(s.title) for s in doc.sections]


def trafilatura_extract(page: bytes) -> tuple[str, list[str]]:
    import trafilatura

    xml = trafilatura.extract(page.decode("utf-8", "replace"), output_format="xml", include_formatting=True,
                              include_tables=True, include_links=False, favor_recall=True, with_metadata=False)
    if not xml:
        return "", []
    root = lxml.etree.fromstring(xml.encode("utf-8"))
    return norm("".join(root.itertext())), [norm("".join(h.itertext())) for h in root.iter("head")]


def share(found: list[bool]) -> float | None:
    return sum(found) / len(found) if found else None


def score(ref: dict, text: str, heads: list[str]) -> dict:
    # epi keeps a heading's number apart from its title ("13.1." and "Overview"): compared by letters and digits,
    # a heading counts when the extractor's title is the end of the page's.
    bare = [re.sub(r"\W", "", x) for x in heads]
    return {
        "text": share([p in text for p in ref["paras"]]),
        "headings": share([any(x and re.sub(r"\W", "", h).endswith(x) for x in bare) for h in ref["heads"]]),
        "code": share([c in text for c in ref["codes"]]),
        "chrome": share([c in text for c in ref["chrome"]]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=10, help="pages per site (the first N in name order)")
    ap.add_argument("--out", default="bench/results/html_extract.json")
    args = ap.parse_args()
    extractors = {"epi": epi_extract, "trafilatura": trafilatura_extract}
    results: dict = {"pages_per_site": args.pages, "sites": {}}
    print(f"{'site':<20} {'extractor':<12} {'pages':>5} {'text':>6} {'heads':>6} {'code':>6} {'chrome':>7} "
          f"{'ms/page':>8}")
    for site, (pattern, content_xpath, nav_xpath) in SITES.items():
        pages = []
        for path in sorted(glob.glob(pattern)):
            data = Path(path).read_bytes()
            ref = reference(data, content_xpath, nav_xpath)
            if ref and ref["paras"]:
                pages.append((path, data, ref))
            if len(pages) == args.pages:
                break
        if not pages:
            print(f"{site:<20} (no pages on this machine)")
            continue
        results["sites"][site] = {"pages": [p for p, _, _ in pages]}
        for name, extract in extractors.items():
            scores, t0 = [], time.perf_counter()
            for _, data, ref in pages:
                text, heads = extract(data)
                scores.append(score(ref, text, heads))
            ms = (time.perf_counter() - t0) * 1000 / len(pages)
            mean = {k: statistics.mean([s[k] for s in scores if s[k] is not None] or [float("nan")])
                    for k in ("text", "headings", "code", "chrome")}
            results["sites"][site][name] = {**mean, "ms_per_page": ms}
            print(f"{site:<20} {name:<12} {len(pages):>5} {mean['text']:>6.2f} {mean['headings']:>6.2f} "
                  f"{mean['code']:>6.2f} {mean['chrome']:>7.2f} {ms:>8.1f}")
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
