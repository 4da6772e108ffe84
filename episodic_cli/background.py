"""Warming in the background (`epi ingest --background`, `epi warm --background`): after a fast read, a detached
`epi warm --job` process prepares the answer model's KV blocks, then writes the map, while the user already asks
(questions read what has no block yet from text, within `--cold-seconds`).

- Its progress is a small file in the store (store/job_status.py): `epi warm --status` and `epi ls` show it.
- It stops cleanly on `epi warm --stop`, Ctrl-C in its terminal or SIGTERM; kill -9 loses at most the block being
  written (the tier writes each block whole or not at all). What it finished is kept; `epi warm` goes on.
- It never goes over the KV budget (each block is offered to the tier under its lock, as `epi warm` does), and it
  takes the store's writer lock only for one summary at a time: an ingest started meanwhile makes it wait, not fail.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .engine.errors import EpiError
from .engine.workspace import Workspace
from .store import Store, StoreBusyError, StoreError
from .store.episodic_store import DB_NAME
from .store.job_status import (BLOCKS, DONE, FAILED, MAP, STOPPED, WAITING, JobStatus, job_lock, mark_pending,
                               pending_since, read_status, write_status)

LOG_FILE = "background-job.log"
STATUS_EVERY_S = 1.0  # the status file is rewritten at most this often (every block would be thousands of writes)
LOCK_RETRY_S = 2.0    # a job waiting for the writer lock (an ingest runs) looks again this often
MAX_ROUNDS = 10       # blocks then map, again until a round finds nothing new (a quiet round costs a few queries)
NICENESS = 10         # the job's scheduling priority below the user's commands (yield_the_cpu)


LIFE_FILE = "background-job.life"  # flocked by the job for as long as it lives (see _life_fd below)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the pid alone tells whether the job lives
    fcntl = None


def _life_fd(store_dir: Path) -> int | None:
    """An open descriptor holding the job's life lock, or None when another holds it (a job lives). The parent takes
    it and hands it to the job's process (pass_fds): the lock then lives exactly as long as that process, whatever
    ends it, and is not taken by a pid that another program got since, nor by a copy of the store."""
    fd = os.open(Path(store_dir) / LIFE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def job_lives(store_dir: Path, pid: int) -> bool:
    """Whether the store's background job runs: its pid is alive and its life lock is held (where there are no
    flocks, the pid alone). Both: the lock tells the job from a program that got its pid since, and the pid is
    dead a moment before the kernel has released a killed job's lock."""
    if not process_alive(pid):
        return False
    if fcntl is None:  # pragma: no cover - Windows
        return True
    try:
        fd = _life_fd(store_dir)
    except OSError:  # the store's folder is gone or cannot be written: no job can run in it
        return False
    if fd is None:
        return True
    os.close(fd)  # taken, so free: let it go again
    return False


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process holds that pid now
        return True
    try:  # a finished child not yet reaped by its parent (a test's Popen) is a zombie: not running
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def job_status(store_dir: Path) -> JobStatus | None:
    """The job's last status; one that says it runs but whose process is gone is reported as stopped."""
    status = read_status(store_dir)
    if status is not None and status.running and not job_lives(store_dir, status.pid):
        status.phase = STOPPED
        status.message = (f"its process ended before it finished (killed? its output is in {LOG_FILE}); `epi warm` "
                          "goes on from where it stopped")
    return status


def start_job(store_dir: Path, model: str, threads: int | None, write_map: bool) -> JobStatus:
    """Start the background job for `model` on the store; refused while one runs there (two started at once: the
    second is refused, under the job lock)."""
    with job_lock(store_dir):
        return _spawn(store_dir, model, threads, write_map)


def _spawn(store_dir: Path, model: str, threads: int | None, write_map: bool) -> JobStatus:
    """start_job's work, under the job lock its caller holds."""
    current = job_status(store_dir)
    if current is not None and current.running:
        raise EpiError(f"{current.model}'s blocks are already being prepared in the background (pid "
                       f"{current.pid}); `epi warm --status` shows how far, `epi warm --stop` stops it")
    life = _life_fd(store_dir) if fcntl is not None else None
    if fcntl is not None and life is None:  # a job whose status file was lost or copied over
        raise EpiError("a background job is already running on this store; `epi warm --stop` stops it")
    command = [sys.executable, "-m", "episodic_cli", "warm", "--job", "--store", str(store_dir), "--model", model]
    command += ["--threads", str(threads)] if threads else []
    command += [] if write_map else ["--no-map"]
    command += [] if life is None else ["--life-fd", str(life)]
    try:
        with open(Path(store_dir) / LOG_FILE, "ab") as log:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True,  # not stopped by the terminal's Ctrl-C or hang-up
                                       pass_fds=() if life is None else (life,))  # the job holds its life lock
    finally:
        if life is not None:
            os.close(life)  # the job's copy of the descriptor keeps the lock
    status = JobStatus(pid=process.pid, model=model)
    write_status(store_dir, status)  # shown at once; the job rewrites it as it goes
    return status


STARTED, JOINED, BUSY = "started", "joined", "busy"


def start_or_join(store_dir: Path, model: str, threads: int | None, write_map: bool) -> tuple[JobStatus, str]:
    """For `epi ingest --background`, where a running job is normal, not an error: one running for `model` takes up
    the new documents in its next round (JOINED); one running for another model is left alone (BUSY); otherwise a
    new job starts (STARTED). (the job's status, which of the three)"""
    with job_lock(store_dir):
        current = job_status(store_dir)
        if current is not None and current.running:
            if current.model != model:
                return current, BUSY
            mark_pending(store_dir)
            return current, JOINED
        return _spawn(store_dir, model, threads, write_map), STARTED


def stop_job(store_dir: Path, wait_s: float = 30.0) -> JobStatus | None:
    """Ask the running job to stop (SIGTERM: it finishes the block it is writing) and wait for it to end."""
    status = job_status(store_dir)  # running only while its life lock is held too: the pid is the job's
    if status is None or not status.running:
        return status
    try:
        os.kill(status.pid, signal.SIGTERM)
    except ProcessLookupError:
        return job_status(store_dir)
    deadline = time.monotonic() + wait_s
    while job_lives(store_dir, status.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return job_status(store_dir)


def yield_the_cpu() -> None:
    """Run below the user's questions: a question asked while the job warms gets the cores first. On Linux the job's
    own session is its own autogroup, which the scheduler weighs against the terminal's whatever a process's nice
    value, so the group's niceness is lowered too (best effort: not every kernel has autogroups)."""
    try:
        os.nice(NICENESS)
    except (AttributeError, OSError):
        return
    try:
        with open("/proc/self/autogroup", "w", encoding="ascii") as f:
            f.write(str(NICENESS))
    except OSError:
        pass


def _map_when_free(ws: Workspace, st: Store, status: JobStatus, progress, report) -> int:
    """The map of whatever lacks it; while an ingest holds the writer lock, wait for it and go on (resumable)."""
    while True:
        try:
            return ws.write_map(st, progress).written
        except StoreBusyError:
            status.phase = WAITING
            report(force=True)
            time.sleep(LOCK_RETRY_S)
            status.phase = MAP


def run_job(store_dir: Path, model: str, threads: int | None, write_map: bool,
            life_fd: int | None = None) -> JobStatus:
    """The job itself (in the detached process): the blocks every event lacks, then the map, its status kept in the
    store as it goes. `life_fd`: the life lock start_job took and handed over (kept open until the process ends);
    a job started by hand takes it itself, and does not run beside another."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops it as Ctrl-C does, between blocks
    yield_the_cpu()
    status = JobStatus(pid=os.getpid(), model=model)
    if life_fd is None and fcntl is not None and _life_fd(store_dir) is None:  # the descriptor stays open: held
        status.phase, status.message = FAILED, "another background job runs on this store"
        return status
    last_write = 0.0

    def report(force: bool = False) -> None:
        nonlocal last_write
        if force or time.monotonic() - last_write >= STATUS_EVERY_S:
            try:
                write_status(store_dir, status)
            except OSError:  # the store's folder is gone (removed under the job): nothing to tell
                pass
            last_write = time.monotonic()

    def phase(name: str) -> None:
        if not (Path(store_dir) / DB_NAME).is_file():  # removed while the job ran: stop, write nothing more
            raise EpiError("its store was removed while it ran")
        status.phase, status.phase_started, status.tokens_done, status.tokens_total = name, time.time(), 0, 0
        report(force=True)

    def blocks_progress(done: int, total: int) -> None:
        status.tokens_done, status.tokens_total = done, total
        report()

    def map_progress(state) -> None:
        status.tokens_done, status.tokens_total = state.tokens_done, state.tokens_total
        report()

    report(force=True)
    ws = Workspace(model, str(store_dir), threads)
    try:
        with Store.open_existing(ws.store_dir) as st:
            ws.check_store(st)
            for round_number in range(1, MAX_ROUNDS + 1):  # an ingest's documents added meanwhile: another round
                round_started = time.time()
                st.refresh()
                phase(BLOCKS)
                warmed = ws.warm(st, blocks_progress)
                status.blocks_kept += warmed.events_kept
                written = 0
                if write_map:
                    phase(MAP)
                    written = _map_when_free(ws, st, status, map_progress, report)
                    status.summaries_written += written
                quiet = warmed.events_to_do == 0 and written == 0
                with job_lock(store_dir):  # an ingest joins before this, and is taken up, or after, and starts anew
                    if warmed.stopped or round_number == MAX_ROUNDS or (
                            quiet and pending_since(store_dir) <= round_started):
                        status.phase, status.message = DONE, warmed.stopped
                        report(force=True)
                        break
    except KeyboardInterrupt:
        status.phase, status.message = STOPPED, "stopped on request; `epi warm` goes on from where it stopped"
    except (EpiError, StoreError, OSError) as exc:
        status.phase, status.message = FAILED, str(exc)
    except Exception as exc:  # a defect: failed, not "killed?", with the traceback in the job's log
        status.phase, status.message = FAILED, f"{type(exc).__name__}: {exc} (see {LOG_FILE})"
        raise
    finally:
        ws.close()
        report(force=True)
    return status
