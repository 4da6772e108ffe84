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
from .engine.errors import EpiError
from .engine.paths import store_path
from .engine.segment import SegmentParams
from .engine.sources import Skipped, discover
from .engine.kv_capture import DEFAULT_KIND
from .engine.kv_memory import KINDS as KV_KINDS
from .engine.workspace import MAX_EVENT_TOKENS, MODES, Workspace
from .store import Store, StoreError

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
    params = SegmentParams(gamma=gamma, min_tokens=min_tokens, max_tokens=max_tokens)
    found = list(discover(paths))
    if not found:
        raise EpiError("nothing to ingest: no readable files under the given paths")
    ws = Workspace(model, store, threads)
    with render.status("loading model and embedder", quiet=as_json):
        st = ws.store_for_writing(params)
        ingestor = ws.ingestor(st, params, kv_type if kv else None)
        ws.embedder  # noqa: B018 - load it before the progress bars start
    results = []
    try:
        with st.writer(), render.IngestProgressView(found, quiet=as_json) as view:
            for result in ingestor.ingest(found, view):
                results.append(result)
                if as_json:
                    print(json.dumps(result.as_json()), flush=True)
    finally:
        ingestor.close()
        st.close()
    if not as_json:
        render.ingest_summary(results, st.path)
    if any(r.status == "failed" for r in results) or all(r.status == "skipped" for r in results):
        raise typer.Exit(1)


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
    ws = Workspace(model, store, threads, warn=render.warning)
    with Store.open_existing(ws.store_dir) as st:
        with render.status("loading model", quiet=as_json):
            ws.check_store(st)
            ws.embedder  # noqa: B018 - load before timing starts
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
            ws.embedder  # noqa: B018
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
    if missing:
        raise EpiError(f"not in the store: {', '.join(missing)} (see `epi ls`)")


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
