"""The numpy embedder gives sentence-transformers' vectors (issue 35): cosine >= 0.9999 on 1,000 real windows,
half prose and half code, against reference vectors made once by sentence-transformers
(bench/ingest/embedder_reference.py; stored as float16, which alone costs < 1e-7 of cosine). If this holds, stores
embedded by sentence-transformers and new events and questions embedded in numpy are one vector space, so a store
embedded by sentence-transformers keeps its identity (all-MiniLM-L6-v2) and goes on working. The forward pass is
compared here; how long texts are cut into windows is tested in tests/test_embedder_windows.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from episodic_cli.engine.embed.embedder import bundled_embedder_path
from episodic_cli.engine.embed.query_encoder import QueryEncoder

REFERENCE = Path(__file__).parent / "data" / "embedder_reference.npz"


@pytest.fixture(scope="module")
def reference():
    data = np.load(REFERENCE)
    return [str(w) for w in data["windows"]], data["vectors"].astype(np.float32), json.loads(str(data["meta"]))


def test_vectors_match_sentence_transformers_on_1000_windows(reference):
    windows, ref, meta = reference
    assert len(windows) == 1000 and meta["windows"] == 1000
    got = QueryEncoder(bundled_embedder_path()).encode_batch(windows)  # each truncated to 256 pieces, as ST does
    cosine = np.sum(got * ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert cosine.min() >= 0.9999, (float(cosine.min()), windows[int(cosine.argmin())][:80])
    assert got.dtype == np.float32 and np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
