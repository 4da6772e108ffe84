"""The installed 1.5B answer model, run for real: chosen by name, it answers from a store the bundled model ingested,
first preparing its own KV blocks from the events' text, then loading them."""
import json
import shutil

import pytest
from typer.testing import CliRunner

from conftest import TEXT_QUESTION, assert_one_line_error
from episodic_cli.app import app
from episodic_cli.engine.llama.bundled import BUNDLED, is_installed

runner = CliRunner()
needs_1_5b = pytest.mark.skipif(not is_installed(BUNDLED["qwen-1.5b"]),
                                reason="./install.sh installs it; --answer-model none does not")


@needs_1_5b
@pytest.mark.slow
def test_qwen_1_5b_by_name_answers_from_its_own_blocks(shared_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)  # its own tier lands here, not in the shared store
    ask = ["ask", TEXT_QUESTION, "--store", str(store), "--model", "qwen-1.5b", "--whole", "-k", "1",
           "--neighbours", "0", "--json"]
    first = runner.invoke(app, ask)
    assert first.exit_code == 0, first.output
    cold = json.loads(first.stdout)
    assert "QUILLFEATHER-42" in cold["answer"]
    assert cold["kv_prefilled_tokens"] > 0 and cold["kv_loaded_tokens"] == 0
    again = json.loads(runner.invoke(app, ask).stdout)
    assert again["kv_prefilled_tokens"] == 0 and again["kv_loaded_tokens"] == cold["kv_prefilled_tokens"]
    assert "QUILLFEATHER-42" in again["answer"]


def test_an_unknown_model_name_lists_the_names(shared_store):
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--model", "qwen-9b"])
    assert_one_line_error(result, "model file not found: qwen-9b", "smollm2, qwen-1.5b, qwen-0.5b")


@needs_1_5b
@pytest.mark.slow
def test_qwen_1_5b_rewrites_a_follow_up_with_the_name_it_points_back_to(tmp_path):
    """The condense step (engine/answer/condense.py) with the default answer model: a pronoun in a follow-up becomes
    the name the conversation gave it, on a conversation unlike the prompt's worked examples."""
    from episodic_cli.engine.workspace import Workspace

    ws = Workspace("qwen-1.5b", str(tmp_path / "store"))
    history = [{"role": "user", "content": "Who founded the guild of glassmakers in Veldra?"},
               {"role": "assistant", "content": "Ilse Marrow founded it in 1820."}]
    try:
        rewritten = ws.condense(history, "Where was she born?")
        assert "Ilse Marrow" in rewritten and "she" not in rewritten.lower().split(), rewritten
    finally:
        ws.close()
