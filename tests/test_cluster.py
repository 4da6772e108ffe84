"""`epi ingest --cluster`: files read by Ray workers, committed by the driver, give the store a local ingest gives.

One local Ray cluster for the module, on 127.0.0.1 only, with two worker processes (the test process is its driver;
CLI runs in this process join it, a CLI run in a subprocess connects to its address). Every run uses the same small
segmentation, so the workers keep their loaded model from one test to the next."""
from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import _home, assert_one_line_error, prose_lines, tier_block_paths

# Read by Ray when it is first imported: every server of the test cluster on 127.0.0.1, token auth as `--cluster
# local` sets it (stated, so that Ray prints no warning about it).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")

from episodic_cli.app import app  # noqa: E402
from episodic_cli.store import Store  # noqa: E402

SEGMENTATION = ["--min-tokens", "32", "--max-tokens", "96"]  # several events per small file
ON_CLUSTER = ["--threads", "1"]  # a worker per CPU of the test cluster: two documents are read at once
UNHANDLED_REPORT_S = 3.0  # Ray reports an error whose reference was dropped unread within about a second


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cluster-docs")
    for i in range(3):
        (folder / f"doc{i}.txt").write_text("\n".join(prose_lines(seed=40 + i, n=18)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, shared_cache):
    """A local Ray cluster (a head and one more worker process) whose workers run with a test EPI_HOME; its address."""
    home = _home(tmp_path_factory.mktemp("cluster-home") / "home", shared_cache)
    env = {"EPI_HOME": str(home), "EPI_MODEL": "smollm2"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)  # the workers inherit the environment the cluster starts in
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20,
                 configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def ingest(docs: Path, store: Path, *extra: str):
    return CliRunner().invoke(app, ["ingest", str(docs), "--store", str(store), "--json", *SEGMENTATION, *extra])


@pytest.fixture(scope="module")
def local_store(docs, tmp_path_factory, shared_cache) -> Path:
    store = tmp_path_factory.mktemp("cluster-local") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EPI_HOME", str(_home(tmp_path_factory.mktemp("local-home") / "home", shared_cache)))
        result = ingest(docs, store)
    assert result.exit_code == 0, result.output
    return store


def statuses(stdout: str) -> dict[str, str]:
    return {Path(r["path"]).name: r["status"] for r in map(json.loads, stdout.splitlines()) if r}


def contents(store_dir: Path) -> tuple[dict, dict, dict]:
    """(documents with their events, embeddings, KV block files) of a store, keyed by what does not depend on the
    order of commits (paths, ordinals)."""
    st = Store.open_existing(store_dir)
    try:
        docs, vectors = {}, {}
        for d in st.documents():
            events = st.events_of(d.id)
            docs[d.path] = (d.kind, d.content_sha256, d.n_tokens, d.n_events, d.status, d.segmenter, [
                (e.ordinal, e.token_start, e.token_end, e.char_start, e.char_end, e.page_start, e.page_end,
                 e.line_start, e.line_end, round(e.surprise_mean, 4), round(e.surprise_max, 4), e.text, e.section)
                for e in events])
            ids, found = st._vectors_of([e.id for e in events])
            order = {i: k for k, i in enumerate(ids)}
            vectors[d.path] = np.stack([found[order[e.id]] for e in events])
    finally:
        st.close()
    blocks = {str(p.relative_to(store_dir)): p.read_bytes() for p in tier_block_paths(store_dir)}
    return docs, vectors, blocks


def assert_same_store(got: Path, want: Path) -> None:
    got_docs, got_vectors, got_blocks = contents(got)
    want_docs, want_vectors, want_blocks = contents(want)
    assert got_docs == want_docs
    for path, vectors in want_vectors.items():
        # One embedder, one batch per document either way: equal up to float noise.
        np.testing.assert_allclose(got_vectors[path], vectors, atol=1e-5)
    assert want_blocks and sorted(got_blocks) == sorted(want_blocks)
    # llama.cpp's CPU pass gives the same cells whatever the thread count: the blocks are equal byte for byte.
    assert got_blocks == want_blocks


def test_cluster_ingest_equals_local(cluster, docs, local_store, tmp_path):
    store = tmp_path / "store"
    result = ingest(docs, store, "--cluster", cluster, *ON_CLUSTER)
    assert result.exit_code == 0, result.output
    assert statuses(result.stdout) == {f"doc{i}.txt": "ingested" for i in range(3)}
    assert_same_store(store, local_store)
    again = ingest(docs, store, "--cluster", cluster, *ON_CLUSTER)  # skip-unchanged is the driver's
    assert statuses(again.stdout) == {f"doc{i}.txt": "unchanged" for i in range(3)}


def ray_task_processes() -> list[int]:
    """Pids of Ray worker processes running an ingest task now (Ray titles a busy worker `ray::<task>`)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            title = cmdline.read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"ray::ingest_document"):
            pids.append(int(cmdline.parent.name))
    return pids


def test_worker_killed_mid_document_is_retried(cluster, docs, local_store, tmp_path):
    store = tmp_path / "store"
    box = {}
    run = threading.Thread(target=lambda: box.update(result=ingest(docs, store, "--cluster", cluster, *ON_CLUSTER)))
    run.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and run.is_alive():
        busy = ray_task_processes()
        if busy:
            time.sleep(1.0)  # well inside a document's pass (several seconds each)
            if busy[0] in ray_task_processes():
                os.kill(busy[0], signal.SIGKILL)
                killed = busy[0]
        time.sleep(0.05)
    run.join(300)
    assert killed is not None, "no worker was seen reading a document"
    result = box["result"]
    assert result.exit_code == 0, result.output
    # The killed worker's document was read again by another process and landed once, whole.
    assert statuses(result.stdout) == {f"doc{i}.txt": "ingested" for i in range(3)}
    assert len(result.stdout.splitlines()) == 3
    assert_same_store(store, local_store)


def test_driver_killed_then_rerun_resumes(cluster, docs, local_store, tmp_path):
    store = tmp_path / "store"
    command = [sys.executable, "-m", "episodic_cli", "ingest", str(docs), "--store", str(store), "--json",
               *SEGMENTATION, "--cluster", cluster, *ON_CLUSTER]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = json.loads(driver.stdout.readline())  # one document committed
    driver.kill()
    driver.wait(30)
    assert first["status"] == "ingested"
    rerun = ingest(docs, store, "--cluster", cluster, *ON_CLUSTER)
    assert rerun.exit_code == 0, rerun.output
    done = statuses(rerun.stdout)
    assert done.pop(Path(first["path"]).name) == "unchanged"
    assert all(status in ("ingested", "unchanged") for status in done.values()), done
    assert_same_store(store, local_store)


def test_unreachable_cluster_is_one_line(docs, tmp_path):
    started = time.monotonic()
    result = ingest(docs, tmp_path / "store", "--cluster", "127.0.0.1:9")
    assert_one_line_error(result, "cannot reach the Ray cluster at 127.0.0.1:9")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "store").exists()  # refused before anything was created


def test_worker_without_the_model_is_one_line(cluster, docs, tmp_path, monkeypatch):
    from dataclasses import replace

    from episodic_cli.engine.workspace import Workspace

    job_of = Workspace.cluster_job
    # The workers are told to expect another model file than the one they find: what a node with a different
    # file at the same name meets.
    monkeypatch.setattr(Workspace, "cluster_job",
                        lambda self, ingestor, spec: replace(job_of(self, ingestor, spec), model_sha256="0" * 64))
    unhandled = []
    monkeypatch.setattr(ray._private.worker, "_unhandled_error_handler", unhandled.append)
    result = ingest(docs, tmp_path / "store", "--cluster", cluster, *ON_CLUSTER)
    assert_one_line_error(result, "has another model file")
    # The other documents' tasks failed too. Their errors must have been read before the command returned: one left
    # unread is printed by Ray when its reference is dropped, into the next command of the same process.
    del result  # its traceback holds the run's frames, and with them any reference left unread
    gc.collect()
    time.sleep(UNHANDLED_REPORT_S)
    assert unhandled == []


def test_workers_without_a_local_cluster_is_one_line(docs, tmp_path):
    result = ingest(docs, tmp_path / "store", "--workers", "2")
    assert_one_line_error(result, "--workers goes with --cluster local")
    result = ingest(docs, tmp_path / "store", "--cluster", "10.0.0.5", "--workers", "2")
    assert_one_line_error(result, "--workers sizes a cluster started here")
    assert not (tmp_path / "store").exists()


def test_long_documents_are_read_by_the_driver(cluster, docs, local_store, tmp_path, monkeypatch):
    from episodic_cli.engine.ingest import cluster as cluster_module
    from episodic_cli.engine.ingest.pipeline import Ingestor

    # Every document counts as long here: a worker hands it back unread and the driver reads it with the local
    # pipeline (its checkpoints are test_checkpoints.py's), seen here because workers are other processes.
    monkeypatch.setattr(cluster_module, "RESULT_LIMIT", 1)
    read_here = []
    ingest_one = Ingestor.ingest_one
    monkeypatch.setattr(Ingestor, "ingest_one",
                        lambda self, path, *rest: (read_here.append(path.name), ingest_one(self, path, *rest))[1])
    result = ingest(docs, tmp_path / "store", "--cluster", cluster, *ON_CLUSTER)
    assert result.exit_code == 0, result.output
    assert statuses(result.stdout) == {f"doc{i}.txt": "ingested" for i in range(3)}
    assert sorted(read_here) == [f"doc{i}.txt" for i in range(3)]
    assert_same_store(tmp_path / "store", local_store)
