"""Faults a user meets in the first hour (issue 15): each ends as one clear line on stderr naming the real cause and
the fix, with the right exit code and no traceback, and leaves the documents already stored intact. The real
bundled model runs; mocks only inject failures (a full disk)."""
from __future__ import annotations

import errno
import json
import os
import random
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import conftest
from episodic_cli.app import app
from episodic_cli.engine.budgets import MAX_QUESTION_CHARS
from episodic_cli.engine.llama.gguf import describe_damage
from episodic_cli.engine.llama.models import bundled_model_path
from episodic_cli.store import Store, StoreError

runner = CliRunner()
PROSE = "The tide tables were kept in the harbour office, beside the ledger of storms. " * 6 + "\n"


def invoke(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], **kwargs)


def assert_one_line_error(result, *needles: str, code: int = 1) -> str:
    """conftest's check; some of these commands print results (ingest --json) before they fail."""
    return conftest.assert_one_line_error(result, *needles, code=code, stdout_empty=False)


def stored(store_dir: Path) -> dict[str, int]:
    """display path -> number of events, read straight from the store."""
    with Store.open_existing(store_dir) as st:
        return {d.display_path: len(st.events_of(d.id)) for d in st.documents()}


def ingest_documents(tmp_path: Path, names: list[str]) -> list[Path]:
    docs = []
    for i, name in enumerate(names):
        doc = tmp_path / name
        doc.write_text(f"Document {i}. " + PROSE, encoding="utf-8")
        docs.append(doc)
    return docs


# ------------------------------------------------------------------------------- 1, 7: damaged model files


def crafted_gguf(path: Path, key_length: int) -> Path:
    """A GGUF v3 preamble (0 tensors, 1 metadata entry) whose first key claims `key_length` bytes."""
    path.write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, key_length) + b"general.name" + bytes(64))
    return path


def random_gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF" + random.Random(15).randbytes(4096))
    return path


@pytest.mark.parametrize("make", [
    random_gguf,
    lambda p: crafted_gguf(p, 2**62),  # the MemoryError of issue 15: a huge key length, read while peeking
], ids=["random-bytes", "huge-key-length"])
def test_corrupt_gguf_header_is_one_line(tmp_path, shared_store, make):
    fake = make(tmp_path / "corrupt.gguf")
    before = stored(shared_store.store_dir)
    result = invoke("ingest", shared_store.text, "--model", fake, "--store", shared_store.store_dir)
    assert_one_line_error(result, str(fake), "not a valid GGUF file", "header is damaged")
    assert stored(shared_store.store_dir) == before


def test_corrupt_gguf_through_the_real_entry_point(tmp_path):
    """The reported case: `GGUF` + random bytes ended in a 130-line MemoryError traceback."""
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF" + random.Random(1).randbytes(1 << 16))
    doc = ingest_documents(tmp_path, ["doc.txt"])[0]
    env = {**os.environ, "EPI_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", str(doc), "--model", str(fake)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {fake} is not a valid GGUF file"), line


def truncated_copy(source: Path, target: Path, n_bytes: int = 10 << 20) -> Path:
    with source.open("rb") as f:
        target.write_bytes(f.read(n_bytes))
    return target


def test_truncated_bundled_model_is_blamed_on_the_file_not_the_cache(tmp_path, shared_store):
    """The Q4_1 file is expanded to F16 first: its failure used to read "is the cache directory writable?"."""
    trunc = truncated_copy(bundled_model_path(), tmp_path / "SmolLM2-cut.gguf")
    before = stored(shared_store.store_dir)
    result = invoke("ingest", shared_store.text, "--model", trunc, "--store", shared_store.store_dir)
    err = assert_one_line_error(result, str(trunc), "truncated", "10.5 MB", "copy or download it again")
    assert "cache" not in err
    assert stored(shared_store.store_dir) == before


def test_truncated_f16_model_loaded_as_is(tmp_path, engine):
    """A model used as provided (F16) fails inside llama.cpp's loader instead; the same diagnosis applies."""
    trunc = truncated_copy(engine.prepared.path, tmp_path / "model-f16-cut.gguf")
    assert "truncated" in describe_damage(trunc)
    doc = ingest_documents(tmp_path, ["doc.txt"])[0]
    result = invoke("ingest", doc, "--model", trunc, "--store", tmp_path / "store")
    assert_one_line_error(result, str(trunc), "truncated", "copy or download it again")
    assert describe_damage(engine.prepared.path) is None  # an intact model is not called damaged


# ------------------------------------------------------------------------- 2: empty files in a walked folder


def test_empty_files_in_a_walked_folder_are_skipped_quietly(tmp_path):
    tree = tmp_path / "project"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_bytes(b"")
    (tree / "pkg" / "blank.md").write_text("  \n\n\t\n", encoding="utf-8")
    (tree / "notes.txt").write_text(PROSE, encoding="utf-8")
    store = tmp_path / "store"
    result = invoke("ingest", tree, "--store", store, "--json")
    assert result.exit_code == 0, result.output
    records = {Path(r["path"]).name: r for r in map(json.loads, result.stdout.splitlines())}
    assert records["notes.txt"]["status"] == "ingested"
    for name in ("__init__.py", "blank.md"):
        assert records[name]["status"] == "skipped" and records[name]["error"] == "empty file"
    assert list(stored(store)) == [str(tree / "notes.txt")]

    (tree / "notes.txt").write_text(PROSE + "One more line.\n", encoding="utf-8")
    result = invoke("ingest", tree, "--store", store)  # human form: dim one-line notes, summary counts them
    assert result.exit_code == 0, result.output
    assert "✗" not in result.stderr and "error" not in result.stderr
    assert sum("empty, skipped" in line for line in result.stderr.splitlines()) == 2
    assert "2 skipped" in result.stderr


def test_a_folder_of_only_empty_files_has_nothing_to_ingest(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_bytes(b"")
    result = invoke("ingest", tmp_path / "pkg", "--store", tmp_path / "store")
    assert_one_line_error(result, "nothing to ingest", "__init__.py: empty file")
    assert not (tmp_path / "store").exists()  # refused before a store is created or a model loaded


# ----------------------------------------------------------------------------- 8: named paths that fail


def test_missing_and_looping_named_paths_fail_the_run_but_good_files_are_ingested(tmp_path):
    good = ingest_documents(tmp_path, ["good.txt"])[0]
    missing = tmp_path / "missing.txt"
    loop = tmp_path / "loop.txt"
    os.symlink(loop.name, loop)  # points at itself
    store = tmp_path / "store"
    result = invoke("ingest", missing, loop, good, "--store", store, "--json")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    records = {r["path"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert records[str(good)]["status"] == "ingested"
    assert records[str(missing)] == {**records[str(missing)], "status": "failed",
                                     "error": "no such file or directory"}
    assert records[str(loop)]["status"] == "failed" and records[str(loop)]["error"].startswith("symlink loop")
    assert list(stored(store)) == [str(good)]


def test_only_missing_paths_are_refused_before_loading_anything(tmp_path):
    missing = tmp_path / "missing.txt"
    result = invoke("ingest", missing, "--store", tmp_path / "store")
    assert_one_line_error(result, f"nothing to ingest: {missing}: no such file or directory")
    assert not (tmp_path / "store").exists()


def test_piped_ingest_prints_whole_lines_and_no_bars(tmp_path):
    """The real entry point with stderr piped: a typo among the paths exits 1 and is named on its own line; each
    per-file line stays whole (it used to wrap at 80 columns in the middle of a number); no progress bar frames."""
    deep = tmp_path / ("a-folder-name-long-enough-to-push-the-line-past-eighty-columns" * 2)
    deep.mkdir()
    good = ingest_documents(deep, ["good.txt"])[0]
    missing = tmp_path / "typo.txt"
    env = {**os.environ, "EPI_HOME": str(tmp_path / "home"), "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", str(good), str(missing), "--store",
                           str(tmp_path / "store")], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    [done] = [ln for ln in lines if ln.startswith("✓")]
    assert done.startswith(f"✓ {good}: ") and done.endswith(" tok/s)"), lines
    assert [ln for ln in lines if "typo.txt" in ln] == [f"✗ {missing}: no such file or directory"]
    assert not any("files (bytes)" in ln or "━" in ln for ln in lines), lines
    assert any(ln.startswith("1 ingested, 1 failed; ") for ln in lines), lines


# ---------------------------------------------------------------------------------------- 6: disk full


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_after_first_commit(monkeypatch, fail) -> list[int]:
    """Let the first document commit, then make `fail` the behaviour of every later write; returns the count of
    failed writes (so a test can check the injection point was really reached)."""
    armed, failed = [], []
    real_replace = Store.replace_document

    def replace_document(self, *args, **kwargs):
        if armed:
            failed.append(1)
            return fail(self, *args, **kwargs)
        committed = real_replace(self, *args, **kwargs)
        armed.append(True)
        return committed

    monkeypatch.setattr(Store, "replace_document", replace_document)
    return failed, armed


def test_disk_full_on_a_kv_block_write_keeps_the_text_and_says_so_once(tmp_path, monkeypatch):
    """ENOSPC from a KV block write (os.write into the tier's temporary file) from the second of three files on: KV
    blocks are a cache, so the archive goes on (every file's text, events and embeddings are committed), the refusal
    is said once, and nothing half-written is left in the tier."""
    from conftest import tier_block_paths

    docs = ingest_documents(tmp_path, ["a.txt", "b.txt", "c.txt"])
    store = tmp_path / "store"
    armed: list[bool] = []
    writes_failed: list[int] = []
    real_write = os.write

    def write(fd, data):
        if armed:
            writes_failed.append(1)
            enospc()
        return real_write(fd, data)

    real_replace = Store.replace_document

    def replace_document(self, *args, **kwargs):
        committed = real_replace(self, *args, **kwargs)
        armed.append(True)
        return committed

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(Store, "replace_document", replace_document)
    result = invoke("ingest", *docs, "--store", store, "--json")
    monkeypatch.undo()
    assert writes_failed, "the KV block write no longer goes through os.write: move the injection point"
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("the disk is nearly full, so new KV blocks are not kept") == 1
    assert "Errno" not in result.stderr and "Traceback" not in result.stderr
    assert sorted(stored(store)) == sorted(str(d) for d in docs)
    with Store.open_existing(store) as st:
        events_of_a = len(st.events_of(st.find_document(str(docs[0])).id))
    assert len(tier_block_paths(store)) == events_of_a  # only a.txt's blocks; no temporary file left
    assert not list((store / "kv").glob("*/blocks/*/*.tmp"))


def test_disk_full_in_sqlite_stops_the_run_with_one_line(tmp_path, monkeypatch):
    """SQLITE_FULL at commit, as the store reports it (a StoreError caused by sqlite3's error)."""
    docs = ingest_documents(tmp_path, ["a.txt", "b.txt", "c.txt"])
    store = tmp_path / "store"

    def sqlite_full(self, *args, **kwargs):
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"disk full while writing store '{self.path}'; nothing was changed.") from exc

    failed, _ = fail_after_first_commit(monkeypatch, sqlite_full)
    result = invoke("ingest", *docs, "--store", store, "--json", "--no-kv")
    assert len(failed) == 1
    assert_one_line_error(result, "disk full: ", f"needed for {docs[1]}, ", f"MB free at {store}")
    monkeypatch.undo()
    assert list(stored(store)) == [str(docs[0])]


@pytest.fixture
def small_filesystem(tmp_path):
    """A 24 MB tmpfs (one checkpoint window of ~16 MB fits, two do not), unmounted afterwards."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.decode().strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_small_disk_counts_checkpoint_windows_and_a_resume_after_freeing_space_succeeds(tmp_path,
                                                                                                small_filesystem):
    """Issue 30, item 5: `--commit-every 4 --no-kv` on a disk with 5 MB free said "1 MB needed" though each
    checkpoint window was ~28 MB (now ~16 MB), and after freeing space the ingest failed again and again: the next window was
    written beside the last one, and two do not fit."""
    doc = tmp_path / "doc1.md"
    # ~4,000 tokens: checkpoints every 4 events, each with its window file (the first at about token 1,500)
    doc.write_text(conftest.text_document() + "\n\n" + "\n".join(conftest.prose_lines(30, 120)), encoding="utf-8")
    store = small_filesystem / "store"
    ballast = small_filesystem / "ballast"
    free = os.statvfs(small_filesystem)
    ballast.write_bytes(bytes(free.f_bavail * free.f_frsize - 5 * 2**20))  # 5 MB left free
    result = invoke("ingest", doc, "--store", store, "--commit-every", "4", "--no-kv")
    err = assert_one_line_error(result, "disk full: ", f"needed for {doc}", "MB free at")
    needed = int(err.split("disk full: ")[1].split(" MB needed")[0].replace(",", ""))
    assert needed >= 15, err  # the window file counts (23,040 bytes a cell the pass keeps: ~16 MB)
    assert int(err.split("needed for")[1].split(", ")[1].split(" MB free")[0]) <= 5, err

    ballast.unlink()  # everything else freed: one window fits, two do not
    again = invoke("ingest", doc, "--store", store, "--commit-every", "4", "--no-kv", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["status"] == "ingested"
    with Store.open_existing(store) as st:
        [document] = st.documents()
        assert not document.partial and document.n_events == len(st.events_of(document.id)) > 12
    assert not list((store / "ingest").glob("*.window*"))  # no window stays once the document is complete


def test_disk_full_estimate_counts_kv_blocks(engine, tmp_path):
    """The 'needed' figure: KV blocks dominate (about 12 KB per token at q8_0 with the bundled model)."""
    from conftest import workspace_for
    from episodic_cli.engine.ingest.segment import SegmentParams

    ws = workspace_for(engine, tmp_path / "store")
    params = SegmentParams()
    st = ws.store_for_writing(params)
    try:
        with st.writer():
            ingestor = ws.ingestor(st, params)
            try:
                per_token = ingestor.bytes_needed(None, 100_000) / 100_000
            finally:
                ingestor.close()
    finally:
        st.close()
    assert 11_000 < per_token < 13_500, per_token


# ------------------------------------------------------------------------------------ 9: long questions


def test_long_question_is_refused_with_the_limit_named(shared_store):
    question = "Where is the key? " * 1200  # ~21,600 characters, as in the issue
    result = invoke("ask", question, "--store", shared_store.store_dir)
    assert_one_line_error(result, f"{len(question):,} characters", f"at most {MAX_QUESTION_CHARS:,}")


def test_a_question_of_2000_emoji_is_answered_from_the_sources_that_fit_beside_it(shared_store):
    """Issue 30, 6: 2,000 emoji are ~6,000 tokens of the bundled model (3 a character): at the default -k the
    sources (3,072 tokens) no longer fit beside them and kv mode said "lower -k"; they are cut to the room left."""
    from episodic_cli.engine.budgets import ANSWER_CONTEXT, ANSWER_TOKENS, PROMPT_OVERHEAD

    question = "\U0001F600" * MAX_QUESTION_CHARS
    result = invoke("ask", question, "--store", shared_store.store_dir, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["mode"] == "kv" and answer["sources"] and answer["text"].strip()
    room = ANSWER_CONTEXT - ANSWER_TOKENS - (3 * MAX_QUESTION_CHARS + PROMPT_OVERHEAD)
    assert 0 < answer["retrieved_tokens"] <= room


def test_empty_question_is_refused_before_the_model_loads(shared_store, monkeypatch):
    from episodic_cli.engine import workspace

    def no_model(*_a, **_k):  # failure injection: loading the model here would be the defect
        raise AssertionError("the model was loaded for an empty question")

    monkeypatch.setattr(workspace.Workspace, "check_store", no_model)
    result = invoke("ask", "   ", "--store", shared_store.store_dir)
    assert_one_line_error(result, "the question is empty")


def test_long_question_in_chat_is_refused_and_the_chat_goes_on(shared_store):
    long_line = "x" * (MAX_QUESTION_CHARS + 1)
    result = invoke("chat", "--store", shared_store.store_dir, input=f"{long_line}\n/exit\n")
    assert result.exit_code == 0, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: the question is {MAX_QUESTION_CHARS + 1:,} characters long; epi takes at most "
                      f"{MAX_QUESTION_CHARS:,} (retrieval reads about the first 1,000): ask it in fewer words"]


# --------------------------------------------------------------------------- 10: threads under a busy CPU


def test_openmp_threads_sleep_at_barriers_unless_the_user_says_otherwise(tmp_path):
    """llama.cpp's OpenMP threads must not spin when another process wants the cores (bench/models/under_load.py); the
    setting must be in place before llama.cpp loads, and an explicit one in the environment wins."""
    probe = ("import os, episodic_cli.engine.llama.backend; "
             "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split() == ["passive", "None"], out.stderr
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env={**env, "GOMP_SPINCOUNT": "300000"})
    assert out.stdout.split() == ["None", "300000"], out.stderr


def test_threads_option_still_sets_llama_threads(bundled_model):
    import llama_cpp as L

    from episodic_cli.engine.llama.backend import LlamaSession

    session = LlamaSession(bundled_model, n_ctx=256, n_threads=1)
    try:
        assert L.llama_n_threads(session.ctx) == 1 and L.llama_n_threads_batch(session.ctx) == 1
    finally:
        session.close()


# ----------------------------------------------------------------------------- power loss: a truncated WAL


def wal_cut_points(wal: Path) -> dict[str, int]:
    """Where a power cut can leave the WAL (SQLite's format: a 32-byte header, then frames of a 24-byte header and a
    page): empty, a torn header, a torn first frame, the last (commit) frame torn in half, and intact."""
    size = wal.stat().st_size
    page = struct.unpack(">I", wal.read_bytes()[8:12])[0]
    frame = 24 + page
    assert size > 32 + frame and (size - 32) % frame == 0, size
    return {"empty": 0, "torn header": 20, "torn first frame": 32 + frame // 2, "torn commit frame": size - frame // 2,
            "intact": size}


@pytest.fixture(scope="module")
def power_cut_image(tmp_path_factory, shared_cache):
    """A store as a power cut leaves it on disk right after `epi ingest last.txt` committed into the WAL: kept.txt
    checkpointed into the database before, last.txt's transaction only in the WAL (another connection held the
    database open, so the ingest's close did not checkpoint it)."""
    import shutil

    from conftest import _home

    root = tmp_path_factory.mktemp("power-cut")
    home = _home(root / "home", shared_cache)
    docs = ingest_documents(root, ["kept.txt", "last.txt"])
    store = root / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EPI_HOME", str(home))
        assert invoke("ingest", docs[0], "--store", store, "--no-kv").exit_code == 0
        before = stored(store)
        holder = sqlite3.connect(store / "store.sqlite3")
        holder.execute("SELECT COUNT(*) FROM documents").fetchone()
        result = invoke("ingest", docs[1], "--store", store, "--no-kv")
        assert result.exit_code == 0, result.output
        image = root / "image"
        shutil.copytree(store, image)
        holder.close()
    (image / "store.sqlite3-shm").unlink(missing_ok=True)  # shared memory does not survive a power cut
    return image, docs, before, stored(store)


@pytest.mark.parametrize("cut", ["empty", "torn header", "torn first frame", "torn commit frame", "intact"])
def test_a_truncated_wal_opens_with_every_committed_document_and_the_torn_one_whole_or_absent(
        power_cut_image, tmp_path, cut):
    import shutil

    image, docs, before, after = power_cut_image
    store = tmp_path / "store"
    shutil.copytree(image, store)
    wal = store / "store.sqlite3-wal"
    with open(wal, "r+b") as f:
        f.truncate(wal_cut_points(wal)[cut])

    listed = invoke("ls", "--store", store, "--json")
    assert listed.exit_code == 0 and "Traceback" not in listed.output, listed.output
    found = stored(store)
    assert {k: v for k, v in found.items() if k in before} == before  # nothing stored before is lost
    assert found == (after if cut == "intact" else before)  # the torn transaction is all there or not at all
    with Store.open_existing(store) as st:
        assert st.health() == []

    again = invoke("ingest", *docs, "--store", store, "--no-kv", "--json")  # the same command completes the store
    assert again.exit_code == 0, again.output
    assert stored(store) == after


def test_asking_a_store_whose_wal_lost_a_commit_answers_from_what_is_left(power_cut_image, tmp_path):
    """The dense index was saved with last.txt's vectors, the database lost them: the reader's catch-up drops them
    instead of citing events that do not exist."""
    import shutil

    image, docs, before, _ = power_cut_image
    store = tmp_path / "store"
    shutil.copytree(image, store)
    (store / "store.sqlite3-wal").write_bytes(b"")
    result = invoke("ask", "where were the tide tables kept?", "--store", store, "--json", "--mode", "text")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    sources = json.loads(result.stdout)["sources"]
    assert sources and {s["document"] for s in sources} == set(before)


# ----------------------------------------------------------------------------- issue 30, item 6: small ones


def test_sigterm_says_what_happened_like_ctrl_c_and_keeps_what_was_committed(tmp_path):
    """The real entry point, terminated mid-ingest: exit 143 with one line, the store still opens."""
    import signal
    import time

    doc = tmp_path / "long.txt"
    doc.write_text(conftest.text_document(), encoding="utf-8")
    store = tmp_path / "store"
    env = {**os.environ, "EPI_HOME": os.environ["EPI_HOME"]}
    proc = subprocess.Popen([sys.executable, "-m", "episodic_cli", "ingest", str(doc), "--store", str(store),
                             "--commit-every", "2", "--answer-model", "none"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    while not (store / "store.sqlite3").exists():  # the model is loaded and reading
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "error: terminated (SIGTERM); everything committed before it is kept", err
    with Store.open_existing(store) as st:  # what was committed is kept and readable
        assert st.health() == []


def test_a_directory_link_in_a_walked_folder_is_named_not_silently_skipped(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(PROSE, encoding="utf-8")
    tree = tmp_path / "project"
    tree.mkdir()
    (tree / "notes.txt").write_text(PROSE, encoding="utf-8")
    (tree / "linked").symlink_to(outside, target_is_directory=True)
    store = tmp_path / "store"
    result = invoke("ingest", tree, "--store", store, "--json")
    assert result.exit_code == 0, result.output
    records = {Path(r["path"]).name: r for r in map(json.loads, result.stdout.splitlines())}
    assert records["notes.txt"]["status"] == "ingested"
    assert records["linked"]["status"] == "skipped" and "a link to a directory, not followed" in records["linked"]["error"]
    assert list(stored(store)) == [str(tree / "notes.txt")]  # not followed: nothing from outside the folder
    human = invoke("ingest", tree, "--store", store)
    assert "linked: skipped (a link to a directory, not followed" in human.stderr, human.stderr


def events_of(store: Path, document_id: int) -> list:
    with Store.open_existing(store) as st:
        return st.events_of(document_id)


def test_a_file_name_with_a_newline_stays_on_one_line_in_ls_show_ask_doc_and_rm(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "first\nsecond.txt").write_text(PROSE, encoding="utf-8")
    (folder / "plain.txt").write_text("Another document. " + PROSE, encoding="utf-8")
    store = tmp_path / "store"
    assert invoke("ingest", folder, "--store", store, "--json").exit_code == 0
    listed = invoke("ls", "--store", store)
    table = listed.stdout.split("\n\n")[0].splitlines()  # the header and one line per document (long paths cut)
    assert len(table) == 3 and all(" text " in row for row in table[1:]), listed.stdout
    with Store.open_existing(store) as st:
        doc = next(d for d in st.documents() if "\n" in d.display_path)
        event = st.events_of(doc.id)[0]
    shown = invoke("show", event.id, "--store", store)
    assert "/first\\nsecond.txt, line 1 · event 1 of 1" in shown.stdout.splitlines()[0], shown.stdout
    # --doc takes the name as `ls` shows it (escaped) as well as the raw one, whole or as a glob.
    from episodic_cli.engine.retrieval.scope import documents_matching
    escaped = "first\\nsecond.txt"
    with Store.open_existing(store) as st:
        for glob in (escaped, "first\nsecond.txt", "first\\n*", doc.display_path.replace("\n", "\\n")):
            assert documents_matching(st, [glob]) == {doc.id: doc.display_path}, glob
    asked = invoke("ask", "What is this document about?", "--doc", escaped, "--store", store, "--json", "-k", "1")
    assert asked.exit_code == 0, asked.output
    sources = {s["event_id"] for s in json.loads(asked.stdout)["sources"]}
    assert sources and sources <= {e.id for e in events_of(store, doc.id)}
    removed = invoke("rm", doc.display_path.replace("\n", "\\n"), "--store", store)  # the name as `ls` shows it
    assert removed.exit_code == 0, removed.output
    assert [Path(p).name for p in stored(store)] == ["plain.txt"]
