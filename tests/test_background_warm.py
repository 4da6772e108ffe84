"""Warming in the background (episodic_cli/background.py), for real: `epi warm --background` returns at once, a
question is answered while it runs, its progress is readable, and it ends with every block prepared and the map
written; kill -9 in the middle leaves the store and its tier intact and `epi warm` goes on; a warm, an ingest and
questions at the same time never take the KV tier over its budget."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

from typer.testing import CliRunner

from conftest import TEXT_QUESTION, prose_lines
from episodic_cli.app import app
from episodic_cli.background import process_alive
from episodic_cli.store import Store
from episodic_cli.store.job_status import RUNNING_PHASES

from test_warm import copy_of

runner = CliRunner()


def epi(*args: str):
    return runner.invoke(app, list(args))


def status(store_dir) -> dict | None:
    return json.loads(epi("warm", "--status", "--store", str(store_dir), "--json").stdout)["background_job"]


def wait_until_done(store_dir, timeout_s: float = 600) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = status(store_dir)
        if now is not None and now["phase"] not in RUNNING_PHASES:
            return now
        time.sleep(0.5)
    raise AssertionError(f"the background job did not end in {timeout_s} s: {status(store_dir)}")


def block_files(store_dir) -> int:
    """Whole block files in every tier (not a tier's tier.json, nor a block still being written to its temp file)."""
    return sum(f.endswith(".ekvb") for _, _, files in os.walk(store_dir / "kv") for f in files)


def test_background_warm_returns_at_once_and_finishes_blocks_and_map_while_asked(shared_store, second_model,
                                                                                 tmp_path, monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    started = epi("warm", "--background", "--store", str(store_dir), "--model", str(second_model), "--json")
    assert started.exit_code == 0, started.stderr
    pid = json.loads(started.stdout)["background_job"]["pid"]
    assert process_alive(pid)
    again = epi("warm", "--background", "--store", str(store_dir), "--model", str(second_model))
    assert again.exit_code == 1 and "already being prepared in the background" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1

    asked = epi("ask", TEXT_QUESTION, "--store", str(store_dir), "--model", str(second_model), "--json")
    assert asked.exit_code == 0, asked.stderr  # answered while the job runs (cold events read from text)
    assert json.loads(asked.stdout)["text"].strip()
    more = tmp_path / "more.txt"
    more.write_text("\n".join(prose_lines(seed=92, n=30)) + "\n", encoding="utf-8")
    added = epi("ingest", str(more), "--store", str(store_dir), "--background", "--answer-model", str(second_model),
                "--json")
    assert added.exit_code == 0, added.output  # a running job is normal: joined (or, if it ended, a new one)
    job_line = json.loads(added.stdout.strip().splitlines()[-1])["background_job"]
    assert job_line["how"] in ("joined", "started"), job_line

    final = wait_until_done(store_dir)
    assert final["phase"] == "done", final
    assert final["blocks_kept"] > 0 and final["summaries_written"] > 0
    deadline = time.monotonic() + 60  # its last status is written just before the process exits
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(pid)
    rerun = json.loads(epi("warm", "--store", str(store_dir), "--model", str(second_model), "--json").stdout)
    assert rerun["events_to_do"] == 0  # every block is there, the added document's too
    shown = epi("warm", "--status", "--store", str(store_dir))
    assert shown.exit_code == 0 and "done after" in shown.stderr and "blocks prepared" in shown.stderr


def test_kill_9_while_warming_in_the_background_leaves_the_store_intact_and_warm_goes_on(
        shared_store, second_model, tmp_path, monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    before = block_files(store_dir)
    n_events = json.loads(epi("ls", "--store", str(store_dir), "--json").stdout)["n_events"]
    started = epi("warm", "--background", "--no-map", "--store", str(store_dir), "--model", str(second_model),
                  "--json")
    pid = json.loads(started.stdout)["background_job"]["pid"]
    deadline = time.monotonic() + 300
    while block_files(store_dir) == before and time.monotonic() < deadline:  # its first block is being kept
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    while process_alive(pid):
        time.sleep(0.01)
    killed = status(store_dir)
    assert killed["phase"] == "stopped" and "ended before it finished" in killed["message"], killed

    with Store.open_existing(store_dir) as st:
        assert st.kv_space().verify() == []  # no half-written block
        assert st.stats()["n_events"] == n_events
    rest = json.loads(epi("warm", "--store", str(store_dir), "--model", str(second_model), "--json").stdout)
    assert 0 < rest["events_to_do"] < n_events, rest  # the blocks kept before the kill are not prepared again
    assert rest["events_kept"] == rest["events_to_do"] and rest["stopped"] is None
    asked = epi("ask", TEXT_QUESTION, "--store", str(store_dir), "--model", str(second_model), "--json")
    assert asked.exit_code == 0 and json.loads(asked.stdout)["kv_prefilled_tokens"] == 0


def test_a_background_warm_an_ingest_and_questions_together_stay_within_the_kv_budget(
        shared_store, second_model, tmp_path, monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    used = json.loads(epi("ls", "--store", str(store_dir), "--json").stdout)["kv_used_bytes"]
    budget = int(used * 1.4)  # room for some of the second model's blocks, not all: the budget is what stops it
    assert epi("config", "--store", str(store_dir), "--kv-budget", str(budget)).exit_code == 0
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        with Store.open_existing(store_dir) as st:
            space = st.kv_space()
            while not done.is_set():
                samples.append(space.used_bytes())
                time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        started = epi("warm", "--background", "--no-map", "--store", str(store_dir), "--model", str(second_model))
        assert started.exit_code == 0, started.stderr
        more = tmp_path / "more.txt"
        more.write_text("\n".join(prose_lines(seed=91, n=60)) + "\n", encoding="utf-8")
        ingested = epi("ingest", str(more), "--store", str(store_dir), "--answer-model", "none", "--no-map")
        assert ingested.exit_code == 0, ingested.output  # not refused: the job holds no writer lock while warming
        for _ in range(2):
            assert epi("ask", TEXT_QUESTION, "--store", str(store_dir), "--model", str(second_model)).exit_code == 0
        final = wait_until_done(store_dir)
    finally:
        done.set()
        sampler.join()
    assert final["phase"] == "done" and final["message"] == "the KV budget is full", final
    assert len(samples) > 50 and max(samples) <= budget, (max(samples), budget)


def test_a_status_naming_another_programs_pid_is_not_a_running_job(tmp_path):
    """The job's pid alone said it ran: after a reboot, a crash or a copy of the store, another program with that
    pid was shown as the job, with an ETA, and `epi warm --stop` sent it SIGTERM. The job's life lock decides now."""
    import subprocess
    import sys

    from episodic_cli.background import job_status, stop_job
    from episodic_cli.store.job_status import JobStatus, write_status

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_status(tmp_path, JobStatus(pid=other.pid, model="qwen-1.5b", phase="preparing blocks",
                                         tokens_done=100, tokens_total=2651))
        assert not job_status(tmp_path).running
        stop_job(tmp_path, wait_s=1)
        assert other.poll() is None, "stop_job signalled a process that is not the job"
    finally:
        other.kill()
        other.wait()


def test_a_store_removed_under_a_job_is_not_made_again(tmp_path):
    """The KV space made its folder with its parents, so a job whose store was removed made it again and wrote its
    blocks and status into it."""
    import pytest

    from episodic_cli.store.kv_tier import BlockType, KVSpace, TierConfig, block_key

    config = TierConfig(model_name="M", model_sha256="ab" * 32, llama_cpp_version="0.3.36", type_k="f16",
                        type_v="f16", flash_attn=False, n_layer=2, n_head_kv=1, head_dim=32, block_kind="q8_0")
    store = tmp_path / "store"
    (store / "kv").mkdir(parents=True)
    tier = KVSpace(store / "kv", 10**6).tier(config)
    tier.offer(block_key("f" * 64, 1, 2), BlockType.Q8_0, 1, b"\0" * 100, None, on_use=False)
    import shutil

    shutil.rmtree(store)
    with pytest.raises(OSError):
        KVSpace(store / "kv", 10**6).tier(config).offer(block_key("f" * 64, 3, 4), BlockType.Q8_0, 1, b"\0" * 100,
                                                         None, on_use=False)
    assert not store.exists()


def test_budget_sizes_past_any_disk_are_one_line_and_evictions_are_said(shared_store, tmp_path, monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    huge = epi("config", "--store", str(store_dir), "--kv-budget", "1" + "0" * 400)
    assert huge.exit_code == 1 and huge.stderr.startswith("error: the size 1000") and "Traceback" not in huge.output
    assert epi("config", "--store", str(store_dir), "--kv-budget", "99999999999TB").exit_code == 1
    tiny = epi("config", "--store", str(store_dir), "--kv-budget", "20")  # bytes: every block goes
    assert tiny.exit_code == 0 and "evicted" in tiny.stderr and "without a unit are bytes" in tiny.stderr


def test_a_model_that_is_not_there_is_refused_before_the_job_starts(shared_store, tmp_path, monkeypatch):
    store_dir = copy_of(shared_store, tmp_path, monkeypatch)
    started = epi("warm", "--background", "--store", str(store_dir), "--model", str(tmp_path / "missing.gguf"))
    assert started.exit_code == 1 and "model file not found" in started.stderr  # exited 0, then failed in the job
    assert status(store_dir) is None
