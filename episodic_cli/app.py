"""The `epi` command line: a thin Typer layer over engine.workspace. Rendering lives in render.py, the REPL in repl.py."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import __version__, render
from .engine.answer import check_question_length
from .engine.errors import EpiError
from .engine.paths import store_path
from .engine.segment import REFINE_METHODS, SegmentParams
from .engine.sources import Skipped, discover
from .engine.kv_capture import DEFAULT_KIND
from .engine.kv_memory import KINDS as KV_KINDS
from .engine.workspace import MAX_EVENT_TOKENS, MODES, Workspace
from .store import Store, StoreError
from .store.kv_compaction import CompactionResult, KVUsage

app = typer.Typer(
    name="epi",
    help=(
        "Ask questions about books, PDFs and codebases, offline.\n\n"
        "epi reads your documents once (`epi ingest`), cuts them into episodic events where the language model "
        "is surprised, and answers questions from the few events that matter (`epi ask`, `epi chat`), with the "
        "pages or lines it used.\n\n"
        "Example:  epi ingest book.pdf src/   then   epi ask \"who betrayed whom in chapter 3?\""
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)

StoreOpt = Annotated[Optional[str], typer.Option("--store", "-s", help="Store name (kept under the epi data directory) or a path. Default: `default`, or $EPI_STORE.")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="A GGUF chat model to use instead of the bundled SmolLM2-135M-Instruct (or set $EPI_MODEL).")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", "-t", min=1, help="CPU threads for llama.cpp (default: physical cores).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout and nothing else.")]
EpmanOpt = Annotated[bool, typer.Option("--epman", help="kv mode: weight each retrieved block by its relevance (EpMAN; V rows scaled into [0.9, 1.0]).")]


def handle_errors(fn: Callable) -> Callable:
    """Every failure a user can cause ends as one line on stderr and a non-zero exit, never a traceback."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (EpiError, StoreError) as exc:
            render.error(str(exc))
            raise typer.Exit(1)
        except KeyboardInterrupt:
            render.error("interrupted; everything committed before the interruption is kept")
            raise typer.Exit(130)
        except OSError as exc:
            render.error(f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc))
            raise typer.Exit(1)

    return wrapper


@app.command()
@handle_errors
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="PDF, text, Markdown or reST files, or folders of code/docs (walked recursively, honouring .gitignore).", show_default=False)],
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    min_tokens: Annotated[int, typer.Option(help="Smallest event, in tokens.", min=16)] = SegmentParams.min_tokens,
    max_tokens: Annotated[int, typer.Option(help="Largest event, in tokens.", min=16)] = SegmentParams.max_tokens,
    gamma: Annotated[float, typer.Option(help="Surprise threshold: mean + GAMMA x std of the last tokens (EM-LLM eq. 1).")] = SegmentParams.gamma,
    refine: Annotated[str, typer.Option(help="Boundary refinement (EM-LLM 3.3): each surprise cut may move back to the sentence or line end where the model's attention keys split best into two groups, judged by `modularity` or `conductance`; `none` keeps the surprise cuts.")] = SegmentParams.refine,
    kv_type: Annotated[str, typer.Option(help="How each event's KV block is stored for kv mode: q8_0 (about 12 KB/token with the bundled model), q4_0 (6.5 KB/token, less faithful) or f16 (23 KB/token, exact).")] = DEFAULT_KIND,
    kv: Annotated[bool, typer.Option("--kv/--no-kv", help="Store KV blocks (fast answers in kv mode). --no-kv keeps only text (text mode, far less disk).")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Read documents into the store: one llama.cpp pass per file, surprise-segmented events, embeddings.

    Unchanged files are skipped (content hash); a changed file replaces its old events. Each file is committed on
    its own, so an error or Ctrl-C never loses the files already done; run the same command again to resume.
    """
    if min_tokens > max_tokens:
        raise EpiError("--min-tokens must not exceed --max-tokens")
    if max_tokens > MAX_EVENT_TOKENS:
        raise EpiError(f"--max-tokens must be at most {MAX_EVENT_TOKENS} (an event must fit the ingest window)")
    if kv_type not in KV_KINDS:
        raise EpiError(f"unknown --kv-type {kv_type!r}: use {', '.join(KV_KINDS)}")
    if refine not in REFINE_METHODS:
        raise EpiError(f"unknown --refine {refine!r}: use {', '.join(REFINE_METHODS)}")
    params = SegmentParams(gamma=gamma, min_tokens=min_tokens, max_tokens=max_tokens, refine=refine)
    found = list(discover(paths))
    if all(isinstance(f, Skipped) for f in found):  # say why before loading a model for nothing
        raise EpiError(nothing_to_ingest(found))
    ws = Workspace(model, store, threads)
    with render.status("loading model and embedder", quiet=as_json):
        st = ws.store_for_writing(params)
        ws.embedder.load(batches=True)  # before the progress bars start
    results = []
    try:
        with st.writer():  # before the block file is opened: a compaction by another process may have switched it
            ingestor = ws.ingestor(st, params, kv_type if kv else None)
            try:
                with render.IngestProgressView(found, quiet=as_json) as view:
                    for result in ingestor.ingest(found, view):
                        results.append(result)
                        if as_json:
                            print(json.dumps(result.as_json()), flush=True)
            finally:
                ingestor.close()
            compact_if_wasteful(st, quiet=as_json)
    finally:
        st.close()
    if not as_json:
        render.ingest_summary(results, st.path)
    if any(r.status == "failed" for r in results) or all(r.status == "skipped" for r in results):
        raise typer.Exit(1)


def nothing_to_ingest(skipped: list[Skipped]) -> str:
    if not skipped:
        return "nothing to ingest: no readable files under the given paths"
    reasons = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return f"nothing to ingest: {reasons}{more}"


@app.command()
@handle_errors
def ask(
    question: Annotated[str, typer.Argument(help="Your question, in quotes.", show_default=False)],
    k: Annotated[int, typer.Option("-k", min=1, max=50, help="Events found by similarity, before their neighbours are added.")] = 3,
    mode: Annotated[Optional[str], typer.Option(help="`kv` loads the retrieved events' stored KV blocks (the default when the store has them); `text` re-reads their text.", show_default=False)] = None,
    neighbours: Annotated[int, typer.Option(min=0, max=3, help="Adjacent events added around each hit (temporal contiguity).")] = 1,
    epman: EpmanOpt = False,
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the store, streaming the answer, then list the sources it was given.

    Example:  epi ask "what does the retry policy default to?" -k 5
    """
    if mode is not None and mode not in MODES:
        raise EpiError(f"unknown --mode {mode!r}: use text or kv")
    check_question_length(question)  # before any loading: a pasted page is refused at once
    ws = Workspace(model, store, threads, warn=render.warning)
    with Store.open_existing(ws.store_dir) as st:
        with render.status("loading model", quiet=as_json):
            ws.check_store(st)
            ws.embedder.load(batches=False)  # before timing starts
            ws.answerer(mode or ws.default_mode())
        result, stream = ws.ask(st, question, k=k, mode=mode, neighbours=neighbours, epman=epman)
        if as_json:
            for _ in stream:
                pass
            print(json.dumps(result.as_json(), ensure_ascii=False))
        else:
            render.stream_answer(stream)
            render.sources(result.retrieved)
            render.timings(result)
    ws.close()


@app.command()
@handle_errors
def chat(
    k: Annotated[int, typer.Option("-k", min=1, max=50, help="Events found by similarity per question.")] = 3,
    epman: EpmanOpt = False,
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Talk to the archive: follow-up questions keep the conversation. Type /help inside for commands."""
    from .repl import run_repl

    ws = Workspace(model, store, threads, warn=render.warning)
    with Store.open_existing(ws.store_dir) as st:
        with render.status("loading model"):
            ws.check_store(st)
            ws.embedder.load(batches=False)
            ws.answerer(ws.default_mode())
        run_repl(ws, st, k, epman)
    ws.close()


@app.command("ls")
@handle_errors
def list_documents(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List the documents in the store with their events, tokens and the store's size on disk."""
    with Store.open_existing(store_path(store)) as st:
        docs, stats = st.documents(), st.stats()
        if as_json:
            print(json.dumps({"store": str(st.path), "documents": [
                {"path": d.display_path, "kind": d.kind, "tokens": d.n_tokens, "events": d.n_events,
                 "pages": d.n_pages, "lines": d.n_lines} for d in docs], **{k: v for k, v in stats.items() if k != "path"}}))
        else:
            render.documents(docs, stats)


@app.command()
@handle_errors
def show(
    event_id: Annotated[int, typer.Argument(help="An event id, as printed by `epi ask` sources or `--json`.", show_default=False)],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one event: its text exactly as extracted, where it comes from, and its surprise statistics."""
    with Store.open_existing(store_path(store)) as st:
        events = st.get_events([event_id])
        if not events:
            raise EpiError(f"no event {event_id} in store {st.path}; `epi ask --json` lists event ids")
        ev = events[0]
        doc = st.get_document(ev.document_id)
        if as_json:
            print(json.dumps({"event_id": ev.id, "document": doc.display_path, "ordinal": ev.ordinal,
                              "page_start": ev.page_start, "page_end": ev.page_end, "line_start": ev.line_start,
                              "line_end": ev.line_end, "tokens": ev.token_end - ev.token_start,
                              "surprise_mean": ev.surprise_mean, "surprise_max": ev.surprise_max, "text": ev.text},
                             ensure_ascii=False))
        else:
            render.event(ev, doc)


@app.command()
@handle_errors
def rm(
    paths: Annotated[list[str], typer.Argument(help="Documents to remove, as shown by `epi ls` (or their file paths).", show_default=False)],
    store: StoreOpt = None,
) -> None:
    """Remove documents with their events and index entries from the store (the files themselves are untouched)."""
    with Store.open_existing(store_path(store)) as st, st.writer():
        by_display = {d.display_path: d.path for d in st.documents()}
        missing = []
        for p in paths:
            key = by_display.get(p) or str(Path(p).expanduser().resolve())
            if st.remove_document(key):
                render.info(f"removed {p}")
            else:
                missing.append(p)
        compact_if_wasteful(st)
    if missing:
        raise EpiError(f"not in the store: {', '.join(missing)} (see `epi ls`)")


@app.command()
@handle_errors
def compact(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Give back the disk space of KV blocks whose documents were re-ingested or removed.

    The live blocks are copied, checksum-verified, into a new block file that replaces the old one in one step: an
    interruption or a full disk leaves the store as it was. A block that fails its checksum is dropped (its event is
    answered from text). `epi ingest` and `epi rm` compact on their own once more than half of the block file, and
    more than 64 MiB, is waste; `epi ls` shows how much is.
    """
    with Store.open_existing(store_path(store)) as st:
        usage = st.kv_usage()
        result = None
        if usage.dead_bytes:
            result = run_compaction(st, usage, quiet=as_json)
        if as_json:
            before = usage.file_bytes if result is None else result.bytes_before
            after = usage.file_bytes if result is None else result.bytes_after
            print(json.dumps({"store": str(st.path), "compacted": result is not None, "bytes_before": before,
                              "bytes_after": after, "reclaimed_bytes": before - after,
                              "blocks_dropped": 0 if result is None else result.blocks_dropped}))
        elif result is None:
            render.nothing_to_compact(usage.file_bytes)
        else:
            render.compaction(result)


def run_compaction(st: Store, usage: KVUsage, quiet: bool) -> CompactionResult:
    """Compact under the caller's writer lock, with a progress bar over the live block bytes."""
    with render.byte_progress("compacting KV blocks", usage.block_bytes, quiet=quiet) as advance:
        return st.compact_kv_blocks(advance)


def compact_if_wasteful(st: Store, quiet: bool = False) -> None:
    """After `ingest` and `rm`, inside their writer lock: compact once dead blocks dominate the block file."""
    usage = st.kv_usage()
    if not usage.worth_compacting:
        return
    try:
        result = run_compaction(st, usage, quiet)
    except (StoreError, OSError) as exc:  # the command's own work is committed; the store is as it was
        render.warning(f"could not compact the KV block file: {exc}")
        return
    if not quiet:
        render.compaction(result)


@app.command()
@handle_errors
def doctor(store: StoreOpt = None, model: ModelOpt = None) -> None:
    """Check the installation: versions, CPU features and threads, GPU offload, model, embedder and store health."""
    from .engine.diagnostics import collect

    ok = render.doctor(collect(model, store))
    if not ok:
        raise typer.Exit(1)


def version_callback(value: bool) -> None:
    if value:
        print(f"epi {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Show the version and exit.")] = False,
) -> None:
    pass


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # `epi ask ... | head` closes stdout early
        sys.stderr.close()
        sys.exit(0)
