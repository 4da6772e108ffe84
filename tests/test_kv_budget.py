"""The KV budget against writers running when it changes (issue 30, item 2): a real answer in another process
preparing blocks with a second model while `epi config --kv-budget` lowers the budget, the tier's bytes sampled all
along; and doctor naming a tier left over its budget, `--repair` evicting it down."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from typer.testing import CliRunner

from conftest import TEXT_QUESTION, tier_block_paths
from episodic_cli.app import app
from episodic_cli.store import Store

runner = CliRunner()
SAMPLE_S = 0.02


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def tier_bytes(store: Path) -> int:
    total = 0
    for p in tier_block_paths(store):
        try:
            total += p.stat().st_size
        except FileNotFoundError:  # evicted between the listing and the stat
            pass
    return total


def test_a_budget_lowered_while_an_answer_prepares_blocks_holds_from_the_next_block_on(shared_store, second_model,
                                                                                        tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)
    old_tiers = {p.name for p in (store / "kv").iterdir() if p.is_dir()}
    with Store.open_existing(store) as st:
        n_events = st.stats()["n_events"]
    budget = 1_000_000  # `epi config --kv-budget 1MB`: smaller than one block, so nothing may be written after it

    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), tier_bytes(store)))
            time.sleep(SAMPLE_S)

    # Cold events for the second model: the answer prepares their blocks from text, one after another (~0.5 s each).
    ask = subprocess.Popen([sys.executable, "-m", "episodic_cli", "ask", TEXT_QUESTION, "--whole", "--json",
                            "--model", str(second_model), "--store", str(store)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        deadline = time.monotonic() + 300
        while not [p for p in tier_block_paths(store) if p.parts[-4] not in old_tiers]:  # its first block
            assert ask.poll() is None, ask.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.005)
        config = invoke("config", "--kv-budget", "1MB", "--store", store)
        lowered_at = time.monotonic()
        assert config.exit_code == 0, config.output
        assert ask.poll() is None  # the answer was still preparing blocks when the budget went down
        out, err = ask.communicate(timeout=600)
    finally:
        stop.set()
        sampler.join()
        if ask.poll() is None:
            ask.kill()
    assert ask.returncode == 0, err
    answer = json.loads(out)
    assert answer["mode"] == "kv" and answer["text"].strip() and answer["kv_prefilled_tokens"] > 0
    after = [b for t, b in samples if t > lowered_at]
    assert after and max(after) <= budget, (max(after), budget)
    assert tier_bytes(store) <= budget
    with Store.open_existing(store) as st:  # the archive is untouched
        assert st.kv_budget == budget and st.stats()["n_events"] == n_events
    doctor = invoke("doctor", "--quick", "--store", store)
    assert "kv budget" in doctor.stdout and "over the" not in " ".join(doctor.stdout.split())


def test_doctor_names_a_tier_over_its_budget_and_repair_evicts_it_down(shared_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)
    used = tier_bytes(store)
    budget = used // 2
    # The state the race left: a budget recorded below what the tier's files hold (written here directly).
    conn = sqlite3.connect(store / "store.sqlite3")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('kv_budget_bytes', ?)", (str(budget),))
    conn.commit()
    conn.close()
    result = invoke("doctor", "--quick", "--store", store)
    flat = " ".join(result.stdout.split())
    assert result.exit_code == 1, flat
    assert f"over the {budget / 1e6:,.1f} MB budget" in flat and "epi doctor --repair" in flat, flat
    repaired = invoke("doctor", "--quick", "--repair", "--store", store)
    assert repaired.exit_code == 0 and "evicted" in " ".join(repaired.stdout.split()), repaired.stdout
    assert 0 < tier_bytes(store) <= budget  # least recently used blocks went; the rest stay
    with Store.open_existing(store) as st:
        assert st.stats()["n_events"] == shared_store.records()[0]["events"] + shared_store.records()[1]["events"]
    assert invoke("doctor", "--quick", "--store", store).exit_code == 0


def test_a_store_without_blocks_by_choice_is_not_told_its_budget_is_full(tmp_path):
    """`epi map` on a --no-kv store warned "the KV budget is full ... raise it", though a budget of 0 was chosen."""
    from tiny_gguf import write_tiny_model

    from episodic_cli.engine.kv.keeper import BlockKeeper
    from episodic_cli.engine.llama.backend import LlamaModel
    from episodic_cli.store.kv_tier import BlockType, KVSpace, TierConfig, block_key

    config = TierConfig(model_name="Tiny", model_sha256="ab" * 32, llama_cpp_version="0.3.36", type_k="f16",
                        type_v="f16", flash_attn=False, n_layer=2, n_head_kv=1, head_dim=32, block_kind="q8_0")
    model = LlamaModel(write_tiny_model(tmp_path / "tiny.gguf"))
    try:
        told = {}
        for budget in (0, 100):  # none by choice; a budget too small for the block
            warned: list[str] = []
            keeper = BlockKeeper(KVSpace(tmp_path / f"kv{budget}", budget).tier(config), model, warn=warned.append)
            keeper.offer_encoded(block_key("f" * 64, 1, 2), BlockType.Q8_0, 1, b"\0" * 1000, None, on_use=True)
            told[budget] = warned
        assert len(told[0]) == 1 and "keeps no KV blocks" in told[0][0] and "full" not in told[0][0]
        assert len(told[100]) == 1 and "the KV budget is full" in told[100][0]
    finally:
        model.close()
