"""A question about a document or a folder of the archive as a whole, asked by its name: "what does epi do?" (the
README's title), "what is tenacity for?" (a package's folder), "tell me about the gzip manual" (a file's name).

question_kind.py reads "what does this library do?" as an overview, but a question that names the thing had no
part to resolve ("epi" is no chapter, file or symbol), so it was found like an explanation: its best passages,
which for "what does epi do?" were not the README's opening paragraph (issue 38). Here such a question is told by
its shape (what X is, does, is for; the purpose of X; tell me about X, ...) and X is looked up among the names the
archive gives its wholes:

- a folder at or under the folder all documents share ("h11", "sse_starlette"): the documents under it;
- a text document's file name without its extension ("gzip" for gzip.txt), unless it is a name many files have
  (README, index, ...); a code file's name stays what scope.py makes of it (that file read whole);
- a text document's title: its first heading when every event sits under it (a Markdown file's single "# epi"),
  and that title's name before a colon or dash ("GNU Gzip" of "GNU Gzip: General file (de)compression").

Names are compared case, spacing and `-`/`_` aside, and with a leading "GNU" or "python" on either side optional
("gzip" is "GNU gzip", "dotenv" is "python-dotenv"). The shapes were first written from how people ask, then
widened once from the misses of two blind sets; a third measured them (docs/heldout.md, "A whole named by its
name"). Such a question is then found within what it names, and `opening_document` gives the
document whose opening is ranked first. Plain engine module: no model.
"""
from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass

from ...store import DocumentRecord, Store
from ...store.lexical import STOP_WORDS
from ...store.summaries import collection_key, collections
from ..documents.structure import CODE_KINDS, decode

# What the question asks of X as a whole. X is up to 60 characters with no clause punctuation; it is only taken when
# it is one of the archive's names, so "what is the default timeout?" gets no further than the lookup.
_X = r"(?P<x>[^?,;:!]{1,60}?)"
_SHAPES = [  # the plain "what is X" last: "what is the purpose of X" is X's purpose
    rf"what\s+(?:does|do|can|will)\s+{_X}\s+(?:do|does|offer|provide|cover|contain|support|solve)"
    r"(?:\s+(?:exactly|for\s+me|for\s+us|in\s+general|overall))?",
    rf"what\s+(?:is|was|are)\s+the\s+(?:purpose|point|goal|aim|use|idea|job)\s+(?:of|behind)\s+{_X}",
    rf"what\s+problems?\s+(?:does|do)\s+{_X}\s+solve(?:\s+(?:for|in)\s+[^?]{{1,40}})?",
    rf"what\s+(?:kind|sort|type)\s+of\s+\w+\s+is\s+{_X}",
    # "what features does X offer", "what kinds of constraints does X cover"
    r"what\s+(?:(?:kinds?|sorts?|types?)\s+of\s+)?(?:features?|functions?|functionality|capabilities|things|"
    r"tools|constraints|options|commands|topics|parts)\s+"
    rf"(?:does|do)\s+{_X}\s+(?:offer|provide|have|cover|support|include|handle)"
    r"(?:\s+(?:beyond|besides|apart\s+from|other\s+than)\s+[^?]{1,40})?",
    rf"tell\s+me\s+what\s+{_X}\s+(?:is|does|offers|provides|covers)",
    rf"why\s+(?:would|should|do|might)\s+(?:i|you|one|we|someone|anyone)\s+(?:use|need|want)\s+{_X}",
    rf"how\s+does\s+{_X}\s+work(?:\s+(?:overall|in\s+general|as\s+a\s+whole|roughly|under\s+the\s+hood))?",
    rf"(?:tell\s+me|talk)\s+(?:a\s+(?:bit|little)\s+)?about\s+{_X}",
    rf"(?:describe|introduce|summari[sz]e)\s+{_X}",
    rf"(?:give\s+(?:me\s+)?)?(?:an?\s+)?(?:brief\s+|short\s+|quick\s+|general\s+)?"
    rf"(?:overview|summary|introduction)\s+(?:of|to)\s+{_X}",
    rf"what(?:'s|\s+is|\s+are)\s+{_X}(?:\s+(?:for|about|all\s+about|(?:used|good|meant)\s+for))?",
]
_OPENING = r"^\W*(?:(?:so|and|ok|okay|hi|hello|hey)\b\W*)?(?:please\s+)?(?:(?:can|could)\s+you\s+)?"
# The question may go on after the shape in a clause of its own: "what is X, and what is it good for?", "tell me
# about X - what kind of tool is it?", "how does X work overall? Walk me through ...". X then ends at the first
# such break (it is matched as short as it can be).
_GOES_ON = r"(?:\s*[:;,?]|\s+[-\u2013\u2014]+\s|\s+(?:and|or|but)\s)"
_SHAPE_RES = [re.compile(_OPENING + shape + rf"(?:\s*(?:,?\s*please)?\W*$|{_GOES_ON}.*$)", re.I | re.S)
              for shape in _SHAPES]
# Words around a name that say what kind of thing it is, not which: "the tenacity library", "the gzip manual".
_KIND_WORDS = ("library", "package", "module", "project", "tool", "program", "app", "application", "framework",
               "manual", "book", "documentation", "docs", "guide", "handbook", "reference", "codebase", "code",
               "repository", "repo", "utility", "command", "crate", "software", "cli", "api", "document", "text",
               "readme", "source", "python")
_KIND_RE = re.compile(r"^(?:(?:the|a|an|this|that|your|my)\s+)+|(?:\s+(?:" + "|".join(_KIND_WORDS) + r"))+$", re.I)
# File names many documents have: the name says nothing about what the archive is.
_GENERIC_STEMS = frozenset("readme index main init __init__ __main__ setup contents toc intro introduction manual "
                           "doc docs notes changelog changes history license copying authors news todo book "
                           "chapter part src lib test tests".split())
_OPTIONAL_PREFIXES = ("gnu ", "python ")


@dataclass
class NamedWhole:
    name: str                         # as the archive has it: "h11/", "gzip.txt", "epi"
    documents: list[DocumentRecord]   # the documents it covers
    collection_keys: set[str]         # the map's collection summaries written for exactly that folder
    whole_archive: bool               # it covers every document of the archive

    @property
    def document_ids(self) -> set[int]:
        return {d.id for d in self.documents}

    def event_ids(self, store: Store) -> set[int]:
        return {row[0] for row in store.event_places(sorted(self.document_ids))}


def _is_readme(path: str) -> bool:
    return posixpath.basename(path).casefold().startswith("readme")


def subject(question: str) -> str | None:
    """What the question asks about as a whole ("epi" of "what does epi do?"), or None when it has no such shape."""
    for shape in _SHAPE_RES:
        m = shape.match(question.strip())
        if m:
            x = m.group("x").strip().strip("`'\"\u2018\u2019\u201c\u201d").strip()
            x = _KIND_RE.sub("", x).strip().strip("`'\"\u2018\u2019\u201c\u201d").strip()
            if x.casefold() == "readme":  # "summarise the README": the archive's README, a name of its own
                return "readme"
            return x if x and x.casefold() not in _KIND_WORDS else None
    return None


def _compared(name: str) -> set[str]:
    """The forms a name is compared in: case, `-`, `_`, `.` and spacing aside, with or without an optional prefix."""
    base = " ".join(re.sub(r"[-_.\s]+", " ", name.casefold()).split()).strip(" '\"`")
    forms = {base}
    for prefix in _OPTIONAL_PREFIXES:
        if base.startswith(prefix) and len(base) > len(prefix):
            forms.add(base[len(prefix):])
    return {f for f in forms if len(f) >= 2 and f not in STOP_WORDS}


def _title(store: Store, doc: DocumentRecord) -> str | None:
    """A text document's title: the heading its first and last events both sit under (None if they do not)."""
    if doc.kind == "code" or doc.n_events < 1 or doc.id is None:
        return None
    first, last = store.event_at(doc.id, 0), store.event_at(doc.id, doc.n_events - 1)
    heads = []
    for event in (first, last):
        section = decode(event.section) if event is not None else None
        path = (section or {}).get("path") or []
        heads.append(path[0] if path else None)
    top = heads[0]
    if not top or heads[1] != top or top[0] in CODE_KINDS or not isinstance(top[2], str):
        return None
    return top[2]


def _names(store: Store, documents: list[DocumentRecord]) -> dict[str, tuple[str, set[int]]]:
    """Compared form -> (the name as shown, the documents it covers), for every whole the archive names."""
    names: dict[str, tuple[str, set[int]]] = {}

    def add(name: str, shown: str, ids: set[int]) -> None:
        for form in _compared(name):
            if form not in names:
                names[form] = (shown, ids)
            elif not ids <= names[form][1]:  # two wholes share a name: it names neither (an outer folder keeps it)
                names[form] = (shown, set())

    paths = {d.id: d.display_path.replace(os.sep, "/") for d in documents}
    dirs = {i: posixpath.dirname(p) for i, p in paths.items()}
    try:
        common = posixpath.commonpath(list(dirs.values())) if dirs else ""
    except ValueError:  # absolute beside relative paths
        common = ""
    folders: dict[str, set[int]] = {}
    for i, folder in dirs.items():
        parts = folder.split("/")
        # the common folder itself, then every folder below it ("h11/" and its package "h11/h11/")
        for depth in range(len(common.split("/")) if common else 1, len(parts) + 1):
            folders.setdefault("/".join(parts[:depth]), set()).add(i)
    for folder in sorted(folders, key=lambda f: f.count("/")):  # outer folders first: they keep a shared name
        if posixpath.basename(folder):
            add(posixpath.basename(folder), folder + "/", folders[folder])
    readmes = sorted((p.count("/"), i) for i, p in paths.items() if _is_readme(p))
    if readmes and (len(readmes) == 1 or readmes[1][0] > readmes[0][0]):  # "the README": the one nearest the top
        add("readme", paths[readmes[0][1]], {readmes[0][1]})
    for doc in documents:
        if doc.kind != "code":
            stem = posixpath.splitext(posixpath.basename(paths[doc.id]))[0]
            if stem.casefold() not in _GENERIC_STEMS:
                add(stem, doc.display_path, {doc.id})
            title = _title(store, doc)
            if title:
                add(title, doc.display_path, {doc.id})
                lead = re.split(r"\s*(?::|\s[-\u2013\u2014]\s|\()\s*", title, maxsplit=1)[0]
                if lead != title and len(lead.split()) <= 4:
                    add(lead, doc.display_path, {doc.id})
    return names


def named_whole(store: Store, question: str, within: set[int] | None = None) -> NamedWhole | None:
    """The document or folder `question` asks about as a whole by its name, or None. `within`: only these documents
    of it (`--doc`); the names are still the whole archive's."""
    x = subject(question)
    if x is None:
        return None
    documents = [d for d in store.documents() if d.status == "complete"]
    if not documents:
        return None
    names = _names(store, documents)
    for form in _compared(x):
        if form in names and names[form][1]:
            shown, ids = names[form]
            keys = {collection_key(folder) for folder, members in collections(documents).items()
                    if {d.id for d in members} == ids}
            covered = [d for d in documents if d.id in ids and (within is None or d.id in within)]
            if not covered:
                return None
            return NamedWhole(shown, covered, keys, len(covered) == len(documents))
    return None


def opening_document(named: NamedWhole) -> DocumentRecord | None:
    """The document whose opening says what the named whole is: the document itself, or for a folder its README
    nearest the top, else its package's `__init__` nearest the top, else its first document by path."""
    def rank(d: DocumentRecord) -> tuple:
        path = d.display_path.replace(os.sep, "/")
        stem = posixpath.splitext(posixpath.basename(path))[0].casefold()
        return (0 if _is_readme(path) else 1 if stem == "__init__" else 2, path.count("/"), path)

    return min(named.documents, key=rank, default=None)
