"""`epi ingest DIR --watch`, the real command in a subprocess with the real model: files added, edited, renamed and
deleted while it runs, the store checked after each change; Ctrl-C stops it cleanly, and a kill -9 in the middle of
a file resumes when the command runs again."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from conftest import interruptible, prose_lines, tier_block_paths

WAIT_S = 180  # a change is debounced (0.8 s), then read by the 135M model: seconds on 2 busy cores


class Watcher:
    def __init__(self, docs, store, *extra):
        self.proc = interruptible(  # Ctrl-C stops it, even when pytest runs as a background job
            [sys.executable, "-m", "episodic_cli", "ingest", str(docs), "--store", str(store), "--answer-model",
             "none", "--json", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()

    def _read(self, stream, is_stdout):
        for line in stream:
            if is_stdout:
                self.records.put(json.loads(line))
            else:
                self.stderr.append(line)

    def expect(self, *wanted: tuple[str, str]) -> None:
        """Wait for records (file name, status), in any order; other records in between are allowed."""
        left, deadline = set(wanted), time.monotonic() + WAIT_S
        while left:
            rec = self.records.get(timeout=max(deadline - time.monotonic(), 0.1))
            left.discard((os.path.basename(rec["path"]), rec["status"]))

    def wait_for_stderr(self, text: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not any(text in line for line in self.stderr):
            assert self.proc.poll() is None, "".join(self.stderr)
            assert time.monotonic() < deadline, "".join(self.stderr)
            time.sleep(0.2)


def stored(store) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "episodic_cli", "ls", "--store", str(store), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return {os.path.basename(d["path"]): d["status"] for d in json.loads(out)["documents"]}


def test_a_child_gets_ctrl_c_even_when_the_tests_run_as_a_background_job():
    """A background job of a shell starts with SIGINT ignored, and its children inherit that: `epi ingest --watch`
    never received the test's Ctrl-C when pytest ran with `&` (issue 35). The children the tests interrupt are
    started with SIGINT at its default (conftest.interruptible)."""
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job starts
    try:
        proc = interruptible([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, ignored)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == -signal.SIGINT and "KeyboardInterrupt" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_watch_follows_additions_edits_renames_and_removals(tmp_path):
    docs, store = tmp_path / "docs", tmp_path / "store"
    docs.mkdir()
    (docs / "a.txt").write_text("\n".join(prose_lines(1, 12)), encoding="utf-8")
    w = Watcher(docs, store, "--watch")
    try:
        w.expect(("a.txt", "ingested"))
        w.wait_for_stderr("watching")
        (docs / "b.md").write_text("# Tides\n\n" + "\n".join(prose_lines(2, 8)), encoding="utf-8")
        w.expect(("b.md", "ingested"))
        assert stored(store) == {"a.txt": "complete", "b.md": "complete"}

        with open(docs / "a.txt", "a", encoding="utf-8") as f:  # an edit: the document is replaced
            f.write("\nThe lighthouse keeper moved the brass key to the cellar.\n")
        w.expect(("a.txt", "ingested"))

        (docs / "a.txt").rename(docs / "c.txt")
        w.expect(("a.txt", "removed"), ("c.txt", "ingested"))
        assert stored(store) == {"b.md": "complete", "c.txt": "complete"}

        blocks_before = len(tier_block_paths(store))
        (docs / "b.md").unlink()
        w.expect(("b.md", "removed"))
        assert stored(store) == {"c.txt": "complete"}
        assert 0 < len(tier_block_paths(store)) < blocks_before  # b.md's KV blocks went with it
        (docs / "ignored.bin").write_bytes(b"\x00\x01" * 100)  # not a document: nothing happens
        time.sleep(3)
        assert w.records.empty()
    finally:
        w.proc.send_signal(signal.SIGINT)
        rc = w.proc.wait(timeout=60)
    assert rc == 0, "".join(w.stderr)
    assert any("stopped watching" in line for line in w.stderr)
    assert "Traceback" not in "".join(w.stderr)


def test_kill_during_a_sync_resumes(tmp_path):
    docs, store = tmp_path / "docs", tmp_path / "store"
    docs.mkdir()
    (docs / "small.txt").write_text("\n".join(prose_lines(3, 10)), encoding="utf-8")
    w = Watcher(docs, store, "--watch", "--commit-every", "1", "--max-tokens", "64", "--min-tokens", "16")
    w.expect(("small.txt", "ingested"))
    w.wait_for_stderr("watching")
    (docs / "long.txt").write_text("\n".join(prose_lines(4, 160)), encoding="utf-8")  # ~3,800 tokens
    deadline = time.monotonic() + WAIT_S
    while stored(store).get("long.txt") != "partial":  # some groups of its events are committed
        assert time.monotonic() < deadline and w.proc.poll() is None, "".join(w.stderr)
        time.sleep(0.3)
    w.proc.kill()
    w.proc.wait(timeout=30)
    assert stored(store) == {"small.txt": "complete", "long.txt": "partial"}
    again = subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", str(docs), "--store", str(store),
                            "--answer-model", "none", "--json", "--commit-every", "1", "--max-tokens", "64",
                            "--min-tokens", "16"], capture_output=True, text=True, timeout=WAIT_S * 2)
    assert again.returncode == 0, again.stderr
    assert "resuming" in again.stderr or any(json.loads(x)["status"] == "ingested" for x in again.stdout.splitlines())
    assert stored(store) == {"small.txt": "complete", "long.txt": "complete"}
