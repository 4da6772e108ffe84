"""Ingest fanned out over a Ray cluster, into one store (`epi ingest --cluster`, docs/cluster.md).

Each file is one Ray task. A task runs in a Ray worker process that holds its own model and embedder (loaded by its
first task, kept for the next ones) and runs the very pass a local ingest runs (`Ingestor.ingest_one`), but into a
stand-in store and KV tier that only collect: the document's record, its events with their embeddings and the KV
blocks it keeps come back as one picklable result. The driver is the store's single writer: it offers the blocks to
its tier and replaces the document in one transaction, as a local ingest does, so nothing of a document lands before
all of it is there. A worker that dies mid-document is Ray's to handle: the task is retried (`max_retries`) on
another worker process; a driver that dies loses only what it had not committed, and rerunning the command skips
what was (skip-unchanged).

A document whose events and blocks would take more than `RESULT_LIMIT` bytes (about 80k tokens with the bundled
model at q8_0) is not held by a worker: the worker says so ("deferred") and the driver ingests it itself, after the
others, with the local pipeline and its usual checkpoints.

Ray is an optional dependency (`pip install 'epi[cluster]'`), imported here only, and only when a run asks for it.
"""
from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...store import DocumentRecord, EventRecord
from ...store.kv_tier import Admission, TierConfig
from ..documents.sources import Skipped
from ..embed.embedder import EMBEDDER_NAME, Embedder
from ..errors import EpiError
from ..kv.keeper import BlockKeeper, tier_config
from ..llama.backend import LlamaModel, default_threads
from ..llama.models import prepare_model
from .pipeline import Ingestor, IngestProgress, IngestResult, _Silent
from .segment import SegmentParams

LOCAL = "local"
DEFAULT_LOCAL_WORKERS = 2
DEFAULT_CLUSTER_THREADS = 4  # llama.cpp threads per worker on a real cluster when --threads is not given
RESULT_LIMIT = 1 << 30
# A killed worker's document is retried this many times (on another worker process) before it counts as failed.
MAX_RETRIES = 3
CONNECT_TIMEOUT_S = 5.0
# How long a run that stops early waits for each task it cancels to end, so that Ray has nothing left to report.
ABANDON_WAIT_S = 10.0
NEEDS_RAY = "--cluster needs Ray, an optional part of epi: pip install 'epi[cluster]' (or: pip install ray)"


@dataclass(frozen=True)
class ClusterSpec:
    """Where the files go: `local` (a Ray cluster started for this run on 127.0.0.1, `workers` processes) or the
    address of a running one (host:port of its head, ray://host:port, or `auto`)."""

    address: str
    workers: int | None = None
    threads: int | None = None        # llama.cpp threads per worker (and the CPUs Ray reserves for each)
    result_limit: int = RESULT_LIMIT  # a larger document is ingested by the driver (see the module docstring)

    @property
    def local(self) -> bool:
        return self.address == LOCAL


def cluster_spec(address: str | None, workers: int | None, threads: int | None) -> ClusterSpec | None:
    """`--cluster`/`--workers`/`--threads` as a ClusterSpec (None: no cluster); a mismatch is one line."""
    if not address:
        if workers is not None:
            raise EpiError("--workers goes with --cluster local")
        return None
    if workers is not None and address != LOCAL:
        raise EpiError("--workers sizes a cluster started here (--cluster local); a running cluster has its own")
    if address != LOCAL:
        _probe(address)  # before any model loads
    return ClusterSpec(address, workers, threads, RESULT_LIMIT)


@dataclass(frozen=True)
class WorkerJob:
    """What every task of a run needs to read a document exactly as the driver's local pipeline would."""

    model_choice: str | None     # --model / $EPI_MODEL as the driver resolved them; the worker resolves it again
    model_sha256: str            # ... and must find this very file (its blocks and token spans are bound to it)
    tier: TierConfig | None      # the driver's KV tier (None: no blocks kept)
    params: SegmentParams
    result_limit: int
    threads: int = 0             # llama.cpp threads per worker: set once the cluster's CPUs are known
    embedder: str = EMBEDDER_NAME  # the store's embedder identity: it decides how long events are cut into windows


@dataclass
class DocumentResult:
    """A worker's document: the IngestResult, and what the driver commits (record, events, blocks)."""

    result: IngestResult
    record: DocumentRecord | None = None
    events: list[EventRecord] = field(default_factory=list)
    blocks: list[tuple] = field(default_factory=list)  # BlockKeeper.offer_encoded's arguments, in the pass's order
    worker: str = ""                                   # host:pid, for the benchmark and for messages


# ------------------------------------------------------------------------------------------------ worker side


class _CollectingStore:
    """The store a worker's pass commits into: it keeps the document for the driver. The worker's Ingestor never
    checkpoints (commit_every is unbounded), so replace_document is the only write it makes."""

    def __init__(self, path: Path):
        self.path = path  # a long text's spool file goes here
        self.committed: tuple[DocumentRecord, list[EventRecord]] | None = None

    # The worker offers every block (the driver's tier applies the budget), so Ingestor.bytes_needed, which caps its
    # estimate of the blocks at the room left in the budget, must see no cap here: the result holds them all.
    kv_budget = 1 << 62

    def kv_space(self) -> _CollectingStore:
        return self

    def used_bytes(self) -> int:
        return 0

    def find_document(self, path: str) -> None:
        return None  # the driver decided the file is to be read (skip-unchanged is its check)

    def replace_document(self, record: DocumentRecord, events: list[EventRecord]) -> DocumentRecord:
        self.committed = (record, events)
        return record


class _CollectingTier:
    """The KV tier a worker's keeper offers blocks to: it keeps them for the driver, whose tier decides (budget)."""

    def __init__(self, config: TierConfig):
        self.config = config
        self.offered: list[tuple] = []

    def path_of(self, key: bytes) -> Path:
        return Path(os.devnull) / key.hex()  # never a file: the driver's tier answers "already kept"

    def offer(self, key, block_type, n_tokens, payload, rep_keys, on_use, live=None) -> Admission:
        self.offered.append((key, block_type, n_tokens, payload, rep_keys, on_use))
        return Admission.WRITTEN


class _Worker:
    """One worker process's model, embedder and pass, kept between its tasks."""

    def __init__(self, job: WorkerJob):
        prepared = prepare_model(job.model_choice)
        where = f"{socket.gethostname()}"
        if prepared.sha256 != job.model_sha256:
            raise EpiError(f"the Ray worker on {where} has another model file for {job.model_choice or 'the default'}"
                           f" ({prepared.source}); every node needs the driver's (docs/cluster.md)")
        self.model = LlamaModel(prepared.path)
        self.tier = None
        keeper = None
        if job.tier is not None:
            config = tier_config(self.model, prepared.sha256, job.tier.block_kind)
            if config != job.tier:
                raise EpiError(f"the Ray worker on {where} runs another llama.cpp build ({config.llama_cpp_version}, "
                               f"driver {job.tier.llama_cpp_version}): its KV blocks would not load; install the "
                               "same epi on every node")
            self.tier = _CollectingTier(config)
            keeper = BlockKeeper(self.tier, self.model)
        self.spool = Path(tempfile.mkdtemp(prefix="epi-worker-"))
        self.store = _CollectingStore(self.spool)
        embedder = Embedder(job.threads, job.embedder)
        embedder.load(batches=True)
        self.ingestor = Ingestor(self.store, self.model, embedder, job.params, job.threads, keeper,
                                 segmenter=f"{self.model.info.name} {prepared.sha256}", commit_every=sys.maxsize)
        self.ingestor.result_limit = job.result_limit
        self.name = f"{where}:{os.getpid()}"

    def run(self, path: Path, display_path: str) -> DocumentResult:
        self.store.committed = None
        if self.tier is not None:
            self.tier.offered = []
        result = self.ingestor.ingest_one(path, display_path, _Silent())
        out = DocumentResult(result, worker=self.name)
        if result.status == "ingested" and self.store.committed is not None:
            out.record, out.events = self.store.committed
            out.blocks = self.tier.offered if self.tier is not None else []
        return out


_WORKERS: dict[WorkerJob, _Worker] = {}


def ingest_document(job: WorkerJob, path: str, display_path: str) -> DocumentResult:
    """A Ray task: one document read in this worker process (its model loaded by the process's first task)."""
    worker = _WORKERS.get(job)
    if worker is None:
        _WORKERS.clear()  # another run's model: one model per worker process
        worker = _WORKERS[job] = _Worker(job)
    return worker.run(Path(path), display_path)


# ------------------------------------------------------------------------------------------------ driver side


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise EpiError(NEEDS_RAY) from exc
    return ray


def _probe(address: str) -> None:
    """A head that cannot be reached fails in seconds with one line (ray.init would retry for a minute)."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise EpiError(f"--cluster {address!r}: write the head's address as HOST:PORT (e.g. 10.0.0.5:6379), "
                       "ray://HOST:PORT, auto, or `local`")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise EpiError(f"cannot reach the Ray cluster at {address}: {reason}; is `ray start --head` running there, "
                       "and is the port open?") from exc


def _errors_to_stderr() -> None:
    """Ray prints the cluster's error messages ("a worker died...") on the driver's stdout, where `--json` writes
    its results: they go to stderr instead. Ray offers no setting for it, so its printer is wrapped (if it is
    there: another Ray release may print elsewhere)."""
    from ray._private import worker

    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "epi_to_stderr", False):
        return

    def to_stderr(data, ignore_prefix: bool):
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.epi_to_stderr = True
    worker.print_to_stdstream = to_stderr


def connect(spec: ClusterSpec):
    """Ray, connected as `spec` says; returns (ray, whether this run started the connection and must end it)."""
    if not spec.local:
        _probe(spec.address)
    else:
        # Keeps every server of the local cluster on 127.0.0.1 (Ray otherwise binds the machine's address), and token
        # auth on, stated, so that Ray prints no warning about it. Ray reads both when it is first imported only.
        if "ray" not in sys.modules:
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            os.environ.setdefault("RAY_AUTH_MODE", "token")
    ray = _import_ray()
    _errors_to_stderr()
    if ray.is_initialized():  # a Ray program (or a test) that ingests through epi: its connection is used
        return ray, False
    import logging

    try:
        if spec.local:
            ray.init(num_cpus=spec.workers or DEFAULT_LOCAL_WORKERS, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR, configure_logging=False)
        else:
            ray.init(address=spec.address, log_to_driver=False, logging_level=logging.ERROR,
                     configure_logging=False)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError... : one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EpiError(f"cannot start or join the Ray cluster {spec.address}: {first}") from exc
    return ray, True


def commit(local: Ingestor, done: DocumentResult, progress: IngestProgress) -> IngestResult:
    """The driver's single write of a worker's document: its blocks offered as the pass offered them, then the
    document and its events in one transaction (replacing an earlier or partial version)."""
    result = done.result
    if result.status != "ingested":
        return result
    progress.document_started(result.display_path, result.tokens)
    progress.tokens_done(result.tokens)
    keeper = local.keeper
    try:
        if keeper is not None:
            for key, block_type, n_tokens, payload, rep_keys, on_use in done.blocks:
                if not keeper.has(key):  # as the local pass: a block already kept is not written again
                    keeper.offer_encoded(key, block_type, n_tokens, payload, rep_keys, on_use)
        local.store.replace_document(done.record, done.events)
    except Exception as exc:  # noqa: BLE001 - as a local ingest: the run goes on with the next document
        local._stop_if_disk_full(exc, None, result.tokens)
        result.status, result.events = "failed", 0
        result.error = f"{exc} (nothing of this file was stored)"
    return result


class ClusterIngestor:
    """Ingestor's `ingest` with the documents read by Ray workers; `local` is the run's own Ingestor: its store is
    written here only (skip-unchanged, commits) and it reads the deferred long documents itself."""

    def __init__(self, local: Ingestor, spec: ClusterSpec, job: WorkerJob):
        self.local, self.spec = local, spec
        self.ray, self._started = connect(spec)
        try:
            threads, options = self._placement()
        except BaseException:
            if self._started:
                self.ray.shutdown()
            raise
        self.job = replace(job, threads=threads)
        # Ray's own retry for a killed worker process; an exception the pass raises is an answer, not retried.
        self.task = self.ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(ingest_document).options(
            **options)
        self.workers_seen: set[str] = set()

    def _placement(self) -> tuple[int, dict]:
        """(llama.cpp threads per worker, the resources Ray reserves for each task). Local: `workers` tasks share
        this machine's cores. A cluster: one task per GPU when it has GPUs (llama.cpp offloads the whole model),
        else `threads` CPUs per task, at most what its largest node has (a larger request would wait forever)."""
        spec = self.spec
        if spec.local:
            threads = spec.threads or max(1, default_threads() // (spec.workers or DEFAULT_LOCAL_WORKERS))
            return threads, {"num_cpus": 1}
        if self.ray.cluster_resources().get("GPU", 0) >= 1:
            return spec.threads or 1, {"num_cpus": 1, "num_gpus": 1}
        largest = int(max((n["Resources"].get("CPU", 0) for n in self.ray.nodes() if n.get("Alive")), default=0))
        if largest < 1:
            raise EpiError(f"the Ray cluster at {spec.address} has no CPU to run a worker on")
        if spec.threads and spec.threads > largest:
            raise EpiError(f"--threads {spec.threads}: the largest node of the Ray cluster has {largest} CPUs")
        threads = spec.threads or min(DEFAULT_CLUSTER_THREADS, largest)
        return threads, {"num_cpus": threads}

    def ingest(self, found_files: Iterable[tuple[Path, str] | Skipped], progress: IngestProgress | None = None
               ) -> Iterator[IngestResult]:
        """Like Ingestor.ingest, in the order the documents finish; deferred ones last, read here."""
        progress = progress or _Silent()
        pending: dict = {}
        for found in found_files:
            if isinstance(found, Skipped):
                status = "failed" if found.fails_run else "skipped"
                yield self._finished(IngestResult(str(found.path), str(found.path), status, error=found.reason),
                                     progress)
                continue
            unchanged = self.local.unchanged(*found)
            if unchanged is not None:
                yield self._finished(unchanged, progress)
                continue
            path, display_path = found
            pending[self.task.remote(self.job, str(path), display_path)] = found
        deferred = []
        try:
            while pending:
                [ref], _ = self.ray.wait(list(pending), num_returns=1)
                path, display_path = pending.pop(ref)
                result = self._collect(ref, path, display_path)
                if result.result.status == "deferred":
                    deferred.append((path, display_path))
                    continue
                yield self._finished(self._commit(result, progress), progress)
        finally:
            self._abandon(list(pending))
        for path, display_path in deferred:  # the usual checkpoints, from this process
            yield self._finished(self.local.unchanged(path, display_path)
                                 or self.local.ingest_one(path, display_path, progress), progress)

    def _abandon(self, refs: list) -> None:
        """Cancels the tasks of a run that stopped early (an error, Ctrl-C) and reads how they ended. An error left
        unread is printed by Ray when its reference is dropped, later, into whatever this process does next."""
        for ref in refs:
            try:
                self.ray.cancel(ref)
            except Exception:  # noqa: BLE001 - it may have finished already
                pass
        for ref in refs:
            try:
                self.ray.get(ref, timeout=ABANDON_WAIT_S)
            except Exception:  # noqa: BLE001 - cancelled, failed or slow: this run no longer wants it
                pass

    def _collect(self, ref, path: Path, display_path: str) -> DocumentResult:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
            if isinstance(cause, EpiError):  # the worker could not set up (model, build): every task would fail
                raise EpiError(str(cause)) from None
            message = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
            raise EpiError(f"a Ray worker failed on {display_path}: {message}") from None
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError
                ) as exc:
            error = (f"the Ray worker reading it died {MAX_RETRIES + 1} times ({type(exc).__name__}); nothing of this "
                     "file was stored")
            return DocumentResult(IngestResult(str(path), display_path, "failed", error=error))

    def _commit(self, done: DocumentResult, progress: IngestProgress) -> IngestResult:
        self.workers_seen.add(done.worker)
        return commit(self.local, done, progress)

    @staticmethod
    def _finished(result: IngestResult, progress: IngestProgress) -> IngestResult:
        progress.document_finished(result)
        return result

    def finish_run(self) -> None:
        self.local.finish_run()

    @property
    def keeper(self):
        return self.local.keeper

    def close(self) -> None:
        try:
            self.local.close()
        finally:
            if self._started:
                self.ray.shutdown()

