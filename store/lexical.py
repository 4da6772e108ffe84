"""What the lexical index (SQLite FTS5, BM25) holds for an event, and how a question becomes its query.

Two columns per event (rowid = event id):
- `text`: the event's text, then the parts of its identifiers: `size_limit` -> size limit, `getAndroidApiLevel` ->
  get android api level, `XDG_DOWNLOAD_DIR` -> xdg download dir. The whole identifier stays one token ('_' is a
  token character), so a question naming it exactly still ranks its events first, while a question in words
  ("the android api level") finds it by its parts.
- `place`: where the event sits: its document's path (folders, file name and the file name's parts) and the names
  of the headings or the class and function around it (events.section). A question naming a module ("in the
  unix module"), a platform that is a file ("on Android") or a symbol ("the XDG mixin") finds the events there
  even when the event's own text never says it.

A change to what these functions return changes what a store holds: it needs a migration that refills the table
(schema.py), or old stores answer from the old index.
"""
from __future__ import annotations

import json
import re

# Function words that carry no topic, dropped from searches and from evidence scoring. Kept to function words:
# "option", "file" or "version" often *are* the topic.
STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below
between both but by can could d did do does doing don done during each few for from further had has have
having here how i if in into is it it's its itself just ll m may me might more most must my no nor not now
of on only or other our out over own re s same shall should so some such t than that the their them then
there these they this those to too under until up upon us ve very was we were what when where which while
who whom whose why will with within would you your yours
""".split())
MAX_QUERY_TERMS = 32
# BM25 weight of the place column against the text column's 1.0 (bench/answers/heldout.py --retrieval; docs/evaluation.md).
PLACE_WEIGHT = 1.0

# The tables (events_fts, summaries_fts) are made by schema.py's migrations with tokenize="porter unicode61
# tokenchars '_'": '_' as a token character keeps identifiers like max_retries one token, their parts indexed beside
# them; the porter stemmer (FTS5's own) wraps those tokens, in the index and in queries alike, so "class" meets
# "classes" and "use" meets "used" (measured on the held-out sets: docs/evaluation.md, "Stemming").

_WORD_RE = re.compile(r"\w+")
# Humps of an identifier chunk: "HTTPServer" -> HTTP, Server; "getAndroidApiLevel" -> get, Android, Api, Level;
# "utf8" -> utf, 8.
_HUMP_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def identifier_parts(word: str) -> list[str]:
    """The lower-cased parts of an identifier split at underscores and camel-case humps ([] when it has one part).
    Single letters are dropped: they match everything and name nothing. Only ASCII words are split: the humps know
    only ASCII letters, so "Größe" would become "gr" and "résumé" "sum"."""
    if not word.isascii():
        return []
    parts = [h.lower() for chunk in word.split("_") for h in _HUMP_RE.findall(chunk)]
    parts = [p for p in parts if len(p) > 1]
    return parts if len(parts) > 1 or (parts and parts[0] != word.lower()) else []


def fts5_document(text: str) -> str:
    """The `text` column: the event text plus the parts of its identifiers, so that `retries` finds `max_retries`
    and `android api level` finds `getAndroidApiLevel`, while a query for `max_retries` ranks the event holding the
    whole identifier above ones with just `max`."""
    parts = [p for word in _WORD_RE.findall(text) for p in identifier_parts(word)]
    return text + ("\n" + " ".join(parts) if parts else "")


def place_text(display_path: str, section: str | None) -> str:
    """The `place` column: the document's path and the names of the sections or definitions around the event
    (`section` is events.section's JSON: {"path": [[kind, number, title], ...], "also": [[...], ...]})."""
    words = _words_with_parts(display_path)
    for path in _section_paths(section):
        for node in path:
            if isinstance(node, list) and len(node) == 3 and isinstance(node[2], str):
                words += _words_with_parts(node[2])
    return " ".join(words)


def _words_with_parts(text: str) -> list[str]:
    return [w for word in _WORD_RE.findall(text) for w in [word, *identifier_parts(word)]]


def _section_paths(section: str | None) -> list[list]:
    if not section:
        return []
    try:
        data = json.loads(section)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    paths = [data.get("path"), *(data.get("also") or [])]
    return [p for p in paths if isinstance(p, list)]


def fts5_query(text: str) -> str:
    """Free text -> safe FTS5 query: quoted word/identifier terms joined by OR ('' when nothing is left).

    Terms are \\w+ runs, so they can never contain a quote or FTS5 operator; identifiers are kept whole (they are
    single tokens in the index) and also split into their parts, as the index splits them.
    """
    terms: list[str] = []
    for word in _WORD_RE.findall(text):
        for term in [word.lower(), *identifier_parts(word)]:
            if term not in STOP_WORDS and term not in terms:
                terms.append(term)
    return " OR ".join(f'"{t}"' for t in terms[:MAX_QUERY_TERMS])
