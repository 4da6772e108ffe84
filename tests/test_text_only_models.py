"""A chat model whose KV cannot be cut into event blocks (here sliding-window attention: a tiny random-weight gemma3
with its own chat template) answers in text mode, saying once why and what it costs, where epi used to refuse it;
kv-only options name the reason in one line; a model that cannot answer at all (the real Gemma 3 270M: a base
model, no chat template) is refused in one line naming a model that answers."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from conftest import TEXT_QUESTION, assert_one_line_error
from gemma_270m import gemma_270m_or_skip
from tiny_gguf import write_tiny_model

from episodic_cli.app import app

runner = CliRunner()


def test_a_sliding_window_model_answers_in_text_mode(shared_store, tmp_path):
    gemma = write_tiny_model(tmp_path / "tiny-gemma3.gguf", arch="gemma3")
    ask = ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--model", str(gemma), "-k", "1",
           "--neighbours", "0"]
    result = runner.invoke(app, [*ask, "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["mode"] == "text" and answer["sources"]
    said = [line for line in result.stderr.splitlines() if "text mode" in line]
    assert len(said) == 1 and "sliding-window" in said[0] and "re-reads" in said[0], result.stderr

    for option in (["--mode", "kv"], ["--layered"], ["--epman"]):
        assert_one_line_error(runner.invoke(app, [*ask, *option]), option[0], "needs KV blocks", "sliding-window",
                              code=1)


def test_a_sliding_window_model_is_listed_as_text(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_model(folder / "tiny-gemma3.gguf", arch="gemma3")
    write_tiny_model(folder / "tiny-qwen3.gguf", arch="qwen3")
    assert runner.invoke(app, ["config", "--model-folder", str(folder)]).exit_code == 0
    rows = {m["name"]: m for m in json.loads(runner.invoke(app, ["models", "--json"]).stdout)["models"]}
    assert rows["tiny-gemma3"]["serving"] == "text" and "sliding-window" in rows["tiny-gemma3"]["why"]
    assert rows["tiny-gemma3"]["sliding_window"] == 32
    assert rows["tiny-qwen3"]["serving"] == "blocks" and rows["tiny-qwen3"]["architecture"] == "qwen3"


def test_a_base_model_is_refused_naming_one_that_answers(shared_store, tmp_path):
    gemma = gemma_270m_or_skip(tmp_path)
    err = assert_one_line_error(runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir),
                                                    "--model", str(gemma)]),
                                "cannot answer", "no chat template", "--model ")
    assert "epi models" in err
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / gemma.name).symlink_to(gemma)
    assert runner.invoke(app, ["config", "--model-folder", str(folder)]).exit_code == 0
    rows = {m["name"]: m for m in json.loads(runner.invoke(app, ["models", "--json"]).stdout)["models"]}
    base = rows[gemma.stem]
    assert base["serving"] == "none" and "chat template" in base["why"] and base["architecture"] == "gemma3"


def test_ingest_for_a_text_only_model_lets_the_fast_reader_read(tmp_path):
    gemma = write_tiny_model(tmp_path / "tiny-gemma3.gguf", arch="gemma3")
    doc = tmp_path / "note.txt"
    doc.write_text("The spare key is kept in the blue teapot on the second shelf.\n" * 20, encoding="utf-8")
    result = runner.invoke(app, ["ingest", str(doc), "--answer-model", str(gemma), "--no-map", "--json"])
    assert result.exit_code == 0, result.output
    assert "error" not in result.stderr
    config = json.loads(runner.invoke(app, ["config", "--json"]).stdout)
    assert config["segmenter"] != "epi-tiny-spm"  # the bundled fast reader cut the events
