"""`epi models` and `--model NAME` find models where Ollama, LM Studio and the Hugging Face hub cache keep them, laid
out on disk as those programs lay them out (manifests and blobs, publisher folders, symlinked snapshots), around real
GGUFs; they never write there; and each broken thing is one line."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import PDF_QUESTION, assert_one_line_error
from tiny_gguf import write_tiny_model

from episodic_cli.app import app
from episodic_cli.engine.llama import model_stores
from episodic_cli.engine.llama.bundled import QWEN_1_5B, assembled_path, is_installed
from episodic_cli.engine.llama.models import bundled_model_path

runner = CliRunner()
DIGEST = "sha256:" + "ab" * 32


def ollama_model(root: Path, name: str, blob_source: Path | None, manifest_text: str | None = None,
                 blob_bytes: bytes | None = None) -> Path:
    """An Ollama model as `ollama pull` leaves it: manifests/<host>/<namespace>/<model>/<tag> naming a blob."""
    base, _, tag = name.partition(":")
    parts = base.split("/")
    if len(parts) == 1:
        parts = ["library", *parts]
    host, namespace, model = ["registry.ollama.ai", *parts] if len(parts) == 2 else parts
    manifest = root / "manifests" / host / namespace / model / (tag or "latest")
    manifest.parent.mkdir(parents=True, exist_ok=True)
    digest = "sha256:" + format(abs(hash(name)), "064x")[:64]
    blob = root / "blobs" / digest.replace(":", "-")
    blob.parent.mkdir(parents=True, exist_ok=True)
    if blob_source is not None:
        blob.symlink_to(blob_source)
    elif blob_bytes is not None:
        blob.write_bytes(blob_bytes)
    layers = [{"mediaType": "application/vnd.ollama.image.template", "digest": DIGEST, "size": 10},
              {"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": 1}]
    manifest.write_text(manifest_text if manifest_text is not None else
                        json.dumps({"schemaVersion": 2, "config": {"digest": DIGEST}, "layers": layers}))
    return blob


def hub_model(root: Path, repo: str, file: str, source: Path) -> Path:
    """A hub cache entry: models--org--repo/blobs/<hash>, snapshots/<commit>/<file> -> ../../blobs/<hash>."""
    folder = root / f"models--{repo.replace('/', '--')}"
    blob = folder / "blobs" / ("cd" * 32)
    blob.parent.mkdir(parents=True)
    shutil.copyfile(source, blob)
    commit = "0123456789abcdef0123456789abcdef01234567"
    link = folder / "snapshots" / commit / file
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    return link


@pytest.fixture
def model_home(tmp_path, monkeypatch):
    """Ollama's, LM Studio's and the hub's stores in a HOME of the test's own, each holding models."""
    home = tmp_path / "user"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OLLAMA_MODELS", str(home / ".ollama" / "models"))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / ".cache" / "huggingface" / "hub"))
    tiny = write_tiny_model(tmp_path / "tiny.gguf")
    ollama = home / ".ollama" / "models"
    ollama_model(ollama, "smol:135m", bundled_model_path())
    ollama_model(ollama, "someone/tiny:q8", tiny)
    lms = home / ".lmstudio" / "models" / "tinyco" / "Tiny-GGUF"
    lms.mkdir(parents=True)
    shutil.copyfile(tiny, lms / "tiny-q8_0.gguf")
    (lms / "mmproj-tiny-f16.gguf").write_bytes(b"GGUF not a chat model")  # a vision projector is not listed
    hub_model(home / ".cache" / "huggingface" / "hub", "org/tiny-repo", "tiny.Q8_0.gguf", tiny)
    return home


def models_json() -> dict:
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_models_found_where_each_program_keeps_them(model_home, tmp_path):
    folder = tmp_path / "my-models"
    folder.mkdir()
    shutil.copyfile(tmp_path / "tiny.gguf", folder / "mine.gguf")
    assert runner.invoke(app, ["config", "--model-folder", str(folder)]).exit_code == 0

    before = sorted((p, p.stat().st_mtime_ns) for p in model_home.rglob("*"))
    listed = {(m["source"], m["name"]): m for m in models_json()["models"]}
    assert sorted(listed) == sorted([
        ("installed", "smollm2"), *([("installed", "qwen-1.5b")] if is_installed(QWEN_1_5B) else []),
        *[("installed", n) for s, n in listed if s == "installed" and n not in ("smollm2", "qwen-1.5b")],
        ("ollama", "smol:135m"), ("ollama", "someone/tiny:q8"), ("lmstudio", "tinyco/Tiny-GGUF"),
        ("hf", "org/tiny-repo"), ("folder", "mine")])
    smol = listed[("ollama", "smol:135m")]
    assert smol["architecture"] == "llama" and smol["quantization"] == "Q4_1" and smol["chat_template"]
    assert smol["serving"] == "blocks" and smol["why"] is None
    assert smol["parameters"] == 134_515_008 and smol["context_length"] == 8192
    # SmolLM2: 30 layers x 3 KV heads x 64 x (K + V) values, at q8_0's 34 bytes per 32 values
    assert smol["kv_bytes_per_token"] == round(30 * 3 * 64 * 2 * 34 / 32)
    assert smol["kv_budget_tokens"] == 10 * 10**9 // smol["kv_bytes_per_token"]
    assert smol["file_bytes"] < smol["memory_needed_bytes"] < smol["machine_memory_bytes"] and smol["fits_memory"]
    for key in ("tinyco/Tiny-GGUF", "org/tiny-repo"):
        assert [m["architecture"] for m in listed.values() if m["name"] == key] == ["llama"]
    # listing read them, and wrote nothing where the other programs keep their models
    assert sorted((p, p.stat().st_mtime_ns) for p in model_home.rglob("*")) == before

    text = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "smol:135m" in text.stdout and "blocks" in text.stdout


@pytest.mark.skipif(not is_installed(QWEN_1_5B), reason="Qwen2.5-Coder-1.5B is not installed (./install.sh)")
def test_an_ollama_name_answers_from_blocks(shared_store, tmp_path, monkeypatch):
    """The issue's check: `--model qwen2.5-coder:1.5b` from an Ollama layout answers a store with blocks."""
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    blob = ollama_model(root, "qwen2.5-coder:1.5b", assembled_path(QWEN_1_5B))
    result = runner.invoke(app, ["ask", PDF_QUESTION, "--store", str(shared_store.store_dir), "--model",
                                 "qwen2.5-coder:1.5b", "-k", "1", "--neighbours", "0", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["mode"] == "kv" and answer["text"].strip()
    assert blob.is_symlink() and not any(p.name.endswith(".tmp") for p in root.rglob("*"))


def test_a_default_answer_model_by_name(model_home, tmp_path, monkeypatch):
    from episodic_cli.engine.llama.models import answer_model, resolve_model_source

    monkeypatch.delenv("EPI_MODEL")
    result = runner.invoke(app, ["config", "--answer-model", "someone/tiny:q8", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer_model"] == "someone/tiny:q8"
    assert answer_model() == "someone/tiny:q8"
    assert resolve_model_source(None) == (tmp_path / "tiny.gguf").resolve()  # the blob links to it here
    assert [m["name"] for m in models_json()["models"] if m["default"]] == ["someone/tiny:q8"]
    assert runner.invoke(app, ["config", "--answer-model", "default"]).exit_code == 0
    assert answer_model() != "someone/tiny:q8"


def test_bad_model_stores_are_one_line_each(model_home, shared_store, tmp_path, monkeypatch):
    ollama = model_home / ".ollama" / "models"
    ollama_model(ollama, "broken:7b", None, manifest_text="{not json")
    ollama_model(ollama, "notgguf:1b", None, blob_bytes=b"\x00" * 4096)
    ollama_model(ollama, "gone:1b", None)  # its blob was never downloaded
    ask = ["ask", "where is the key?", "--store", str(shared_store.store_dir), "--model"]

    assert_one_line_error(runner.invoke(app, [*ask, "broken:7b"]), "broken:7b", "not valid JSON", "ollama pull")
    assert_one_line_error(runner.invoke(app, [*ask, "notgguf:1b"]), "notgguf:1b", "not a GGUF")
    assert_one_line_error(runner.invoke(app, [*ask, "gone:1b"]), "missing", "ollama pull gone:1b")
    assert_one_line_error(runner.invoke(app, [*ask, "nothing:here"]), "no model named nothing:here", "epi models")
    listed = {m["name"]: m for m in models_json()["models"]}  # broken entries are listed with why, not fatal
    assert listed["broken:7b"]["serving"] == "none" and "not valid JSON" in listed["broken:7b"]["why"]
    assert listed["notgguf:1b"]["serving"] == "none" and "not a GGUF" in listed["notgguf:1b"]["why"]

    # the same publisher/model in LM Studio and the hub cache: refused with both names, each of which works
    hub_model(model_home / ".cache" / "huggingface" / "hub", "tinyco/Tiny-GGUF", "t.gguf", tmp_path / "tiny.gguf")
    err = assert_one_line_error(runner.invoke(app, [*ask, "tinyco/Tiny-GGUF"]), "two model stores",
                                "lmstudio:tinyco/Tiny-GGUF", "hf:tinyco/Tiny-GGUF")
    assert "name one of them" in err
    found = model_stores.find_models()
    assert model_stores.pick(found, "hf:tinyco/Tiny-GGUF").source == "hf"
    assert model_stores.pick(found, "lmstudio:tinyco/Tiny-GGUF").source == "lmstudio"


def test_a_model_larger_than_memory_is_one_line(model_home, shared_store, monkeypatch):
    from episodic_cli.engine.llama import models

    monkeypatch.setattr(models, "machine_memory", lambda: 200_000_000)  # failure injection: a 200 MB machine
    err = assert_one_line_error(runner.invoke(app, ["ask", "where is the key?", "--store",
                                                               str(shared_store.store_dir), "--model", "smol:135m"]),
                                "smol:135m needs about", "GB of memory", "smaller model")
    assert "0.2 GB" in err
