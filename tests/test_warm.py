"""Answering with a model whose blocks are not prepared yet (real llama.cpp, the bundled model and its Q8_0 twin):
a question reads what it can prefill in time and names what it left out; `epi warm` prepares every block ahead,
resumably; the machine's prefill rate is measured and kept."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import TEXT_QUESTION
from episodic_cli.app import app
from episodic_cli.engine.llama import prefill_rate

runner = CliRunner()


def copy_of(shared_store, tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    store_dir = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store_dir)
    return store_dir


def ask(store_dir, *extra: str):
    return runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(store_dir), "-k", "3", "--neighbours", "1",
                               "--whole", *extra])


def test_a_cold_question_reads_its_best_hit_and_names_what_it_left_out(shared_store, second_model, tmp_path,
                                                                      monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    everything = json.loads(ask(store_dir, "--json").stdout)  # the bundled model: every block is there
    assert (everything["left_out"], everything["left_out_tokens"], everything["read_as_sentences"]) == ([], 0, [])
    assert len(everything["sources"]) > 2

    hurried = ask(store_dir, "--model", str(second_model), "--cold-seconds", "0.01", "--json")
    assert hurried.exit_code == 0, hurried.stderr
    out = json.loads(hurried.stdout)
    assert len(out["sources"]) == 1 and out["sources"][0]["event_id"] == everything["sources"][-1]["event_id"]
    assert len(out["left_out"]) == len(everything["sources"]) - 1 and out["left_out_tokens"] > 0
    assert out["kv_prefilled_tokens"] > 0 and out["kv_loaded_tokens"] == 0

    shown = ask(store_dir, "--model", str(second_model), "--cold-seconds", "0.01")
    assert shown.exit_code == 0
    assert f"read 1 of {len(everything['sources'])} retrieved events whole" in shown.stderr
    assert f"left out {len(everything['sources']) - 1}" in shown.stderr and "epi warm" in shown.stderr

    patient = json.loads(ask(store_dir, "--model", str(second_model), "--cold-seconds", "0", "--json").stdout)
    assert patient["left_out"] == [] and len(patient["sources"]) == len(everything["sources"])


def test_warm_prepares_every_block_and_a_rerun_has_nothing_left(shared_store, second_model, tmp_path, monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    warmed = runner.invoke(app, ["warm", "--store", str(store_dir), "--model", str(second_model), "--json"])
    assert warmed.exit_code == 0, warmed.stderr
    result = json.loads(warmed.stdout)
    n_events = json.loads(runner.invoke(app, ["ls", "--store", str(store_dir), "--json"]).stdout)["n_events"]
    assert result["events_to_do"] == n_events == result["events_kept"] and result["stopped"] is None
    after = json.loads(ask(store_dir, "--model", str(second_model), "--cold-seconds", "0.01", "--json").stdout)
    assert after["kv_prefilled_tokens"] == 0 and after["left_out"] == []  # every block loads
    assert after["kv_loaded_tokens"] == after["retrieved_tokens"]
    again = runner.invoke(app, ["warm", "--store", str(store_dir), "--model", str(second_model)])
    assert again.exit_code == 0 and "every event already has its KV block" in again.stderr


def test_warm_stops_at_a_full_budget_and_goes_on_once_it_is_raised(shared_store, second_model, tmp_path, monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    used = json.loads(runner.invoke(app, ["ls", "--store", str(store_dir), "--json"]).stdout)["kv_used_bytes"]
    runner.invoke(app, ["config", "--store", str(store_dir), "--kv-budget", str(int(used * 1.3))])
    first = json.loads(runner.invoke(app, ["warm", "--store", str(store_dir), "--model", str(second_model),
                                           "--json"]).stdout)
    assert first["stopped"] == "the KV budget is full" and 0 < first["events_kept"] < first["events_to_do"]
    runner.invoke(app, ["config", "--store", str(store_dir), "--kv-budget", "10GB"])
    second = json.loads(runner.invoke(app, ["warm", "--store", str(store_dir), "--model", str(second_model),
                                            "--json"]).stdout)
    assert second["events_to_do"] == first["events_to_do"] - first["events_kept"] == second["events_kept"]


def test_the_prefill_rate_is_guessed_by_size_then_kept_as_measured():
    small, large = prefill_rate.rate("a" * 64, 2, 135_000_000), prefill_rate.rate("a" * 64, 2, 1_500_000_000)
    assert small == prefill_rate.GUESS_TOKENS_PER_S_AT_135M and large < small / 3
    prefill_rate.record("b" * 64, 2, 100, 1.0)  # too short to count
    assert prefill_rate.rate("b" * 64, 2, 1_500_000_000) == large
    prefill_rate.record("b" * 64, 2, 600, 20.0)
    assert prefill_rate.rate("b" * 64, 2, 1_500_000_000) == 30.0
    prefill_rate.record("b" * 64, 2, 500, 10.0)
    assert prefill_rate.rate("b" * 64, 2, 1_500_000_000) == 40.0  # the mean of the kept and the new
    assert prefill_rate.rate("b" * 64, 4, 1_500_000_000) == large  # per thread count


def ingest_logbook(tmp_path: Path, store_dir: Path, *options: str) -> tuple[Path, list[dict]]:
    """`epi ingest` of a 120-line log into `store_dir` with `options`: the file and its --json lines."""
    doc = tmp_path / "notes.txt"
    doc.write_text(" ".join(f"Line {i}: the lighthouse keeper logged the tide at {i} o'clock." for i in range(120)))
    out = runner.invoke(app, ["ingest", str(doc), "--store", str(store_dir), *options, "--json"])
    assert out.exit_code == 0, out.stderr
    return doc, [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.usefixtures("whole_parts_read_by_small_models")  # the map follows
def test_ingest_prepares_the_answer_models_blocks_for_the_new_documents(second_model, tmp_path):
    store_dir = tmp_path / "store"
    doc, lines = ingest_logbook(tmp_path, store_dir, "--answer-model", str(second_model))
    ingested = lines[0]
    (warm,) = [line for line in lines if "warm" in line]
    (written,) = [line for line in lines if "map" in line]  # then the map of the new document (test_whole_scope.py)
    assert ingested["status"] == "ingested" and warm["warm"] == str(second_model)
    assert written["per_level"]["part"] >= 1 and written["per_level"]["document"] == 1
    assert warm["events_kept"] == warm["events_to_do"] == ingested["events"] > 0
    (tier,) = json.loads(runner.invoke(app, ["ls", "--store", str(store_dir), "--json"]).stdout)["kv_tiers"]
    # the answer model's blocks only: the reader's would serve no question and take their share of the budget
    assert tier["blocks"] == ingested["events"]
    again = runner.invoke(app, ["ingest", str(doc), "--store", str(store_dir), "--answer-model", str(second_model),
                                "--json"])
    assert [json.loads(line)["status"] for line in again.stdout.splitlines()] == ["unchanged"]  # nothing to warm


@pytest.mark.usefixtures("whole_parts_read_by_small_models")  # the map follows
def test_one_reader_the_answer_model_reads_and_keeps_its_blocks_in_one_pass(second_model, tmp_path, monkeypatch):
    """Issue 36 item 1: with no reader named (neither --model nor $EPI_MODEL), the answer model cuts the events
    itself and keeps its blocks as it reads: one tier, every event's block, nothing left to warm; the map follows.
    --answer-model none reads with the fast bundled reader instead."""
    monkeypatch.delenv("EPI_MODEL")
    store_dir = tmp_path / "store"
    _, lines = ingest_logbook(tmp_path, store_dir, "--answer-model", str(second_model))
    assert lines[0]["status"] == "ingested" and not [line for line in lines if "warm" in line]
    (written,) = [line for line in lines if "map" in line]
    assert written["per_level"]["document"] == 1
    (tier,) = json.loads(runner.invoke(app, ["ls", "--store", str(store_dir), "--json"]).stdout)["kv_tiers"]
    assert tier["blocks"] == lines[0]["events"] > 0

    _, fast = ingest_logbook(tmp_path, tmp_path / "fast", "--answer-model", "none")
    (bundled,) = json.loads(runner.invoke(app, ["ls", "--store", str(tmp_path / "fast"), "--json"]).stdout)["kv_tiers"]
    assert bundled["tier"] != tier["tier"]  # the bundled reader's own blocks (another file: another tier)
    assert len(fast) == 1  # reading only: no blocks for another model, no map


def test_the_reader_is_the_answer_model_unless_one_is_named_or_no_blocks_are_wanted(monkeypatch):
    from episodic_cli.engine.llama.models import answer_model_follows, reader_model

    monkeypatch.delenv("EPI_MODEL")
    assert reader_model(None, "qwen-1.5b") == "qwen-1.5b"  # one reader
    assert reader_model(None, "none") == reader_model(None, None) == "smollm2"  # the fast reader
    assert reader_model("x.gguf", "qwen-1.5b") == "x.gguf"
    monkeypatch.setenv("EPI_MODEL", "y.gguf")
    assert reader_model(None, "qwen-1.5b") == "y.gguf"
    assert answer_model_follows("qwen-1.5b", "qwen-1.5b") and answer_model_follows("qwen-1.5b", "smollm2")
    assert not answer_model_follows("none", "smollm2") and not answer_model_follows("smollm2", "smollm2")


def test_the_ingest_plan_says_who_reads_and_what_follows(monkeypatch):
    """One rule for `epi ingest` and `Archive.ingest` (models.plan_ingest)."""
    from episodic_cli.engine.llama.models import IngestPlan, plan_ingest

    monkeypatch.delenv("EPI_MODEL", raising=False)
    # the default: one reader, its blocks kept as it reads, then the map
    assert plan_ingest(None, "qwen-1.5b", True, False, True) == IngestPlan("qwen-1.5b", "qwen-1.5b", True, False, True)
    # --background: the fast reader, then the answer model's blocks and the map (in the job)
    assert plan_ingest(None, "qwen-1.5b", True, True, True) == IngestPlan("smollm2", "qwen-1.5b", True, True, True)
    # --model names another reader: two readers
    assert plan_ingest("smollm2", "qwen-1.5b", True, False, False) == IngestPlan("smollm2", "qwen-1.5b", True, True,
                                                                                 False)
    # --no-kv and --answer-model none: the fast reader, nothing after
    assert plan_ingest(None, "qwen-1.5b", False, False, True) == IngestPlan("smollm2", "qwen-1.5b", False, False, False)
    assert plan_ingest(None, "none", True, False, True) == IngestPlan("smollm2", "none", False, False, False)
    # the reader keeps its own blocks only where it answers too
    assert plan_ingest(None, "qwen-1.5b", True, False, True).reader_keeps_blocks
    assert plan_ingest(None, "none", True, False, True).reader_keeps_blocks
    assert not plan_ingest(None, "qwen-1.5b", True, True, True).reader_keeps_blocks  # --background
    assert not plan_ingest("smollm2", "qwen-1.5b", True, False, True).reader_keeps_blocks
    # an answer model under a billion parameters gets no map: the 0.5B reads, keeps its blocks, and stops there
    assert plan_ingest(None, "qwen-0.5b", True, False, True) == IngestPlan("qwen-0.5b", "qwen-0.5b", True, False, False)
    assert plan_ingest(None, "qwen-0.5b", True, True, True) == IngestPlan("smollm2", "qwen-0.5b", True, True, False)


def test_the_size_rule_reads_the_model_header(tmp_path):
    """A user's model is judged by its own header's parameter count, not its name."""
    from episodic_cli.engine.llama.models import WHOLE_READING_PARAMS, answering_facts, reads_whole_parts
    from tiny_gguf import write_tiny_model

    tiny = write_tiny_model(tmp_path / "tiny.gguf")
    facts = answering_facts(str(tiny))
    assert facts is not None and facts.n_params < WHOLE_READING_PARAMS
    assert not reads_whole_parts(facts)
    assert reads_whole_parts(None, "qwen-1.5b") and not reads_whole_parts(None, "qwen-0.5b")
    assert reads_whole_parts(None, str(tmp_path / "unknown.gguf"))  # unresolved: its error comes where it loads


def test_the_default_answer_model_is_the_installed_1_5b_model(monkeypatch):
    from episodic_cli.engine.llama import models
    from episodic_cli.engine.llama.bundled import BUNDLED, is_installed

    monkeypatch.delenv("EPI_MODEL")
    expected = "qwen-1.5b" if is_installed(BUNDLED["qwen-1.5b"]) else "smollm2"
    assert models.default_model() == expected
    monkeypatch.setenv("EPI_MODEL", "smollm2")
    assert models.resolve_model_source(None) == models.bundled_model_path()


def test_warm_prepares_the_events_questions_retrieved_first(shared_store, second_model, tmp_path, monkeypatch):
    """Under a budget that holds only part of the archive for a second model, `epi warm` spends it on what earlier
    questions retrieved (counted by every answer, store/retrieval_log.py): the same question then loads every block."""
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    (store_dir / "retrievals.log").unlink(missing_ok=True)  # what other tests asked of the shared store
    asked = json.loads(ask(store_dir, "--json").stdout)  # the bundled model answers: its retrieval is counted
    ids = {s["event_id"] for s in asked["sources"]}
    from episodic_cli.store import Store

    with Store.open_existing(store_dir) as st:
        assert set(st.retrieval_counts()) == ids
        n_events = sum(len(st.events_of(d.id)) for d in st.documents())
    assert len(ids) < n_events
    used = json.loads(runner.invoke(app, ["ls", "--store", str(store_dir), "--json"]).stdout)["kv_used_bytes"]
    # room for the asked events' blocks (a second model's are as large as the bundled one's) and a little more
    room = used * (len(ids) + 2) // n_events
    runner.invoke(app, ["config", "--store", str(store_dir), "--kv-budget", str(used + room)])
    warmed = json.loads(runner.invoke(app, ["warm", "--store", str(store_dir), "--model", str(second_model),
                                            "--json"]).stdout)
    assert 0 < warmed["events_kept"] < n_events
    again = json.loads(ask(store_dir, "--model", str(second_model), "--cold-seconds", "0.01", "--json").stdout)
    assert {s["event_id"] for s in again["sources"]} == ids
    assert again["kv_prefilled_tokens"] == 0 and again["kv_loaded_tokens"] == again["retrieved_tokens"]


def test_cold_events_are_read_as_passages_and_the_best_one_whole_as_time_allows(
        shared_store, second_model, tmp_path, monkeypatch):
    """With time for a few sentences, the answer reads passages of the cold events (decoded in place between the
    blocks), each a piece of its event's own text, within that time; with time for the most relevant event whole as
    well, that one is prefilled whole, and only what is read whole is prefilled as a block. The rule itself: tests/test_cold_reading.py."""
    import time

    from episodic_cli.engine.answer.records import Answer
    from episodic_cli.engine.ask_run import fit_cold
    from episodic_cli.engine.llama.backend import default_threads
    from episodic_cli.engine.retrieval.cold_reading import EXCERPT_GAP
    from episodic_cli.engine.retrieval.evidence import readable
    from episodic_cli.engine.retrieval.retrieve import relevance_order
    from episodic_cli.engine.workspace import Workspace
    from episodic_cli.store import Store

    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    ws = Workspace(str(second_model), store=str(store_dir))
    with Store.open_existing(store_dir) as st:
        answerer = ws.answerer("kv", st)
        read = relevance_order(ws.retrieve(st, TEXT_QUESTION, 3, 1))
        rate = prefill_rate.rate(ws.prepared.sha256, default_threads(), ws.model.info.n_params)
        room = 80
        assert room < min(r.n_tokens for r in read)
        kept, left, excerpts = fit_cold(ws, answerer, TEXT_QUESTION, read, (room + 0.5) / rate)
        assert excerpts and set(excerpts) == {r.event.id for r in kept}
        assert left == [r for r in read if r not in kept]
        assert sum(len(ws.model.tokenize(t)) for t in excerpts.values()) <= room
        for r in kept:
            assert all(part in readable(r.event.text) for part in excerpts[r.event.id].split(EXCERPT_GAP))

        # time for all but one token: the most relevant is read whole, and not every event is
        top = read[-1]
        total = sum(r.n_tokens for r in read)
        kept, left, excerpts = fit_cold(ws, answerer, TEXT_QUESTION, read, (total - 1 + 0.5) / rate)
        assert top in kept and top.event.id not in excerpts
        whole = [r for r in kept if r.event.id not in excerpts]
        assert sum(r.n_tokens for r in whole) < total
        answer = Answer()
        shown = []
        answerer.on_prepare = lambda done, total: shown.append((done, total))
        pieces = list(answerer.stream(TEXT_QUESTION, kept, None, time.perf_counter(), answer, max_tokens=16,
                                      excerpts=excerpts))
        total = sum(r.n_tokens for r in whole) + sum(len(ws.model.tokenize(f"\n{t}\n")) for t in excerpts.values())
    ws.close()
    assert "".join(pieces).strip()
    assert answer.kv_prefilled_tokens == sum(r.n_tokens for r in whole) and answer.kv_loaded_tokens == 0
    # the progress line counts the passages too, from the start: nothing read from text goes unannounced
    assert shown[0] == (0, total) and shown[-1] == (total, total)
