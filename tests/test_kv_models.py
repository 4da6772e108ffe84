"""One archive, any model: KV blocks are a per-model cache tier under the store's budget (real llama.cpp, real models).

- A store ingested with the bundled model answers with a second GGUF (the bundled weights quantized to Q8_0: another
  model file) in kv mode without re-ingesting: the first question prepares its events from text in place and keeps
  their blocks in the second model's tier, the second loads them. A tiny model with another vocabulary does the same.
- A block materialised from a cold in-place prefill, loaded later at the same positions, gives logits identical to the
  prefill's (f16 tier: no quantization in between).
- `epi ingest --kv-budget 5MB` keeps the block files at or under 5 MB at every moment, measured from the files.
- A failed ingest leaves no blocks behind.
"""
from __future__ import annotations

import json
import shutil
import threading
import time

import numpy as np
from typer.testing import CliRunner

from conftest import TEXT_QUESTION, prose_lines, tier_block_paths, workspace_for
from episodic_cli.app import app
from episodic_cli.engine.answer import kv_mode
from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.store import Store
from tiny_gguf import write_tiny_model

runner = CliRunner()


def ask(store_dir, *extra: str) -> dict:
    """`epi ask --whole`: the events read whole, i.e. from their KV blocks (by default an answer reads only the
    sentences that match the question best, decoded as text: engine/retrieval/evidence.py); every cold event is read
    however long it takes (`--cold-seconds 0`), as these tests are about preparing them."""
    result = runner.invoke(app, ["ask", TEXT_QUESTION, "--store", str(store_dir), "-k", "1", "--neighbours", "1",
                                 "--json", "--whole", "--cold-seconds", "0", *extra])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def ls(store_dir) -> dict:
    result = runner.invoke(app, ["ls", "--store", str(store_dir), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_second_model_answers_without_reingest_materialising_blocks_on_first_use(shared_store, second_model,
                                                                                    tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    store_dir = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store_dir)
    bundled = ask(store_dir)
    assert bundled["kv_prefilled_tokens"] == 0 and bundled["kv_loaded_tokens"] == bundled["retrieved_tokens"]

    first = ask(store_dir, "--model", str(second_model))
    assert first["mode"] == "kv" and first["text"]
    assert first["kv_loaded_tokens"] == 0 and first["kv_prefilled_tokens"] > 0  # cold: prepared from text
    second = ask(store_dir, "--model", str(second_model))
    assert second["kv_prefilled_tokens"] == 0 and second["kv_loaded_tokens"] == first["kv_prefilled_tokens"]
    assert [s["event_id"] for s in second["sources"]] == [s["event_id"] for s in bundled["sources"]]
    assert second["text"].strip()

    tiers = ls(store_dir)["kv_tiers"]
    assert len(tiers) == 2 and ls(store_dir)["kv_used_bytes"] == sum(t["kv_used_bytes"] for t in tiers)
    again = ask(store_dir)  # the store with two tiers answers with either model, each from its own blocks
    assert again["kv_prefilled_tokens"] == 0 and again["text"] == bundled["text"]


def test_a_model_with_another_tokenizer_answers_from_the_same_archive(shared_store, tmp_path, monkeypatch):
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    store_dir = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store_dir)
    tiny = write_tiny_model(tmp_path / "tiny.gguf")
    first = ask(store_dir, "--model", str(tiny), "--neighbours", "0")
    assert first["mode"] == "kv" and first["kv_loaded_tokens"] == 0 and first["kv_prefilled_tokens"] > 0
    # The event's text in the tiny model's own tokens, not the bundled model's (a byte-fallback vocabulary of 1,356
    # pieces needs more tokens for the same text).
    assert first["kv_prefilled_tokens"] != first["retrieved_tokens"]
    second = ask(store_dir, "--model", str(tiny), "--neighbours", "0")
    assert second["kv_prefilled_tokens"] == 0 and second["kv_loaded_tokens"] == first["kv_prefilled_tokens"]
    assert [s["event_id"] for s in second["sources"]] == [s["event_id"] for s in first["sources"]]


def test_a_materialised_block_loads_back_to_the_logits_of_its_prefill(engine, shared_store, tmp_path, monkeypatch):
    store_dir = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store_dir)
    seen: list[np.ndarray] = []

    def first_logits(answer, session, pos, started, max_tokens, should_stop, lead_spans=None):
        seen.append(session.last_logits().copy())
        return iter(())

    monkeypatch.setattr(kv_mode, "stream_into", first_logits)
    ws = workspace_for(engine, store_dir)
    with Store.open_existing(store_dir) as st:
        st.set_kv_block_kind("f16")  # a tier of its own, empty: every retrieved event is cold
        results = []
        for _ in range(2):
            # no cold limit: every retrieved event is prepared from its text, none left out; the empty answer is
            # not read again (a second look would decode other logits)
            options = AskOptions(k=2, neighbours=1, mode="kv", narrow=False, cold_seconds=None, second_look=False)
            result, stream = ws.ask(st, TEXT_QUESTION, options)
            list(stream)
            results.append(result.answer)
            ws.answerer("kv", st).reset()
    ws.close()
    cold, hot = results
    assert cold.kv_loaded_tokens == 0 and cold.kv_prefilled_tokens > 0
    assert hot.kv_prefilled_tokens == 0 and hot.kv_loaded_tokens == cold.kv_prefilled_tokens
    assert np.abs(seen[0] - seen[1]).max() == 0.0


def test_ingest_under_a_5mb_budget_never_holds_more_than_5mb_of_blocks(tmp_path, monkeypatch):
    doc = tmp_path / "long.txt"
    doc.write_text("\n".join(prose_lines(seed=11, n=1150)), encoding="utf-8")  # ~20k tokens of prose
    store_dir = tmp_path / "store"
    peak = [0]
    done = threading.Event()

    def watch():  # what the filesystem holds under kv/ (blocks and temporary files), as often as it can look
        while not done.is_set():
            total = 0
            for path in (store_dir / "kv").glob("*/blocks/*/*"):
                try:
                    total += path.stat().st_size
                except FileNotFoundError:
                    pass
            peak[0] = max(peak[0], total)
            time.sleep(0.002)  # look often, but leave the GIL to the ingest

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = runner.invoke(app, ["ingest", str(doc), "--store", str(store_dir), "--kv-budget", "5MB", "--json"])
    finally:
        done.set()
        watcher.join()
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout.splitlines()[0])
    assert record["tokens"] > 15_000
    assert "KV budget is full" in result.stderr  # said once
    assert result.stderr.count("KV budget is full") == 1
    assert 0 < peak[0] <= 5_000_000
    assert ls(store_dir)["kv_used_bytes"] <= 5_000_000 and ls(store_dir)["kv_budget_bytes"] == 5_000_000
    out = ask(store_dir, "-k", "2")  # questions still answer: blocks that are kept load, the others are prepared
    assert out["mode"] == "kv" and out["text"] and out["kv_loaded_tokens"] + out["kv_prefilled_tokens"] > 0
    assert sum(p.stat().st_size for p in tier_block_paths(store_dir)) <= 5_000_000


def test_a_failed_ingest_leaves_no_blocks_behind(tmp_path, monkeypatch):
    from episodic_cli.engine.embed import embedder

    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("\n".join(prose_lines(seed=1, n=60)), encoding="utf-8")
    bad.write_text("\n".join(prose_lines(seed=2, n=60)), encoding="utf-8")
    store_dir = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(good), "--store", str(store_dir)]).exit_code == 0
    kept = tier_block_paths(store_dir)
    real = embedder.Embedder.embed_texts

    def fail_on_bad(self, texts):  # the pass has captured bad.txt's blocks; the commit never happens
        if any("seed" not in t and t in bad.read_text() for t in texts):
            raise OSError(5, "Input/output error")
        return real(self, texts)

    monkeypatch.setattr(embedder.Embedder, "embed_texts", fail_on_bad)
    result = runner.invoke(app, ["ingest", str(bad), "--store", str(store_dir)])
    assert result.exit_code != 0
    assert tier_block_paths(store_dir) == kept  # bad.txt's blocks went with its failed commit
    with Store.open_existing(store_dir) as st:
        assert [d.display_path for d in st.documents()] == [str(good)]


def test_the_budget_holds_under_a_random_sequence_of_ingests_asks_and_removals(tmp_path, monkeypatch):
    import random

    rng = random.Random(5)
    store_dir = tmp_path / "store"
    docs = [tmp_path / f"doc{i}.txt" for i in range(3)]
    budget = 8_000_000  # about three blocks of the bundled model's ~250-token events at q8_0

    def block_bytes() -> int:
        return sum(p.stat().st_size for p in (store_dir / "kv").glob("*/blocks/*/*"))

    for step in range(8):
        action = "ingest" if step < 2 else rng.choice(["ingest", "ask", "ask", "rm"])
        if action == "ingest":
            doc = rng.choice(docs)
            doc.write_text("\n".join(prose_lines(seed=rng.randrange(1000), n=30)), encoding="utf-8")  # new content
            result = runner.invoke(app, ["ingest", str(doc), "--store", str(store_dir), "--kv-budget", "8MB"])
        elif action == "ask":
            result = runner.invoke(app, ["ask", "What did the harbour master carry?", "--store", str(store_dir),
                                         "-k", str(rng.choice([1, 2])), "--json"])
        else:
            listed = [d["path"] for d in ls(store_dir)["documents"]]
            if not listed:
                continue
            result = runner.invoke(app, ["rm", rng.choice(listed), "--store", str(store_dir)])
        assert result.exit_code == 0, (step, action, result.stderr)
        assert block_bytes() <= budget, (step, action, block_bytes())
        assert ls(store_dir)["kv_used_bytes"] == block_bytes()
