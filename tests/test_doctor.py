"""What `epi doctor` finds besides damage (test_store_damage.py): what interrupted or overtaken work left behind in
a real store, and a store the user names that is not there (issue 30, item 6)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from conftest import TEXT_QUESTION, assert_one_line_error, tier_block_paths
from episodic_cli.app import app
from episodic_cli.store import Store

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.split())


def test_doctor_on_a_named_store_that_is_not_there_says_so_like_every_command(tmp_path):
    missing = tmp_path / "no-such-store"
    result = invoke("doctor", "--quick", "--store", missing)
    assert result.exit_code == 1 and "FAIL no store at" in flat(result.stdout), result.output  # the path is cut
    assert "run `epi ingest` first" in flat(result.stdout)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a store\n")
    result = invoke("doctor", "--quick", "--store", a_file)
    assert result.exit_code == 1 and "FAIL no store at" in flat(result.stdout), result.output
    assert_one_line_error(invoke("ls", "--store", missing), f"no store at {missing}")
    fresh = invoke("doctor", "--quick")  # the default store before a first ingest is no failure
    assert fresh.exit_code == 0 and "does not exist yet" in flat(fresh.stdout), fresh.output


def test_a_document_removed_during_an_answer_leaves_no_blocks(shared_store, second_model, tmp_path, monkeypatch):
    """`rm` while an answer prepares blocks (issue 30, item 6): the answer checks under the KV space's lock that the
    block's document is still stored before writing, so it writes none for the removed document after `rm`."""
    monkeypatch.setenv("EPI_HOME", str(shared_store.home))
    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)
    old_tiers = {p.name for p in (store / "kv").iterdir() if p.is_dir()}
    # The second model has no blocks: the answer prepares them from the text, event after event.
    ask = subprocess.Popen([sys.executable, "-m", "episodic_cli", "ask", TEXT_QUESTION, "--whole", "--json",
                            "--model", str(second_model), "--store", str(store)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 300
        while not [p for p in tier_block_paths(store) if p.parts[-4] not in old_tiers]:
            assert ask.poll() is None, ask.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.005)
        removed = invoke("rm", shared_store.text, "--store", store)  # while the answer writes its blocks
        assert removed.exit_code == 0, removed.output
        out, err = ask.communicate(timeout=600)
    finally:
        if ask.poll() is None:
            ask.kill()
    assert ask.returncode == 0, err
    assert json.loads(out)["text"].strip()
    with Store.open_existing(store) as st:
        assert st.kv_garbage() == (0, 0)  # the old code left the blocks written after `rm` (3.99 MB in the issue)
    result = invoke("doctor", "--quick", "--store", store)
    assert result.exit_code == 0 and "no longer" not in flat(result.stdout), result.stdout


# A block no event names, as an older epi's answer left after `rm` (the race above, now closed).
_DEAD_BLOCK = """
import sys
import numpy as np
from episodic_cli.store import Store
from episodic_cli.store.kv_tier import BlockType, TierConfig, block_key
config = TierConfig(model_name="Test Model", model_sha256="ab" * 32, llama_cpp_version="0.3.36", type_k="f16",
                    type_v="f16", flash_attn=False, n_layer=2, n_head_kv=1, head_dim=32, block_kind="q8_0")
with Store.open_existing(sys.argv[1]) as st:
    payload = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    st.kv_space().tier(config).offer(block_key("e" * 64, 0, 1), BlockType.Q8_0, 1, payload, None, on_use=False)
"""


def test_blocks_no_event_names_are_named_by_doctor_and_repair_removes_them(shared_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)
    subprocess.run([sys.executable, "-c", _DEAD_BLOCK, str(store)], check=True)
    with Store.open_existing(store) as st:
        n_dead, dead_bytes = st.kv_garbage()
        kept = {d.display_path for d in st.documents()}
    assert n_dead == 1
    result = invoke("doctor", "--quick", "--store", store)
    out = flat(result.stdout)
    assert result.exit_code == 1 and f"{n_dead} KV block(s) ({dead_bytes / 1e6:,.1f} MB) of events no longer" in out
    assert "epi doctor --repair" in out
    before = json.loads(invoke("ls", "--json", "--store", store).stdout)["kv_used_bytes"]
    repaired = invoke("doctor", "--quick", "--repair", "--store", store)
    assert repaired.exit_code == 0 and f"{n_dead} KV block(s)" in flat(repaired.stdout), repaired.output
    listed = json.loads(invoke("ls", "--json", "--store", store).stdout)
    assert listed["kv_used_bytes"] == before - dead_bytes
    assert {d["path"] for d in listed["documents"]} == kept  # the documents stay, with their blocks
    with Store.open_existing(store) as st:
        assert st.kv_garbage() == (0, 0)


# A process that writes one large block (~40 MB) into the store's tier, slowly enough to be killed in the middle.
_WRITER = """
import sys
import numpy as np
from episodic_cli.store import Store
from episodic_cli.store.kv_tier import BlockType, TierConfig, block_key
config = TierConfig(model_name="Test Model", model_sha256="ab" * 32, llama_cpp_version="0.3.36", type_k="f16",
                    type_v="f16", flash_attn=False, n_layer=2, n_head_kv=1, head_dim=32, block_kind="q8_0")
with Store.open_existing(sys.argv[1]) as st:
    tier = st.kv_space().tier(config)
    payload = np.random.default_rng(0).integers(0, 256, 40 << 20, dtype=np.uint8)
    print("writing", flush=True)
    tier.offer(block_key("f" * 64, 0, 1), BlockType.Q8_0, 1, payload, None, on_use=False)
"""


def test_a_block_write_killed_mid_way_leaves_a_temporary_that_doctor_names_and_removes(shared_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(shared_store.store_dir, store)
    blocks_before = tier_block_paths(store)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(store)], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            tmps = list((store / "kv").glob("*/blocks/*/*.tmp"))
            if tmps and tmps[0].stat().st_size >= 1_700_000:
                os.kill(writer.pid, signal.SIGKILL)  # kill -9 in the middle of the write
                break
            assert writer.poll() is None and time.monotonic() < deadline, "the write ended before it could be killed"
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == -signal.SIGKILL
    left = list((store / "kv").glob("*/blocks/*/*.tmp"))
    assert len(left) == 1
    size = left[0].stat().st_size
    result = invoke("doctor", "--quick", "--store", store)
    out = flat(result.stdout)
    assert f"removed 1 temporary file(s) of interrupted writes ({size / 1e6:,.1f} MB: {left[0].name})" in out, out
    assert not left[0].exists() and tier_block_paths(store) == blocks_before  # the kept blocks are all there
    assert result.exit_code == 0, out
