"""`epi ingest --cluster`: files read by Ray workers, committed by the driver, give the store a local ingest gives.

One local Ray cluster for the module, on 127.0.0.1 only, with two worker processes (the test process is its driver;
CLI runs in this process join it, a CLI run in a subprocess connects to its address). Every run uses the same small
segmentation, so the workers keep their loaded model from one test to the next."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import _home, prose_lines, tier_block_paths

# Read by Ray when it is first imported: every server of the test cluster on 127.0.0.1, token auth as `--cluster
# local` sets it (stated, so that Ray prints no warning about it).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")

from episodic_cli.app import app  # noqa: E402
from episodic_cli.store import Store  # noqa: E402

SEGMENTATION = ["--min-tokens", "32", "--max-tokens", "96"]  # several events per small file
ON_CLUSTER = ["--threads", "1"]  # a worker per CPU of the test cluster: two documents are read at once


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
