"""The status of the background job that prepares the answer model's KV blocks and writes the map after a fast read
(`epi ingest --background`, `epi warm --background`): one small JSON file in the store, replaced whole on every
update, so a reader (`epi warm --status`, `epi ls`) never sees half of one and a killed job leaves its last state.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from filelock import FileLock

from .file_lock import exclusive_lock

JOB_FILE = "background-job.json"
# Held while a job decides it is done and while an ingest decides to join it, so that none of the ingest's documents
# falls between the job's last look and its end; the ingest marks what it adds in PENDING_FILE (its time).
JOB_LOCK_FILE = "background-job.lock"
PENDING_FILE = "background-job.pending"

STARTING, BLOCKS, MAP, WAITING, DONE, FAILED, STOPPED = (
    "starting", "preparing blocks", "writing the map", "waiting for the writer lock", "done", "failed", "stopped")
RUNNING_PHASES = frozenset({STARTING, BLOCKS, MAP, WAITING})


@dataclass
class JobStatus:
    pid: int
    model: str
    phase: str = STARTING
    tokens_done: int = 0       # of the phase's work: tokens prepared, or tokens of parts summarised
    tokens_total: int = 0
    started: float = field(default_factory=time.time)
    phase_started: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    blocks_kept: int = 0
    summaries_written: int = 0
    message: str | None = None  # why it stopped or failed

    @property
    def running(self) -> bool:
        return self.phase in RUNNING_PHASES

    def eta_seconds(self) -> float | None:
        """The rest of this phase at the rate so far (None before there is a rate)."""
        elapsed = self.updated - self.phase_started
        if self.tokens_done <= 0 or elapsed <= 0 or self.tokens_total <= self.tokens_done:
            return None
        return (self.tokens_total - self.tokens_done) * elapsed / self.tokens_done

    def as_json(self) -> dict:
        eta = self.eta_seconds()
        return {**asdict(self), "eta_seconds": None if eta is None else round(eta, 1)}


def job_path(store_dir: Path) -> Path:
    return Path(store_dir) / JOB_FILE


def _replace(path: Path, text: str) -> None:
    """`path` holds `text` whole, old or new, for a reader at any moment (a temp file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_status(store_dir: Path, status: JobStatus) -> None:
    status.updated = time.time()
    _replace(job_path(store_dir), json.dumps(asdict(status)))


def read_status(store_dir: Path) -> JobStatus | None:
    """The last status written, or None when no job ever ran here (or its file cannot be read: it is only a report)."""
    try:
        data = json.loads(job_path(store_dir).read_text(encoding="utf-8"))
        return JobStatus(**{k: v for k, v in data.items() if k in JobStatus.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None


def job_lock(store_dir: Path) -> FileLock:
    return exclusive_lock(Path(store_dir) / JOB_LOCK_FILE)


def mark_pending(store_dir: Path) -> None:
    """Documents were added for the running job to take up (under job_lock)."""
    _replace(Path(store_dir) / PENDING_FILE, repr(time.time()))


def pending_since(store_dir: Path) -> float:
    """When documents were last added for the running job (0.0: never)."""
    try:
        return float((Path(store_dir) / PENDING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0.0
