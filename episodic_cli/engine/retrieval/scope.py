"""What part of the archive a question is about: the chapter, section, page, file or code symbol it names, and the
documents `--doc GLOB` allows.

`parse(question)` reads the question ("in chapter 3", "chapter three", "the third chapter", "ch. III", "in section
2.4", "§2.4", "on page 12", "pages 3-5", "in utils.py", "what does Cache.get return", "the parse_args() function",
a heading's title in quotes: 'the "How to use bzip2" chapter');
`resolve(store, scope, doc_globs)` turns that into event ids:

- documents (`--doc` and file names in the question) and chapters, sections, pages are a *filter*: retrieval
  searches only their events. A name that matches nothing in the archive is dropped (with a note saying so), so a
  question about "chapter 9" of a book with 8 is answered from the whole archive rather than from nothing;
- code symbols are a strong *boost*: their best event ranks first, the rest of the archive still follows (a question
  about what a function returns may be answered by its caller or its documentation).

Plain engine module: no terminal output.
"""
from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ...store import Store
from ...store.lexical import STOP_WORDS
from ..errors import EpiError
from ..documents.sources import BLOCK_EXTS, CODE_EXTS, PDF_EXT, TEXT_EXTS
from ..documents.structure import (CODE_KINDS, NUMBER_ALT, ORDINAL_WORDS, all_paths, decode, describe_node,
                                   number_value)
from .citations import place, printable

_ORDINALS = "|".join(ORDINAL_WORDS[1:]) + r"|\d{1,3}(?:st|nd|rd|th)"
# The roman numeral I followed by a lower-case word is the pronoun ("which chapter I should read", "the book I
# ingested"), unless the word is one that follows a place ("chapter I of the book", "in chapter I and II").
_AFTER_A_PLACE = "of|in|and|or|to|about|from|for|with|at|on|where|when|that|the"
_NOT_PRONOUN_I = rf"(?!(?<=\bI)(?-i:\s+(?!(?:{_AFTER_A_PLACE})\b)[a-z]))"
# "the chapters one by one" names no chapter one.
_CHAPTER_RE = re.compile(rf"\b(?:chapters?|chap\.|ch\.)\s*(?P<num>{NUMBER_ALT})\b{_NOT_PRONOUN_I}(?!\s+by\s+one\b)"
                         rf"|\b(?:the\s+)?(?P<ord>{_ORDINALS})\s+chapter\b", re.I)
# "the last chapter": the highest-numbered chapter of each document in scope (LAST_CHAPTER as its value)
_LAST_CHAPTER_RE = re.compile(r"\b(?:the\s+)?(?:last|final|closing)\s+chapter\b", re.I)
LAST_CHAPTER = "last"
_PART_RE = re.compile(rf"\b(?:part|book)\s+(?P<num>{NUMBER_ALT})\b{_NOT_PRONOUN_I}", re.I)
_APPENDIX_RE = re.compile(rf"\bappendix\s+(?P<num>{NUMBER_ALT}|[A-Z])\b", re.I)
_SECTION_RE = re.compile(r"(?:\b(?:sections?|sect\.|sec\.)\s*|§\s*)(?P<num>\d{1,3}(?:\.\d{1,3})*)\b"
                         rf"|\bsections?\s+(?P<word>{'|'.join(w for w in NUMBER_ALT.split('|')[2:])})\b"
                         r"(?!\s+by\s+one\b)", re.I)
_PAGE_RE = re.compile(r"\b(?:pages?|pp?\.)\s*(?P<a>\d{1,5}|" + "|".join(NUMBER_ALT.split("|")[2:]) + r")\b"
                      r"(?:\s*(?:-|–|to|through|and)\s*(?P<b>\d{1,5})\b)?", re.I)
_EXTS = sorted({e.lstrip(".") for e in CODE_EXTS | TEXT_EXTS | set(BLOCK_EXTS) | {PDF_EXT}}, key=len, reverse=True)
_FILE_RE = re.compile(r"(?<![\w/.-])(?P<file>[\w./-]*[\w-]\.(?:" + "|".join(_EXTS) + r"))(?![\w])", re.I)
_DOTTED_RE = re.compile(r"\b(?P<sym>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?P<call>\(\))?")
_CALL_RE = re.compile(r"\b(?P<sym>[A-Za-z_]\w*)\(\)")
_KEYWORD_RE = re.compile(r"\b(?:class|function|method|def|struct|func|fn|trait|interface|enum)\s+`?(?P<sym>[A-Za-z_]\w*)")
_KEYWORD_AFTER_RE = re.compile(r"`?\b(?P<sym>[A-Za-z_]\w*)`?\s+(?:class|function|method|struct)\b")
# Identifiers by their shape: snake_case with an underscore inside, or camelCase / CamelCase with an inner capital.
_IDENT_RE = re.compile(r"\b(?P<sym>[a-z]\w*_\w*[a-z0-9]|[a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*)\b")
_NOT_SYMBOLS = frozenset("e.g i.e etc.al vs".split())
# A heading named by its title in quotes. A single quote opens only after a space or bracket and closes before one
# (or punctuation), so apostrophes ("Alice's") do not pair up.
_QUOTED_RE = re.compile(r'"(?P<a>[^"\n]{2,80})"|\u201c(?P<b>[^\u201d\n]{2,80})\u201d'
                        r"|\u2018(?P<c>[^\u2019\n]{2,80})\u2019"
                        r"|(?:(?<=^)|(?<=[\s(\[]))'(?P<d>[^'\n]{2,80})'(?=$|[\s.,;:?!)\]])")
# "the cache module", "module `cache`", "the utils package": a file named so (cache.py, cache/__init__.py, cache.rs).
_MODULE_RE = re.compile(r"(?<![\w.])(?:the\s+)?`?(?P<a>[A-Za-z_][\w.]*)`?\s+(?:module|package|file)\b"
                        r"|\b(?:module|package)\s+`?(?P<b>[A-Za-z_][\w.]*)`?", re.I)
_NOT_MODULES = frozenset("this that which each every a an the its main whole same other one python code source "
                         "test config".split())


@dataclass
class Scope:
    chapters: list[str] = field(default_factory=list)    # compared values: "3", "a"
    parts: list[str] = field(default_factory=list)
    appendices: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)    # "2.4"
    pages: list[tuple[int, int]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)        # "utils.py", "src/util.py"
    symbols: list[list[str]] = field(default_factory=list)  # ["Cache", "get"]
    titles: list[str] = field(default_factory=list)       # quoted text; a place only if a heading has that title
    rest: str = ""  # the question without its chapter/section/page phrases (what retrieval searches for inside them)

    @property
    def structural(self) -> bool:
        return bool(self.chapters or self.parts or self.appendices or self.sections or self.pages)


def parse(question: str) -> Scope:
    scope = Scope()
    spans: list[tuple[int, int]] = []

    def take(m: re.Match) -> None:
        spans.append(m.span())

    for m in _CHAPTER_RE.finditer(question):
        value = number_value(m.group("num") or m.group("ord"))
        if value is not None and value.isdigit():
            _add(scope.chapters, value)
            take(m)
    for m in _LAST_CHAPTER_RE.finditer(question):
        _add(scope.chapters, LAST_CHAPTER)
        take(m)
    for m in _PART_RE.finditer(question):
        value = number_value(m.group("num"))
        if value is not None and value.isdigit():
            _add(scope.parts, value)
            take(m)
    for m in _APPENDIX_RE.finditer(question):
        value = number_value(m.group("num"))
        if value is not None:
            _add(scope.appendices, value)
            take(m)
    for m in _SECTION_RE.finditer(question):
        value = number_value(m.group("num") or m.group("word"))
        if value is not None:
            _add(scope.sections, value)
            take(m)
    for m in _PAGE_RE.finditer(question):
        a = number_value(m.group("a"))
        if a is None or not a.isdigit():
            continue
        b = int(m.group("b")) if m.group("b") else int(a)
        if int(a) <= b <= int(a) + 200:
            scope.pages.append((int(a), b))
            take(m)
    for m in _QUOTED_RE.finditer(question):
        title = title_words(next(g for g in m.groups() if g is not None))
        if re.search(r"[^\W\d_]", title):
            _add(scope.titles, title)
    files = set()
    for m in _FILE_RE.finditer(question):
        _add(scope.files, m.group("file"))
        files.add(m.span())
    for m in _MODULE_RE.finditer(question):
        name = m.group("a") or m.group("b")
        if name.lower() in _NOT_MODULES or name.lower() in STOP_WORDS or any(a <= m.start() < b for a, b in files):
            continue
        path = name.replace(".", "/")
        for glob in (f"{path}.*", f"{path}/__init__.py", f"{path}/mod.rs", f"{path}/index.*"):  # in any folder
            _add(scope.files, glob)
        files.add(m.span())
    for m in _DOTTED_RE.finditer(question):
        if any(a <= m.start() < b for a, b in files) or m.group("sym").lower() in _NOT_SYMBOLS:
            continue
        _add(scope.symbols, m.group("sym").split("."))
    for regex in (_CALL_RE, _KEYWORD_RE, _KEYWORD_AFTER_RE, _IDENT_RE):
        for m in regex.finditer(question):
            name = m.group("sym")
            if name and name not in CODE_KINDS and name.lower() not in STOP_WORDS \
                    and not any(a <= m.start() < b for a, b in files) \
                    and not any(name in s for s in scope.symbols):
                _add(scope.symbols, [name])
    rest = question
    for a, b in sorted(spans, reverse=True):
        before = re.search(r"\b(?:in|on|of|from|at)\s+(?:the\s+)?$", rest[:a], re.I)  # "in chapter 3" goes whole
        rest = rest[:before.start() if before else a] + " " + rest[b:]
    scope.rest = " ".join(rest.split())
    return scope


def names_a_place(question: str) -> bool:
    """Whether the question names a chapter, section, page, file or code symbol of its own."""
    scope = parse(question)
    return scope.structural or bool(scope.files or scope.symbols)


def title_words(text: str) -> str:
    """A title as compared: case and spacing aside, without the punctuation at its ends."""
    return " ".join(text.casefold().split()).strip(" .,;:!?")


def _add(items: list, value) -> None:
    if value not in items:
        items.append(value)


# ------------------------------------------------------------------------------------------------ resolving


@dataclass
class Restriction:
    """Event ids retrieval may return (None: all) and event ids it ranks first (None: none), with notes for the
    user on scope words that matched nothing in the archive."""

    allowed: set[int] | None = None
    boosted: set[int] | None = None
    query: str | None = None      # what to search for inside a structural scope (None: the question)
    notes: list[str] = field(default_factory=list)
    described: str | None = None  # "ch. 3", "§2.4", "p. 12", "util.py": what the answer was restricted to
    titled: bool = False          # a quoted title in the question matched a heading (a place named by its title)
    # The named places that matched, as (node test, value): a source spanning two sections is cited by the one asked
    # about, not by the one it mostly holds (measured: a §2.2 question's sentence in an event cited as §2.4).
    places: list[tuple[Callable[[list, str], bool], str]] = field(default_factory=list)
    # A named place ("chapter 3") found in several documents when none was named: each document's events there.
    # The answer reads one document's (choose_document), and says which.
    by_document: dict[int, set[int]] | None = None

    def choose_document(self, document_id: int, name: str, found_in: list[str]) -> Restriction:
        """This restriction narrowed to one of the documents holding the named place, with a note saying which was
        chosen among `found_in` (display paths) and how to ask another's."""
        assert self.by_document is not None
        others = len(found_in) - 1
        shown = ", ".join(found_in[:3]) + (f" and {len(found_in) - 3} more" if len(found_in) > 3 else "")
        note = (f"{self.described} is in {len(found_in)} documents ({shown}): answered from {name}'s, whose "
                f"passages match the question best; name the document, or pass --doc, to ask "
                f"{'the other' if others == 1 else 'another'}")
        return replace(self, allowed=self.by_document[document_id], by_document=None,
                       described=f"{self.described} of {name}", notes=[*self.notes, note])

    def cited_section(self, section: dict | None) -> dict | None:
        """The event's stored section with the path the question named first, when the event spans that place."""
        if not self.places or section is None:
            return section
        for path in all_paths(section):
            if any(test(node, value) for test, value in self.places for node in path):
                if path == section.get("path"):
                    return section
                return {"path": path, "also": [p for p in all_paths(section) if p != path]}
        return section


def package_globs(files: list[str]) -> list[str]:
    """`files` globs (Scope.files) with every file under a named package added: "cache/__init__.py" also matches
    "cache/*", for a question about each file of the package."""
    out = list(files)
    for f in files:
        if f.endswith("/__init__.py"):
            out.append(f[: -len("__init__.py")] + "*")
    return out


def documents_matching(store: Store, globs: list[str]) -> dict[int, str]:
    """id -> display path of the documents a glob matches: the whole display path, its file name, or the end of its
    path ("src/*.py" matches "project/src/a.py"); a plain name matches that file in any folder. A name holding a
    control character matches as it is stored and as `epi ls` shows it escapes ('first\\nsecond.txt')."""
    out = {}
    for doc in store.documents():
        names = dict.fromkeys((doc.display_path, printable(doc.display_path)))
        for g in globs:
            g = g.strip()
            if not g:
                continue
            if fnmatch.fnmatchcase(doc.path, g) or fnmatch.fnmatchcase(printable(doc.path), g) or any(
                    fnmatch.fnmatchcase(shown, g) or fnmatch.fnmatchcase(os.path.basename(shown), g)
                    or fnmatch.fnmatchcase(shown, "*/" + g) for shown in names):
                out[doc.id] = doc.display_path
                break
    return out


def resolve(store: Store, scope: Scope, doc_globs: list[str] | None = None) -> Restriction:
    out = Restriction()
    docs: dict[int, str] | None = None
    if doc_globs:
        docs = documents_matching(store, doc_globs)
        if not docs:
            raise EpiError(f"--doc {' '.join(doc_globs)} matches no document in the store; `epi ls` lists them")
    where = "the archive" if docs is None else "the documents --doc names"
    missing: list[str] = []  # places the question names that are not there: one note, after the search is known
    if scope.files:
        named = documents_matching(store, scope.files)
        if docs is not None:
            named = {i: p for i, p in named.items() if i in docs}
        if named:
            docs = named
        else:  # the answer would otherwise be made up about a file it never read, without a word
            missing.append(" or ".join(scope.files))
    if docs is not None:  # the documents a named file or `--doc` left, then any chapter, section or page in them
        shown = sorted(set(docs.values()))
        out.described = ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
    if not (scope.structural or scope.symbols or scope.titles):
        if docs is not None:
            out.allowed = {row[0] for row in store.event_places(list(docs))}
        _note_missing(out, missing, where)
        return out
    places = store.event_places(None if docs is None else list(docs))
    allowed = {row[0] for row in places} if docs is not None else None
    # Within one kind the values add up ("chapters 3 and 4"); across kinds they narrow ("page 12 of chapter 3"),
    # unless nothing is left, then they add up too.
    kinds: list[set[int]] = []
    labels = []
    for values, test, label in (
        (scope.parts, _numbered_node("part"), "part {}"),
        (scope.chapters, _chapter_node, "ch. {}"),
        (scope.appendices, _numbered_node("appendix"), "appendix {}"),
        (scope.sections, _section_node, "\u00a7{}"),
    ):
        found: set[int] = set()
        for value in values:
            if test is _chapter_node and value == LAST_CHAPTER:
                ids, shown = _last_chapters(places)
                if ids:
                    found |= ids
                    labels.append(f"the last chapter ({shown})")
                    out.places.append((_chapter_node, shown.removeprefix("ch. ")))
                else:
                    missing.append("numbered chapters")
                continue
            ids = _matching(places, lambda paths, v=value, t=test: any(t(n, v) for p in paths for n in p))
            matched = test
            if not ids and test is _chapter_node:  # no "Chapter N" heading: a top-level "N Title" or "N.x" sections
                ids = _matching(places, lambda paths, v=value: any(
                    _top_section_node(n, v) for p in paths for n in p[:2]))
                matched = _top_section_node
            if ids:
                found |= ids
                labels.append(label.format(value))
                out.places.append((matched, value))
            else:
                missing.append(label.format(value))
        if found:
            kinds.append(found)
    titled: set[int] = set()
    for title in scope.titles:  # quoted text that is no heading's title is a phrase to look for: no note
        headings: list[list] = []  # the matching heading of each event, for the label

        def heading(paths, v=title) -> bool:
            found = [n for p in paths for n in p if _titled_node(n, v)]
            headings.extend(found[:1])
            return bool(found)

        ids = _matching(places, heading)
        if ids:
            titled |= ids
            labels.append(describe_node(headings[0]))
            out.places.append((_titled_node, title))
    if titled:
        kinds.append(titled)
        out.titled = True
    pages: set[int] = set()
    for a, b in scope.pages:
        ids = {row[0] for row in places if row[3] is not None and row[3] <= b and (row[4] or row[3]) >= a}
        if ids:
            pages |= ids
            labels.append(place("", a, b))
        else:
            missing.append(f"page {a if a == b else f'{a}-{b}'}")
    if pages:
        kinds.append(pages)
    if kinds:
        structural = set.intersection(*kinds) or set.union(*kinds)
        allowed = structural if allowed is None else structural & allowed
        out.query = scope.rest if re.search(r"\w", scope.rest) else None
        out.described = ", ".join(x for x in (out.described, *labels) if x)
        if docs is None:
            by_document: dict[int, set[int]] = {}
            for row in places:
                if row[0] in allowed:
                    by_document.setdefault(row[1], set()).add(row[0])
            out.by_document = by_document if len(by_document) > 1 else None
    out.allowed = allowed
    _note_missing(out, missing, where)
    if scope.symbols:
        boosted = _matching(places, lambda paths: any(_has_symbol(p, s) for p in paths for s in scope.symbols))
        out.boosted = boosted or None
    return out


def _note_missing(out: Restriction, missing: list[str], where: str) -> None:
    """One note naming what the question names and the archive lacks; "searching everything" only when nothing else
    the question or --doc named restricts the search (it said so while searching ch. 2 only)."""
    if missing:
        out.notes.append(f"no {', '.join(missing)} found in {where}" +
                         ("; searching everything" if out.allowed is None else ""))


def _matching(places: list[tuple], test) -> set[int]:
    ids = set()
    for row in places:
        paths = all_paths(decode(row[7]))
        if paths and test(paths):
            ids.add(row[0])
    return ids


def _last_chapters(places: list[tuple]) -> tuple[set[int], str]:
    """The events of each document's highest-numbered "Chapter N", and "ch. N" (N of the first such document)."""
    numbers: dict[int, dict[int, set[int]]] = {}  # document -> chapter number -> events
    for row in places:
        for path in all_paths(decode(row[7])):
            for node in path:
                value = number_value(node[1]) if node[0] == "chapter" else None
                if value is not None and value.isdigit():
                    numbers.setdefault(row[1], {}).setdefault(int(value), set()).add(row[0])
    ids: set[int] = set()
    shown = ""
    for doc in sorted(numbers):
        last = max(numbers[doc])
        ids |= numbers[doc][last]
        shown = shown or f"ch. {last}"
    return ids, shown


def _numbered_node(kind: str):
    return lambda node, value: node[0] == kind and number_value(node[1]) == value


def _chapter_node(node: list, value: str) -> bool:
    return node[0] == "chapter" and number_value(node[1]) == value


def _titled_node(node: list, value: str) -> bool:
    """A prose heading whose title is `value` (as title_words compares them)."""
    return node[0] not in CODE_KINDS and bool(node[2]) and title_words(node[2]) == value


def _top_section_node(node: list, value: str) -> bool:
    """A chapter without a "Chapter N" heading: a numbered prose heading N or N.x (the fallback of resolve)."""
    return node[0] not in CODE_KINDS and _section_node(node, value)


def _section_node(node: list, value: str) -> bool:
    """Section 2.4 is the heading numbered 2.4 and everything under it (2.4.1 ...)."""
    number = number_value(node[1])
    return number is not None and (number == value or number.startswith(value + "."))


def _has_symbol(path: list, symbol: list[str]) -> bool:
    """`Cache.get` names a definition `get` directly inside `Cache`; a leading module name (util.Cache.get) may be
    left out of the path."""
    names = [n[2] for n in path if n[0] in CODE_KINDS]
    for start in range(len(symbol)):
        want = symbol[start:]
        for i in range(len(names) - len(want) + 1):
            if names[i:i + len(want)] == want:
                return True
        if len(want) <= 2 or start >= 1:  # drop at most one leading (module) name, and never down to a bare name
            break
    return False
