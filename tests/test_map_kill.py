"""kill -9 during `epi map`, then the same command again: it finishes, nothing is summarised twice, and the store
stays intact (`epi doctor` passes). The kill is the only injected failure; the model and store are real."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from typer.testing import CliRunner

from episodic_cli.app import app
from episodic_cli.store import Store
from test_whole_scope import CHAPTERS, _book

runner = CliRunner()


def test_map_killed_mid_run_resumes_without_writing_anything_twice(tmp_path, epi_home):
    book = tmp_path / "river-book.txt"
    book.write_text(_book(), encoding="utf-8")
    store = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(book), "--store", str(store), "--json"]).exit_code == 0
    env = {**os.environ, "EPI_HOME": str(epi_home)}
    child = subprocess.Popen([sys.executable, "-m", "episodic_cli", "map", "--store", str(store), "--json"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    written_before_kill = 0
    while time.monotonic() < deadline and child.poll() is None:
        with Store.open_existing(store) as st:
            written_before_kill = st.summaries().count()
        if written_before_kill >= 1:
            break
        time.sleep(0.2)
    assert child.poll() is None, "map finished before it could be killed: " + child.stderr.read().decode()[-500:]
    child.send_signal(signal.SIGKILL)
    child.wait()
    with Store.open_existing(store) as st:
        kept = {s.key: s.id for s in st.summaries().all()}
    assert 1 <= len(kept) < len(CHAPTERS) + 1

    again = runner.invoke(app, ["map", "--store", str(store), "--json"])
    assert again.exit_code == 0, again.output
    run = json.loads(again.stdout.strip().splitlines()[-1])
    assert run["written"] == len(CHAPTERS) + 1 - len(kept)  # the parts and the document, less what was kept
    with Store.open_existing(store) as st:
        after = {s.key: s.id for s in st.summaries().all()}
    assert len(after) == len(CHAPTERS) + 1
    assert all(after[k] == i for k, i in kept.items())  # what the killed run wrote was not written again
    doctor = runner.invoke(app, ["doctor", "--quick", "--store", str(store)])
    assert doctor.exit_code == 0, doctor.output
