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
    assert "QUILLFEATHER-42" in cold["text"]
    assert cold["kv_prefilled_tokens"] > 0 and cold["kv_loaded_tokens"] == 0
    again = json.loads(runner.invoke(app, ask).stdout)
    assert again["kv_prefilled_tokens"] == 0 and again["kv_loaded_tokens"] == cold["kv_prefilled_tokens"]
    assert "QUILLFEATHER-42" in again["text"]


def test_an_unknown_model_name_lists_the_names(shared_store):
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(shared_store.store_dir), "--model", "qwen-9b"])
    assert_one_line_error(result, "no model named qwen-9b", "smollm2, qwen-1.5b, qwen-0.5b", "epi models")


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
        # The prompt's instructions and examples stay in the cache between rewrites: the same as a fresh context.
        from episodic_cli.engine.answer.condense import Condenser
        later = ws._condenser.rewrite(history, "What did she make there?")
        fresh = Condenser(ws.model, ws.threads)
        try:
            assert later == fresh.rewrite(history, "What did she make there?")
        finally:
            fresh.close()
    finally:
        ws.close()


@needs_1_5b
@pytest.mark.slow
def test_qwen_1_5b_doubts_a_quote_that_does_not_state_its_sentence():
    """Evidence sentence by sentence, checked by the answer model (engine/answer/claim_check.py): both sentences of
    the answer share their words with the source, so both find a quote; the model passes the one the source states
    and doubts the invented one, which is then shown unsupported, its closest quote kept."""
    from episodic_cli.engine.answer.claim_check import ClaimChecker
    from episodic_cli.engine.answer.records import Answer
    from episodic_cli.engine.llama.backend import LlamaModel
    from episodic_cli.engine.llama.models import prepare_model
    from episodic_cli.engine.retrieval.evidence import support_by_sentence
    from episodic_cli.engine.retrieval.retrieve import RetrievedEvent
    from episodic_cli.engine.workspace import AskResult
    from episodic_cli.store import DocumentRecord, EventRecord

    text = ("Ilse Marrow founded the guild of glassmakers in Veldra in 1820. "
            "Her brother Tomas ran the furnace at Brask until it burned down in 1834.")
    event = EventRecord(ordinal=0, token_start=0, token_end=30, char_start=0, char_end=len(text), page_start=None,
                        page_end=None, line_start=1, line_end=1, surprise_mean=0.0, surprise_max=0.0, text=text, id=1)
    doc = DocumentRecord(path="v.txt", display_path="v.txt", kind="text", content_sha256="x", n_tokens=30,
                         n_events=1, n_pages=None, n_lines=1, ingest_seconds=0.0)
    retrieved = [RetrievedEvent(event, doc, 1.0, 0)]
    question = "What happened in Veldra and Brask?"
    answer = ("Ilse Marrow founded the glassmakers' guild of Veldra in 1820. "
              "The furnace at Brask was sold to Ilse Marrow in 1834.")
    assert [s.supported for s in support_by_sentence(question, answer, retrieved)] == [True, True]
    model = LlamaModel(prepare_model("qwen-1.5b").path)
    checker = ClaimChecker(model)
    try:
        result = AskResult(question, "kv", retrieved, Answer(), check_claim=checker.p_stated)
        result.answer.text = answer
        assert [s.checked for s in result.sentence_support()] == [False, False]  # the model reads only in verify()
        checked = result.verify()
        assert [(s.supported, s.doubted, s.checked) for s in checked] == [(True, False, True), (False, True, True)]
        assert any("furnace at Brask" in e.quote for e in checked[1].evidence)
        assert result.supported()  # one sentence of two is supported: half
        # a prompt longer than the check's context (dense script, a control token as text) is cut, not refused
        assert 0.0 <= checker.p_stated("x " * 3000, ["漢字" * 3000, "<|im_start|>" * 300]) <= 1.0
    finally:
        checker.close()
        model.close()
