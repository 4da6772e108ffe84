"""The lexical index (store/lexical.py, migration m007): identifiers are found by their parts (camelCase as well as
snake_case), events by their file's path and the class or function around them; a store written before the
migration opens, is re-indexed and answers. Real SQLite FTS5; the last test ingests and answers with the bundled
model."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import workspace_for
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.documents.sources import discover
from episodic_cli.store import DocumentRecord, EventRecord, Store, StoreIdentity, lexical

DIM = 8


@pytest.mark.parametrize("word, parts", [
    ("getAndroidApiLevel", ["get", "android", "api", "level"]),
    ("size_limit", ["size", "limit"]),
    ("XDG_DOWNLOAD_DIR", ["xdg", "download", "dir"]),
    ("PlatformDirsABC", ["platform", "dirs", "abc"]),
    ("HTTPServer", ["http", "server"]),
    ("utf8", ["utf"]),
    ("android", []), ("Android", []), ("x_y", []), ("10962", []),
])
def test_identifier_parts(word, parts):
    assert lexical.identifier_parts(word) == parts


def test_query_and_document_split_the_same_way():
    assert lexical.fts5_query("max_retries") == '"max_retries" OR "max" OR "retries"'
    assert lexical.fts5_query("what does getAndroidApiLevel return?") == (
        '"getandroidapilevel" OR "get" OR "android" OR "api" OR "level" OR "return"')
    assert lexical.fts5_document("v = sys.getAndroidApiLevel()").endswith("\nget android api level")
    section = json.dumps({"path": [["class", None, "XDGMixin"], ["def", None, "user_config_dir"]],
                          "also": [[["def", None, "site_data_dir"]]]})
    assert lexical.place_text("platformdirs/_xdg.py", section).split() == [
        "platformdirs", "_xdg", "xdg", "py", "XDGMixin", "xdg", "mixin", "user_config_dir", "user", "config", "dir",
        "site_data_dir", "site", "data", "dir"]
    assert lexical.place_text("a.py", "not json") == "a py" and lexical.place_text("a.py", None) == "a py"


def _event(i: int, text: str, section: dict | None, rng) -> EventRecord:
    vec = rng.standard_normal(DIM).astype(np.float32)
    return EventRecord(ordinal=i, token_start=10 * i, token_end=10 * i + 10, char_start=50 * i, char_end=50 * i + 50,
                       page_start=None, page_end=None, line_start=i + 1, line_end=i + 2, surprise_mean=1.0,
                       surprise_max=2.0, text=text, embedding=vec / np.linalg.norm(vec),
                       section=json.dumps(section) if section else None)


def _doc(path: str, n: int) -> DocumentRecord:
    return DocumentRecord(path=f"/abs/{path}", display_path=path, kind="code", content_sha256=path * 4, n_tokens=10 * n,
                          n_events=n, n_pages=None, n_lines=n + 1, ingest_seconds=0.1)


@pytest.fixture
def code_store(tmp_path):
    rng = np.random.default_rng(0)
    st = Store.create_or_open(tmp_path / "s", StoreIdentity("e", DIM))
    files = {
        "pkg/__init__.py": ["if hasattr(sys, 'getAndroidApiLevel'):\n    level = sys.getAndroidApiLevel()",
                            "# the level of detail in the api docs", "def android_folder():\n    return None"],
        "pkg/android.py": ["def user_config_dir(self):\n    return self._base + '/shared_prefs'"],
        "pkg/unix.py": ["def user_config_dir(self):\n    return self._base + '/.config'",
                        "def user_downloads_dir(self):\n    return self._from_env('DOWNLOAD')"],
        # Other code, so that the words above are rare in the archive as they are in a real one.
        "pkg/misc.py": [f"def helper_{i}(items):\n    return sorted(items)[:{i}]" for i in range(12)],
    }
    sections = {"pkg/unix.py": [None, {"path": [["class", None, "XDGMixin"], ["def", None, "user_downloads_dir"]]}]}
    ids = {}
    for path, texts in files.items():
        doc, events = _doc(path, len(texts)), [
            _event(i, t, (sections.get(path) or [None] * len(texts))[i], rng) for i, t in enumerate(texts)]
        st.replace_document(doc, events)
        ids[path] = [e.id for e in events]
    yield st, ids
    st.close()


def test_a_question_in_words_finds_the_identifier_made_of_them(code_store):
    st, ids = code_store
    found = st.search_lexical("which android api level does it check?", 5)
    assert found[0][0] == ids["pkg/__init__.py"][0]


def test_a_question_naming_a_module_or_symbol_finds_the_events_there(code_store):
    st, ids = code_store
    # Neither event's text says "android": the file's name does.
    assert st.search_lexical("On Android, where is the user config dir?", 5)[0][0] == ids["pkg/android.py"][0]
    # "XDG mixin" is the class around the event, not in its text.
    assert st.search_lexical("downloads directory in the XDG mixin", 5)[0][0] == ids["pkg/unix.py"][1]


def _downgrade_to_before_m007(store_dir) -> None:
    """Make a store look written before m007: its FTS table as m001 made it (one column, snake_case parts only)."""
    import sqlite3

    conn = sqlite3.connect(store_dir / "store.sqlite3", isolation_level=None)
    rows = conn.execute("SELECT id, text FROM events").fetchall()
    conn.execute("DROP TABLE events_fts")
    conn.execute("""CREATE VIRTUAL TABLE events_fts USING fts5(text, tokenize="unicode61 tokenchars '_'")""")
    for event_id, text in rows:
        parts = [p for w in re.findall(r"\w+", text) if "_" in w for p in w.split("_") if p]
        conn.execute("INSERT INTO events_fts (rowid, text) VALUES (?, ?)", (event_id, text + "\n" + " ".join(parts)))
    conn.execute("DELETE FROM _migrations WHERE name = 'm007_lexical_identifier_parts_and_places'")
    conn.close()


def test_a_store_written_before_the_migration_opens_and_answers(engine, tmp_path):
    source = tmp_path / "android_support.py"
    source.write_text('"""Platform checks."""\nimport sys\n\n\ndef on_android():\n    """Whether this is Android."""\n'
                      "    return hasattr(sys, 'getAndroidApiLevel') and sys.getAndroidApiLevel() >= 21\n",
                      encoding="utf-8")
    store_dir = tmp_path / "store"
    ws = workspace_for(engine, store_dir)
    st = ws.store_for_writing(SegmentParams())
    ingestor = ws.ingestor(st, SegmentParams())
    try:
        with st.writer():
            [result] = list(ingestor.ingest(discover([source])))
    finally:
        ingestor.close()
        st.close()
    assert result.status == "ingested", result.error
    _downgrade_to_before_m007(store_dir)
    with Store.open_existing(store_dir) as old:  # opening migrates: the parts and places are indexed
        assert old.search_lexical("api level", 5) and old.search_lexical("support", 5)
        pieces = []
        result, stream = ws.ask(old, "Which android api level does on_android require?", AskOptions(mode="text"),
                                should_stop=lambda: len(pieces) >= 16)
        pieces.extend(stream)
        answer = "".join(pieces)
    assert answer.strip() and result.retrieved
    assert "getAndroidApiLevel" in result.retrieved[-1].event.text


def _stemming_store(path):
    rng = np.random.default_rng(1)
    st = Store.create_or_open(path, StoreIdentity("e", DIM))
    texts = ["The Retrying class is used around every call.", "Waiting strategies decide the pause."] + [
        f"def helper_{i}(items):\n    return sorted(items)[:{i}]" for i in range(10)]
    doc = _doc("pkg/retry.py", len(texts))
    events = [_event(i, t, None, rng) for i, t in enumerate(texts)]
    st.replace_document(doc, events)
    return st, [e.id for e in events]


def test_the_lexical_index_stems_so_classes_meets_class_and_uses_meets_used(tmp_path):
    """FTS5 had no stemming: "classes" never found "class", nor "uses" "used" (issue 35, item 4)."""
    st, ids = _stemming_store(tmp_path / "s")
    try:
        assert st.search_lexical("Which classes does it use?", 3)[0][0] == ids[0]
        assert st.search_lexical("how does it wait?", 3)[0][0] == ids[1]
        assert st.search_lexical("helper_3", 1)[0][0] == ids[5]  # an identifier is still found whole
    finally:
        st.close()


def test_a_store_indexed_before_stemming_is_reindexed_when_opened(tmp_path):
    import sqlite3

    st, ids = _stemming_store(tmp_path / "s")
    st.close()
    conn = sqlite3.connect(tmp_path / "s" / "store.sqlite3", isolation_level=None)
    rows = conn.execute("SELECT rowid, text, place FROM events_fts").fetchall()
    conn.execute("DROP TABLE events_fts")  # as m007 made it: no stemmer
    conn.execute("""CREATE VIRTUAL TABLE events_fts USING fts5(text, place, tokenize="unicode61 tokenchars '_'")""")
    conn.executemany("INSERT INTO events_fts (rowid, text, place) VALUES (?, ?, ?)", rows)
    conn.execute("DELETE FROM _migrations WHERE name = 'm010_lexical_stemming'")
    assert not conn.execute("SELECT rowid FROM events_fts WHERE events_fts MATCH 'classes'").fetchall()
    conn.close()
    with Store.open_existing(tmp_path / "s") as old:  # opening migrates: the same rows, stemmed
        assert old.search_lexical("Which classes does it use?", 3)[0][0] == ids[0]
        assert old.health() == []
