"""Questions are embedded one at a time and events in padded batches, both by the numpy forward of all-MiniLM-L6-v2
(query_encoder.py): both must give the same vectors, or retrieval would compare unlike things. Tolerance: 1e-5 per
coordinate of the unit vector (measured: < 2e-7); the ranking of events must not change. Against
sentence-transformers: tests/test_embedder_reference.py."""
from __future__ import annotations

import numpy as np
import pytest

from episodic_cli.engine.embed.embedder import Embedder

TEXTS = [
    "Which file does platformdirs read on Unix to find the user's Music folder?",
    "who betrayed whom in chapter 3?",
    "",
    "x",
    "Ünïcödé naïve café, 東京, emoji 🙂 and tabs\tand\nnewlines",
    "def user_music_dir(self) -> str: return self._user_media_dir('XDG_MUSIC_DIR', '~/Music')",
    " ".join(f"word{i}" for i in range(400)),  # longer than MiniLM's 256 pieces: windows and truncation
]


@pytest.fixture(scope="module")
def embedder(engine) -> Embedder:
    return engine.embedder


def test_question_vectors_match_batch_vectors(embedder):
    batch = embedder.embed_texts(TEXTS)  # padded to the longest
    for text, ref in zip(TEXTS, batch):
        got = embedder.embed_query(text)
        assert got.dtype == np.float32 and got.shape == (embedder.dim,)
        assert np.abs(got - ref).max() < 1e-5, text[:40]
        assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5


def test_the_kept_last_query_is_the_one_asked_for(embedder):
    """A layered answer embeds its question once for two retrievals; another question must get its own vector."""
    a, b = embedder.embed_query(TEXTS[0]), embedder.embed_query(TEXTS[1])
    assert embedder.embed_query(TEXTS[1]) is b
    again = embedder.embed_query(TEXTS[0])
    assert again is not a and np.array_equal(again, a) and not np.allclose(again, b)
    with pytest.raises(ValueError):  # shared with every caller: nobody may change it in place
        again[0] = 1.0


def test_ranking_of_passages_is_unchanged(embedder):
    passages = TEXTS[4:] + ["The tide table lists high water at 06:12.", "Chapter 3: the betrayal at the ford."]
    vecs = embedder.embed_texts(passages)
    for q in TEXTS[:2]:
        by_batch = np.argsort(-(vecs @ embedder.embed_texts([q])[0]))
        by_query = np.argsort(-(vecs @ embedder.embed_query(q)))
        assert list(by_batch) == list(by_query)


def test_asking_and_ingesting_do_not_import_torch(tmp_path):
    """The point of the numpy encoder: a question costs no torch import (6-8 s on 2 cores), and the install needs
    no torch at all (1.3 GB with transformers, scipy and scikit-learn)."""
    import subprocess
    import sys

    code = ("import sys; import episodic_cli.app, episodic_cli.engine.diagnostics; "  # what `epi ask` imports
            "from episodic_cli.engine.embed.embedder import Embedder; e = Embedder(); "
            "v = e.embed_query('hello'); assert v.shape == (384,); "
            "assert e.embed_texts(['hello', 'an event of ingest']).shape == (2, 384); "
            "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_a_damaged_question_encoder_file_is_a_clear_error(tmp_path):
    """A truncated tokenizer.json (failure injection) is an EpiError that says what to do, not a traceback."""
    import shutil

    from episodic_cli.engine.embed.embedder import bundled_embedder_path
    from episodic_cli.engine.errors import EpiError

    broken = tmp_path / "model"
    shutil.copytree(bundled_embedder_path(), broken)
    (broken / "tokenizer.json").write_text('{"version": "1.0", "trunc')
    embedder = Embedder()
    embedder.path = broken
    with pytest.raises(EpiError, match="reinstall with ./install.sh"):
        embedder.embed_query("hello")


def test_safetensors_reader_matches_the_safetensors_package():
    """The memory-mapped reader against the format's own loader (installed with transformers): bit-exact."""
    load_file = pytest.importorskip("safetensors.numpy").load_file
    from episodic_cli.engine.embed.embedder import bundled_embedder_path
    from episodic_cli.engine.embed.query_encoder import read_safetensors

    path = bundled_embedder_path() / "model.safetensors"
    ref, got = load_file(str(path)), read_safetensors(path)
    assert ref.keys() == got.keys()
    for name, array in ref.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        assert np.array_equal(got[name], array), name
