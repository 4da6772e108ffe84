"""Shared fixtures: every test gets its own EPI_HOME (never the user's data); the expensive parts (the F16 model
expansion, one real ingest of a PDF and a text, the loaded model and embedder) are built once per session."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pdf_fixture is a sibling helper, not an installed module

from pdf_fixture import make_pdf  # noqa: E402

# Tests run the bundled SmolLM2-135M unless they name another model (the session fixtures too, which load before
# any test's own environment); a machine with Qwen 1.5B installed would otherwise answer every test with it.
os.environ["EPI_MODEL"] = "smollm2"

# ------------------------------------------------------------------------------------------ planted facts

PDF_FACT = "The lighthouse keeper Orla Venn hid the brass key under the ninth step of the spiral stair."
PDF_QUESTION = "Where did Orla Venn hide the brass key?"
PDF_FACT_PAGE = 3
PDF_PAGES = 5

TEXT_FACT = "The archive codename chosen by Ilse Marrow is QUILLFEATHER-42."
TEXT_QUESTION = "What codename did Ilse Marrow choose for the archive?"
TEXT_FACT_LINE = 121  # 1-based line of the planted fact in the text document

_SUBJECTS = ["The harbour master", "A tired fisherman", "The old ferry", "Every merchant in town", "The night watch",
             "A flock of gulls", "The chapel bell", "Two apprentices", "The salt merchant", "A quiet widow"]
_VERBS = ["carried", "counted", "mended", "watched", "sold", "painted", "forgot", "repaired", "described", "hid"]
_OBJECTS = ["the torn nets", "a barrel of herring", "the ledger of tides", "the crooked pier", "a lantern of green glass",
            "the winter rope", "a map of the reefs", "the customs seal", "a basket of apples", "the broken oar"]
_TAILS = ["before the storm arrived.", "while the tide turned.", "near the eastern breakwater.",
          "as the council had ordered.", "without telling anyone.", "in the grey hour before dawn.",
          "because the season was poor.", "under a sky full of rain.", "for the spring market.",
          "long after the lamps were lit."]


def prose_lines(seed: int, n: int) -> list[str]:
    """Deterministic, varied, prose-like lines (about 14 words each)."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"
        b = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}."
        lines.append(f"{a} {b}")
    return lines


def pdf_pages() -> list[str]:
    pages = []
    for p in range(1, PDF_PAGES + 1):
        lines = prose_lines(seed=p, n=7)
        if p == PDF_FACT_PAGE:
            lines.insert(4, PDF_FACT)
        pages.append("\n".join(lines))
    return pages


def _sigint_at_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interruptible(args: list[str], **popen_kwargs) -> subprocess.Popen:
    """Start a child that the test will stop with SIGINT (Ctrl-C), with SIGINT at its default in the child. A shell
    starts a background job (`python -m pytest tests/test_watch.py &`, a CI script's `&`) with SIGINT ignored; an
    ignored signal stays ignored across fork and exec, and Python then installs no KeyboardInterrupt handler, so the
    child would never see the test's Ctrl-C (issue 35). `restore_signals` resets only SIGPIPE, SIGXFZ and SIGXFSZ."""
    return subprocess.Popen(args, preexec_fn=_sigint_at_default, **popen_kwargs)


def license_text() -> str:
    """The Apache-2.0 text shipped in the pinned hnswlib==0.8.0 wheel: real, stable prose (~2,200 tokens)."""
    dist = metadata.distribution("hnswlib")
    for f in dist.files or []:
        if "LICENSE" in f.name.upper():
            text = f.read_text(encoding="utf-8")
            if text and "Apache License" in text:
                return text
    pytest.skip("the hnswlib wheel ships no Apache license text to use as test prose")


def text_document() -> str:
    lines = license_text().split("\n")
    lines.insert(TEXT_FACT_LINE - 1, "   " + TEXT_FACT)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- homes


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """One epi cache (the F16 form of the bundled model, hash memos) for the whole session."""
    return tmp_path_factory.mktemp("epi-cache")


def _home(root: Path, cache: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cache").symlink_to(cache, target_is_directory=True)
    return root


@pytest.fixture(autouse=True)
def epi_home(tmp_path, monkeypatch, shared_cache) -> Path:
    """Every test runs with EPI_HOME in its own tmp dir; only the cache (the prepared model) is shared."""
    home = _home(tmp_path / "epi-home", shared_cache)
    monkeypatch.setenv("EPI_HOME", str(home))
    monkeypatch.delenv("EPI_STORE", raising=False)
    monkeypatch.setenv("EPI_MODEL", "smollm2")  # the bundled model; tests of the 1.5B model name it
    return home


@pytest.fixture
def whole_parts_read_by_small_models(monkeypatch):
    """The bundled 135M model takes the whole-part paths (a chapter read whole, the map), which by the size rule
    only models of a billion parameters take (llama/models.py WHOLE_READING_PARAMS): their tests run the paths with
    the small model, not the rule."""
    from episodic_cli.engine import workspace
    from episodic_cli.engine.llama import models

    monkeypatch.setattr(workspace, "WHOLE_READING_PARAMS", 0)  # questions
    monkeypatch.setattr(models, "WHOLE_READING_PARAMS", 0)  # the map at ingest


@pytest.fixture(scope="session")
def engine(tmp_path_factory, shared_cache):
    """A Workspace with the real model and embedder loaded once; `workspace_for` reuses them on other stores."""
    from episodic_cli.engine.workspace import Workspace

    home = _home(tmp_path_factory.mktemp("engine-home") / "home", shared_cache)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EPI_HOME", str(home))
        ws = Workspace()
        ws.prepared, ws.model  # noqa: B018 - load everything now, with the session's cache
        ws.embedder.load(batches=True)
        ws.embedder.load(batches=False)
    yield ws
    ws.close()


@pytest.fixture(scope="session")
def bundled_model(engine):
    """The bundled model in its prepared (F16) form, for tests that drive llama.cpp directly: the engine's own
    instance, so a session loads the weights once."""
    return engine.model


def workspace_for(engine, store_dir: Path):
    """A Workspace on `store_dir` that shares the session's loaded model and embedder."""
    from episodic_cli.engine.workspace import Workspace

    ws = Workspace(store=str(store_dir))
    for name in ("prepared", "model", "embedder"):
        ws.__dict__[name] = engine.__dict__[name]
    return ws


@dataclass
class SharedStore:
    home: Path
    store_dir: Path
    pdf: Path
    text: Path
    ingest_stdout: str
    ingest_exit_code: int

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.ingest_stdout.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def shared_store(tmp_path_factory, shared_cache) -> SharedStore:
    """One store, ingested once through the real CLI (`epi ingest --json`) with default segmentation: a 5-page PDF
    with a fact on page 3 and a ~2,300-token text with a fact on a known line."""
    from typer.testing import CliRunner

    from episodic_cli.app import app

    root = tmp_path_factory.mktemp("shared")
    home = _home(root / "home", shared_cache)
    docs = root / "docs"
    pdf = make_pdf(docs / "keeper.pdf", pdf_pages())
    text = docs / "license-notes.txt"
    text.write_text(text_document(), encoding="utf-8")
    store_dir = root / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EPI_HOME", str(home))
        result = CliRunner().invoke(app, ["ingest", str(pdf), str(text), "--store", str(store_dir), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    return SharedStore(home, store_dir, pdf, text, result.stdout, result.exit_code)


@dataclass
class SharedAsk:
    stdout: str
    stderr: str
    exit_code: int


@pytest.fixture(scope="session")
def shared_ask(shared_store) -> SharedAsk:
    """One real `epi ask --json` on the shared store (generation is the slowest step, so it runs once)."""
    from typer.testing import CliRunner

    from episodic_cli.app import app

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EPI_HOME", str(shared_store.home))
        result = CliRunner().invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "-k", "1",
                                          "--neighbours", "0", "--json"])
    return SharedAsk(result.stdout, result.stderr, result.exit_code)


def tier_block(st, event, document):
    """The stored KV block of `event`, found by its key in the store's tiers (tests fill one tier per model; the
    first match is returned), or None when no tier holds it."""
    from episodic_cli.store.kv_tier import block_key
    from episodic_cli.store.kv_tier.block_file import read_block_file

    name = block_key(document.content_sha256, event.char_start, event.char_end).hex()
    paths = sorted((Path(st.path) / "kv").glob(f"*/blocks/{name[:2]}/{name}.ekvb"))
    return read_block_file(paths[0], bytes.fromhex(name)) if paths else None


def tier_block_paths(store_dir) -> list[Path]:
    return sorted((Path(store_dir) / "kv").glob("*/blocks/*/*.ekvb"))


def assert_one_line_error(result, *needles: str, code: int = 1, stdout_empty: bool = True) -> str:
    """A CLI result that failed as a user must see it: exit `code`, exactly one `error:` line on stderr holding the
    needles, no traceback (and nothing on stdout unless the command had printed results before failing)."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: "), err
    for n in needles:
        assert n in err, (n, err)
    if stdout_empty:
        assert result.stdout == ""
    return err


@pytest.fixture(scope="session")
def second_model(tmp_path_factory):
    """The bundled model's weights quantized to Q8_0: a distinct GGUF file (another sha, so another tier)."""
    import ctypes

    import llama_cpp as L

    from episodic_cli.engine.llama.models import bundled_model_path

    path = tmp_path_factory.mktemp("models") / "second.q8_0.gguf"
    params = L.llama_model_quantize_default_params()
    params.ftype = L.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    assert L.llama_model_quantize(str(bundled_model_path()).encode(), str(path).encode(), ctypes.byref(params)) == 0
    return path
