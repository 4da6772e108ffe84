"""`epi chat` prepares KV blocks while the user reads and types (issue 36, item 2): a helper process, started with
the chat's first answer, prepares the events a follow-up would likely read (engine/answer/prefetch.py).

The helper holds its own store connection and llama context (the chat's SQLite connection and context are not
shared across threads), runs below the chat as the background warm job does (background.yield_the_cpu), and
takes orders on its stdin, one JSON object a line:
- `{"prepare": [event ids]}`: prepare these in order, replacing what was queued;
- `{"pause": true}`: drop the queue (a question was asked: the event being prepared is finished, then it waits).
It leaves at the end of its stdin (the chat ended) or on SIGTERM, between events; the tier writes each block whole
or not at all, so killing it loses at most the event being prepared. It never goes over the KV budget (each block is
offered to the tier under its lock) and never takes the store's writer lock.

    python -m episodic_cli.chat_prefetch --store DIR [--model NAME] [--threads N]   (started by `epi chat`)
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from .background import LOG_FILE, yield_the_cpu
from .engine.errors import EpiError
from .engine.retrieval.retrieve import RetrievedEvent
from .engine.workspace import Workspace
from .store import Store, StoreError

STOP_WAIT_S = 5.0  # how long the chat waits for the helper to leave before it is killed


class ChatPrefetch:
    """The chat's side: starts the helper on first use, sends it orders, ends it with the chat."""

    def __init__(self, ws: Workspace, store: Store):
        self.ws, self.store = ws, store
        self.process: subprocess.Popen | None = None
        self.failed = False

    def ahead(self, read: list[RetrievedEvent]) -> list[int]:
        """After an answer that read `read`: the helper prepares what a follow-up would likely read."""
        if self.failed or self.store.kv_budget <= 0:
            return []
        ids = self.ws.likely_next(self.store, read)
        if ids:
            self._send({"prepare": ids})
        return ids

    def pause(self) -> None:
        """A question was asked: the helper stops after the event it is preparing."""
        if self.process is not None:
            self._send({"pause": True})

    def close(self) -> None:
        if self.process is None:
            return
        try:
            self.process.stdin.close()
            self.process.wait(timeout=STOP_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        self.process = None

    def _send(self, order: dict) -> None:
        try:
            if self.process is None:
                self.process = self._start()
            self.process.stdin.write(json.dumps(order) + "\n")
            self.process.stdin.flush()
        except OSError:  # the helper could not start or has died: the chat goes on without it
            self.failed = True
            self.process = None

    def _start(self) -> subprocess.Popen:
        command = [sys.executable, "-m", "episodic_cli.chat_prefetch", "--store", str(self.store.path)]
        if self.ws.model_choice:  # else the helper picks the default answer model as the chat did
            command += ["--model", str(self.ws.model_choice)]
        if self.ws.threads:
            command += ["--threads", str(self.ws.threads)]
        log = open(Path(self.store.path) / LOG_FILE, "a", encoding="utf-8")  # noqa: SIM115 - the child keeps it
        try:
            return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, text=True,
                                    start_new_session=True)  # Ctrl-C at the chat stops an answer, not the helper
        finally:
            log.close()


class OrderReader:
    """The chat's orders, one JSON object a line, read from a file descriptor and split into lines here: select()
    sees only what the pipe holds, and a buffered reader could keep a second order (a pause sent just after a
    prepare) where select() never reports it."""

    def __init__(self, fd: int):
        self.fd = fd
        self.pending = b""   # read, not yet a whole line
        self.ended = False

    def take(self, blocking: bool) -> list[dict] | None:
        """The orders waiting (waiting for one when `blocking`); None once the pipe has ended and all are taken."""
        while not self.ended and ((blocking and b"\n" not in self.pending) or select.select([self.fd], [], [], 0)[0]):
            chunk = os.read(self.fd, 65536)
            self.ended = not chunk
            self.pending += chunk
        whole, _, self.pending = self.pending.rpartition(b"\n")
        orders = [json.loads(line) for line in whole.split(b"\n") if line.strip()]
        return None if self.ended and not orders else orders


def serve(store_dir: str, model: str | None, threads: int | None) -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    yield_the_cpu()
    ws = Workspace(model, store_dir, threads)
    queue: list[int] = []
    reader = OrderReader(sys.stdin.fileno())
    try:
        with Store.open_existing(ws.store_dir) as st:
            ws.check_store(st)
            while True:
                orders = reader.take(blocking=not queue)
                if orders is None:
                    return 0
                for order in orders:
                    queue = [] if order.get("pause") else list(order.get("prepare", []))
                if queue:
                    st.refresh()  # blocks and events the chat or an ingest committed since
                    ws.prefetch(st, [queue.pop(0)])
    except KeyboardInterrupt:
        return 0
    except (EpiError, StoreError, OSError, ValueError) as exc:
        print(f"epi chat's prefetch stopped: {exc}", file=sys.stderr)
        return 1
    finally:
        ws.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    return serve(args.store, args.model, args.threads)


if __name__ == "__main__":
    raise SystemExit(main())
