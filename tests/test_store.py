"""Tests for the on-disk episodic store (real SQLite + hnswlib, seeded random unit vectors)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from episodic_cli.store import (
    STORE_FORMAT_VERSION,
    DocumentRecord,
    EventRecord,
    Store,
    StoreBusyError,
    StoreError,
    StoreIdentity,
    StoreMismatchError,
)
from episodic_cli.store import episodic_store
from episodic_cli.store.index import DenseIndex

DIM = 32
IDENTITY = StoreIdentity(
    embedder="all-MiniLM-L6-v2",
    embed_dim=DIM,
    segmenter={"model_name": "SmolLM2-135M-Instruct", "model_sha256": "a" * 64, "tokenizer_sha256": "b" * 64},
    segmentation={"gamma": 1.0, "min_tokens": 16},
)


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_doc(path: str, texts: list[str], rng: np.random.Generator, dim: int = DIM):
    vecs = unit(rng, len(texts), dim)
    events = [
        EventRecord(
            ordinal=i, token_start=10 * i, token_end=10 * i + 10, char_start=50 * i, char_end=50 * i + 50,
            page_start=None, page_end=None, line_start=i + 1, line_end=i + 2, surprise_mean=1.5, surprise_max=3.0,
            text=t, embedding=vecs[i],
        )  # fmt: skip
        for i, t in enumerate(texts)
    ]
    doc = DocumentRecord(
        path=f"/abs/{path}", display_path=path, kind="text", content_sha256="c" * 64, n_tokens=10 * len(texts),
        n_events=len(texts), n_pages=None, n_lines=len(texts) + 1, ingest_seconds=0.25,
    )  # fmt: skip
    return doc, events


def snapshot(store: Store, queries: np.ndarray, words: list[str]) -> tuple:
    docs = [(d.id, d.path, d.n_events) for d in store.documents()]
    events = [(e.id, e.text) for d in store.documents() for e in store.events_of(d.id)]
    dense = [store.search_dense(q, 5) for q in queries]
    lexical = [store.search_lexical(w, 10) for w in words]
    return docs, events, dense, lexical


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def store(tmp_path: Path):
    s = Store.create_or_open(tmp_path / "st", IDENTITY)
    yield s
    s.close()


def test_never_imports_model_runtimes():
    # In a fresh interpreter: other test modules in this session legitimately load the model runtimes.
    import subprocess

    code = ("import sys, episodic_cli.store, episodic_cli.store.index; "
            "print([m for m in ('llama_cpp', 'torch', 'sentence_transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_create_and_reopen_round_trip(tmp_path, rng):
    path = tmp_path / "st"
    with Store.create_or_open(path, IDENTITY) as s:
        for name in ("store.sqlite3", "lock", "kv"):
            assert (path / name).exists()
        doc, events = make_doc("a.txt", ["alpha beta", "gamma delta", "epsilon"], rng)
        saved = s.replace_document(doc, events)
        assert saved.id is not None and saved.ingested_at > 0
        assert [e.id for e in events] == sorted(e.id for e in events)
        assert (path / "index.hnsw").is_file()
    with Store.open_existing(path) as s:
        assert s.identity == IDENTITY and s.identity.segmentation == IDENTITY.segmentation
        got = s.find_document("/abs/a.txt")
        assert dataclasses.replace(got, ingested_at=0.0) == dataclasses.replace(saved, ingested_at=0.0)
        assert s.get_document(saved.id) == got
        evs = s.events_of(saved.id)
        assert [e.text for e in evs] == ["alpha beta", "gamma delta", "epsilon"]
        assert all(e.embedding is None and e.document_id == saved.id for e in evs)
        assert (evs[1].line_start, evs[1].page_start, evs[1].char_end) == (2, None, 100)
        assert s.event_at(saved.id, 2).text == "epsilon" and s.event_at(saved.id, 3) is None
        ids = [e.id for e in evs]
        assert [e.id for e in s.get_events([ids[2], ids[0], 999_999])] == [ids[2], ids[0]]
        assert s.search_dense(events[1].embedding, 1)[0][0] == ids[1]
        assert s.search_dense(events[1].embedding, 1)[0][1] == pytest.approx(1.0, abs=1e-5)
    # The same identity reopens fine; segmentation is recorded but not compared.
    Store.create_or_open(path, dataclasses.replace(IDENTITY, segmentation={"other": 1})).close()


def test_open_existing_missing(tmp_path):
    with pytest.raises(StoreError, match="no store at .*run `epi ingest` first"):
        Store.open_existing(tmp_path / "nope")


@pytest.mark.parametrize(
    "field,value",
    [
        ("embedder", "other-embedder"),
        ("embed_dim", 768),
    ],
)
def test_identity_mismatch_names_field(tmp_path, field, value):
    path = tmp_path / "st"
    Store.create_or_open(path, IDENTITY).close()
    other = dataclasses.replace(IDENTITY, **{field: value})
    with pytest.raises(StoreMismatchError, match=field) as info:
        Store.create_or_open(path, other)
    assert info.value.field == field and info.value.stored == getattr(IDENTITY, field)
    assert "--store" in str(info.value)
    with Store.open_existing(path) as s:
        with pytest.raises(StoreMismatchError, match=field):
            s.check_identity(other)


def test_the_archive_is_not_bound_to_the_model_that_segmented_it(tmp_path):
    path = tmp_path / "st"
    Store.create_or_open(path, IDENTITY).close()
    other = dataclasses.replace(IDENTITY, segmenter={"model_name": "B", "model_sha256": "f" * 64})
    with Store.create_or_open(path, other) as s:  # another model may add to (and answer from) the same archive
        assert s.identity.segmenter["model_name"] == "SmolLM2-135M-Instruct"  # the first one stays recorded


def test_format_version_mismatch(tmp_path):
    path = tmp_path / "st"
    Store.create_or_open(path, IDENTITY).close()
    conn = sqlite3.connect(path / "store.sqlite3")
    conn.execute("UPDATE meta SET value = ? WHERE key = 'format_version'", (str(STORE_FORMAT_VERSION + 1),))
    conn.commit()
    conn.close()
    for opener in (lambda: Store.create_or_open(path, IDENTITY), lambda: Store.open_existing(path)):
        with pytest.raises(StoreMismatchError, match="newer epi"):
            opener()


def test_replace_document_replaces(store, rng):
    doc, old = make_doc("a.txt", ["old max_retries text", "old second"], rng)
    store.replace_document(doc, old)
    other_doc, other = make_doc("b.txt", ["unrelated words"], rng)
    store.replace_document(other_doc, other)
    doc2, new = make_doc("a.txt", ["fresh content here", "more fresh", "third fresh"], rng)
    saved = store.replace_document(doc2, new)
    assert len(store.documents()) == 2 and store.find_document("/abs/a.txt").id == saved.id
    assert [e.text for e in store.events_of(saved.id)] == ["fresh content here", "more fresh", "third fresh"]
    old_ids = {e.id for e in old}
    assert store.get_events(list(old_ids)) == []
    assert set(new[i].id for i in range(3)).isdisjoint(old_ids)  # ids are never reused
    assert store.search_lexical("max_retries", 10) == []
    assert {i for i, _ in store.search_lexical("fresh", 10)} == {e.id for e in new}
    for ev in old:
        assert all(i not in old_ids for i, _ in store.search_dense(ev.embedding, 10))
    assert store.search_dense(new[2].embedding, 1)[0][0] == new[2].id
    assert store.stats()["n_events"] == 4 and store.health() == []


def test_remove_document(store, rng):
    doc, events = make_doc("a.txt", ["to be removed"], rng)
    store.replace_document(doc, events)
    assert store.remove_document("/abs/a.txt") is True
    assert store.remove_document("/abs/a.txt") is False
    assert store.documents() == [] and store.get_events([events[0].id]) == []
    assert store.search_lexical("removed", 5) == [] and store.search_dense(events[0].embedding, 5) == []
    assert store.health() == []


def _populate(store, rng):
    docs = [make_doc(f"d{i}.txt", [f"doc{i} event{j} shared" for j in range(4)], rng) for i in range(3)]
    for doc, events in docs:
        store.replace_document(doc, events)
    queries = np.stack([e.embedding for _, evs in docs for e in evs])
    return docs, queries, ["shared", "doc1", "event2", "never"]


def test_replace_is_atomic_on_failure_midway(store, rng, monkeypatch):
    docs, queries, words = _populate(store, rng)
    before = snapshot(store, queries, words)
    index_bytes = (store.path / "index.hnsw").read_bytes()
    real_insert = Store._insert_event
    calls = {"n": 0}

    def flaky(self, *args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected failure")
        return real_insert(self, *args)

    monkeypatch.setattr(Store, "_insert_event", flaky)
    doc, events = make_doc("d1.txt", ["replacement one", "replacement two", "replacement three", "four"], rng)
    with pytest.raises(RuntimeError, match="injected"):
        store.replace_document(doc, events)
    assert all(e.id is None for e in events)
    assert snapshot(store, queries, words) == before
    assert store.search_lexical("replacement", 5) == []
    assert (store.path / "index.hnsw").read_bytes() == index_bytes
    monkeypatch.undo()
    with Store.open_existing(store.path) as again:
        assert snapshot(again, queries, words) == before and again.health() == []


def test_disk_full_becomes_store_error(store, rng, monkeypatch):
    docs, queries, words = _populate(store, rng)
    before = snapshot(store, queries, words)

    def full(self, *args):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "_insert_event", full)
    doc, events = make_doc("new.txt", ["never stored"], rng)
    with pytest.raises(StoreError, match="disk full while .*nothing was changed"):
        store.replace_document(doc, events)
    assert snapshot(store, queries, words) == before and store.find_document("/abs/new.txt") is None
    # The writer lock was released: another writer can proceed.
    with store.writer():
        pass


def test_crash_between_commit_and_index_save(tmp_path, rng, monkeypatch):
    path = tmp_path / "st"
    s = Store.create_or_open(path, IDENTITY)
    docs, queries, words = _populate(s, rng)
    stale = (path / "index.hnsw").read_bytes()

    def boom(self):
        raise RuntimeError("simulated crash before index save")

    monkeypatch.setattr(DenseIndex, "save", boom)
    doc, events = make_doc("d0.txt", ["rewritten zero a", "rewritten zero b"], rng)
    s.replace_document(doc, events)  # SQLite committed; the failed save is only logged
    assert s.remove_document("/abs/d2.txt")
    assert (path / "index.hnsw").read_bytes() == stale
    s.close()
    monkeypatch.undo()

    with Store.open_existing(path) as s2:
        assert (path / "index.hnsw").read_bytes() != stale  # detected stale ids, rebuilt and saved
        assert s2.search_dense(events[1].embedding, 1)[0][0] == events[1].id
        live = {e.id for d in s2.documents() for e in s2.events_of(d.id)}
        hits = s2.search_dense(queries[0], 100)
        assert {i for i, _ in hits} == live
        assert s2.health() == []


def test_stale_index_file_from_real_crash_is_rebuilt(tmp_path, rng):
    path = tmp_path / "st"
    with Store.create_or_open(path, IDENTITY) as s:
        docs, queries, words = _populate(s, rng)
        old_copy = tmp_path / "old.hnsw"
        shutil.copy(path / "index.hnsw", old_copy)
        shutil.copy(path / "index.hnsw.crc32", tmp_path / "old.hnsw.crc32")  # its sum: a crash leaves both
        assert s.remove_document("/abs/d0.txt")  # only removes: stale file has the same labels plus live extras
    shutil.copy(old_copy, path / "index.hnsw")  # as if the process died before saving
    shutil.copy(tmp_path / "old.hnsw.crc32", path / "index.hnsw.crc32")
    with Store.open_existing(path) as s:
        removed = {e.id for e in docs[0][1]}
        assert all(i not in removed for i, _ in s.search_dense(queries[0], 12))
    with Store.open_existing(path) as s:
        shutil.copy(old_copy, path / "index.hnsw")  # stale file appears while open: health must look at the disk
        shutil.copy(tmp_path / "old.hnsw.crc32", path / "index.hnsw.crc32")
        problems = s.health()  # health checks the file on disk and repairs it
        assert len(problems) == 1 and "brought it up to date" in problems[0]
        assert s.health() == []


def test_missing_or_corrupt_index_is_rebuilt(tmp_path, rng):
    path = tmp_path / "st"
    with Store.create_or_open(path, IDENTITY) as s:
        docs, queries, _ = _populate(s, rng)
        expect = s.search_dense(queries[5], 3)
    (path / "index.hnsw").unlink()
    with Store.open_existing(path) as s:
        assert [i for i, _ in s.search_dense(queries[5], 3)] == [i for i, _ in expect]
    (path / "index.hnsw").write_bytes(b"garbage" * 100)
    with Store.open_existing(path) as s:
        assert [i for i, _ in s.search_dense(queries[5], 3)] == [i for i, _ in expect]


def test_dense_recall_vs_brute_force(tmp_path):
    rng = np.random.default_rng(7)
    dim, n = 64, 2000
    ident = dataclasses.replace(IDENTITY, embed_dim=dim)
    with Store.create_or_open(tmp_path / "st", ident) as s:
        all_events = []
        for d in range(4):  # several documents, so labels span several replace_document calls
            doc, events = make_doc(f"d{d}.txt", [f"t{i}" for i in range(n // 4)], rng, dim)
            s.replace_document(doc, events)
            all_events += events
        ids = np.array([e.id for e in all_events])
        data = np.stack([e.embedding for e in all_events])
        queries = unit(rng, 100, dim)
        truth = ids[np.argsort(-(queries @ data.T), axis=1)[:, :10]]
        hits = 0
        for q, t in zip(queries, truth):
            res = s.search_dense(q, 10)
            assert [sim for _, sim in res] == sorted((sim for _, sim in res), reverse=True)
            exact = {int(i): float(v) for i, v in zip(ids, data @ q)}
            assert all(abs(sim - exact[i]) < 1e-4 for i, sim in res)
            hits += len({i for i, _ in res} & set(t.tolist()))
        assert hits / truth.size >= 0.95
        assert len(s.search_dense(queries[0], 10_000)) == n  # k is capped at the live count


def test_lexical_search_identifiers_and_hostile_input(store, rng):
    doc, events = make_doc(
        "code.py",
        ["def connect(max_retries=3): pass", "the retries counter is reset", "nothing relevant", "what is the max"],
        rng,
    )
    store.replace_document(doc, events)
    ids = [e.id for e in events]
    res = store.search_lexical("max_retries", 10)
    assert res[0][0] == ids[0] and res == sorted(res, key=lambda r: -r[1])
    assert ids[1] in {i for i, _ in res}  # the snake_case part "retries" also matches
    assert ids[0] in {i for i, _ in store.search_lexical("retries", 10)}  # parts of indexed identifiers match
    assert store.search_lexical("MAX_RETRIES?", 1)[0][0] == ids[0]
    for hostile in ['what\'s "the" (max) *?', 'a" OR "b', "NEAR(x y)", "col:val ^ - + {}", "'''", "AND OR NOT"]:
        store.search_lexical(hostile, 5)  # must never raise
    assert {i for i, _ in store.search_lexical('what\'s "the" (max) *?', 5)} == {ids[0], ids[3]}
    assert store.search_lexical("", 5) == [] and store.search_lexical("the of is", 5) == []
    assert store.search_lexical("   ?!  ", 5) == []
    assert episodic_store.fts5_query("max_retries") == '"max_retries" OR "max" OR "retries"'


def test_second_writer_is_busy(tmp_path, rng):
    path = tmp_path / "st"
    a = Store.create_or_open(path, IDENTITY)
    b = Store.open_existing(path)
    with a.writer():
        with pytest.raises(StoreBusyError):
            with b.writer():
                pass
        doc, events = make_doc("x.txt", ["busy"], rng)
        with pytest.raises(StoreBusyError):
            b.replace_document(doc, events)
        a.replace_document(doc, events)  # re-entrant inside the holder's writer()
        assert b.search_lexical("busy", 1)[0][0] == events[0].id  # readers need no lock
    with b.writer():
        with pytest.raises(StoreBusyError):
            with a.writer():
                pass
        # b opened before a's write: entering writer() synchronised its index.
        assert b.search_dense(events[0].embedding, 1)[0][0] == events[0].id
    a.close()
    b.close()


def test_store_imports_without_fcntl(tmp_path):
    """store/ imported fcntl at module level, so it could not be imported on Windows (issue 35). Its locks are
    filelock's now (store/file_lock.py: flock on Unix, LockFileEx on Windows): with fcntl missing, store/ imports
    and a store opens and reads. (Without fcntl off Windows filelock falls back to lock-file existence, which the
    store's always-present `lock` file does not suit; Windows itself gets msvcrt locks.)"""
    code = f"""
import sys
sys.modules["fcntl"] = None  # as on Windows: `import fcntl` fails
import warnings
warnings.simplefilter("ignore")  # filelock says it falls back to its soft lock
from pathlib import Path
from episodic_cli.store import Store, StoreIdentity
from episodic_cli.store.kv_tier import KVSpace
with Store.create_or_open(Path({str(tmp_path / "st")!r}), StoreIdentity(**{dataclasses.asdict(IDENTITY)!r})):
    pass
with Store.open_existing(Path({str(tmp_path / "st")!r})) as st:
    print(st.stats()["n_documents"], st.search_lexical("anything", 3))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "[]"]


def test_stats_and_health(store, rng):
    assert store.stats()["n_documents"] == 0 and store.health() == []
    _populate(store, rng)
    st = store.stats()
    assert (st["n_documents"], st["n_events"], st["n_tokens"]) == (3, 12, 120)
    expected_min = sum(f.stat().st_size for f in store.path.iterdir() if f.is_file())
    assert st["disk_bytes"] >= expected_min > 0
    assert store.health() == []
    conn = sqlite3.connect(store.path / "store.sqlite3")
    conn.execute("UPDATE documents SET n_events = 99 WHERE display_path = 'd1.txt'")
    conn.commit()
    conn.close()
    assert any("d1.txt" in p for p in store.health())


def test_rejects_bad_embeddings(store, rng):
    doc, events = make_doc("a.txt", ["x", "y"], rng)
    events[1].embedding = np.ones(DIM + 1, dtype=np.float32)
    with pytest.raises(ValueError):
        store.replace_document(doc, events)
    events[1].embedding = None
    with pytest.raises(ValueError):
        store.replace_document(doc, events)
    assert store.documents() == []


def test_compaction_keeps_index_small(store, rng):
    for round_ in range(6):
        doc, events = make_doc("a.txt", [f"r{round_} e{j}" for j in range(100)], rng)
        store.replace_document(doc, events)
    st = store.stats()
    assert st["index_live"] == 100 and st["index_deleted"] < 300
    assert store.search_dense(events[42].embedding, 1)[0][0] == events[42].id
    assert store.health() == []


def test_a_writer_saves_the_index_once_per_run_not_once_per_document(tmp_path, rng, monkeypatch):
    saves = []
    real_save = DenseIndex.save
    monkeypatch.setattr(DenseIndex, "save", lambda self: saves.append(1) or real_save(self))
    with Store.create_or_open(tmp_path / "st", IDENTITY) as s, s.writer():
        saves.clear()  # a new store writes its (empty) index when it is created
        for i in range(20):
            doc, events = make_doc(f"d{i}.txt", [f"doc {i} event {j}" for j in range(3)], rng)
            s.replace_document(doc, events)
        assert saves == []  # within one writer session (an ingest run), well under INDEX_SAVE_INTERVAL_S
    assert len(saves) == 1  # saved once when the writer let go
    with Store.open_existing(tmp_path / "st") as s:
        assert s.stats()["index_live"] == 60 and s.health() == []


def test_a_reader_catches_up_with_a_lagging_index_without_a_rebuild(tmp_path, rng, monkeypatch):
    path = tmp_path / "st"
    with Store.create_or_open(path, IDENTITY) as s:
        docs, queries, _ = _populate(s, rng)
        lagging = (path / "index.hnsw").read_bytes()
        lagging_sum = (path / "index.hnsw.crc32").read_bytes()
        doc, new_events = make_doc("late.txt", ["written after the last save"], rng)
        s.replace_document(doc, new_events)
        assert s.remove_document("/abs/d0.txt")
    (path / "index.hnsw").write_bytes(lagging)  # as if the writer died before saving these two changes
    (path / "index.hnsw.crc32").write_bytes(lagging_sum)  # (its sum is as old: saved with it)

    def no_rebuild(self):
        raise AssertionError("a lagging index must be caught up, not rebuilt")

    monkeypatch.setattr(Store, "_rebuild_index", no_rebuild)
    with Store.open_existing(path) as s:
        assert s.search_dense(new_events[0].embedding, 1)[0][0] == new_events[0].id
        removed = {e.id for e in docs[0][1]}
        assert not removed & {i for i, _ in s.search_dense(queries[0], 50)}


def test_a_long_lived_reader_sees_what_another_process_commits_after_refresh(tmp_path, rng):
    path = tmp_path / "st"
    with Store.create_or_open(path, IDENTITY) as writer_side:
        doc, first = make_doc("a.txt", ["first event"], rng)
        writer_side.replace_document(doc, first)
        with Store.open_existing(path) as chat:  # e.g. `epi chat`, open while an ingest goes on
            doc, second = make_doc("b.txt", ["committed while the chat was open"], rng)
            writer_side.replace_document(doc, second)
            assert chat.search_dense(second[0].embedding, 1)[0][0] != second[0].id
            chat.refresh()
            assert chat.search_dense(second[0].embedding, 1)[0][0] == second[0].id
