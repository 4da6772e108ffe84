"""The `epi` command line: a thin Typer layer over engine.workspace. Rendering lives in render.py, the REPL in repl.py."""
from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from enum import Enum
from functools import wraps
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from . import __version__, continued, render
from . import background as background_job
from .api import Archive, check_doc_globs, nothing_to_ingest, parse_size, unknown_event
from .engine.ask_options import (COLD_PREFILL_SECONDS, DEFAULT_EPMAN, DEFAULT_K, DEFAULT_LAYERED, DEFAULT_NEIGHBOURS,
                                 DEFAULT_READ, DEFAULT_SHORT, MODES, READ_CHOICES, SECOND_LOOK, AskOptions, AskRequest,
                                 check_pool)
from .engine.documents.blocks import BLOCK_KINDS
from .engine.documents.sources import Skipped, discover, document_format
from .engine.documents.structure import decode as decode_section
from .engine.documents.structure import describe as describe_section
from .engine.errors import EpiError, Terminated
from .engine.ingest.cluster import cluster_spec
from .engine.ingest.document_pass import DEFAULT_COMMIT_EVERY
from .engine.ingest.segment import REFINE_METHODS, SegmentParams
from .engine.ingest.watch import plan, watch_changes
from .engine.kv.blocks import KINDS as KV_KINDS
from .engine.kv.keeper import DEFAULT_KIND
from .engine.llama.models import answer_model as chosen_answer_model
from .engine.llama.models import change_model_settings, plan_ingest, resolve_model_source
from .engine.paths import store_path
from .engine.retrieval.citations import printable
from .engine.retrieval.question_kind import QuestionKind
from .engine.workspace import MAX_EVENT_TOKENS, Workspace, apply_kv_budget
from .store import Store, StoreError
from .store.records import DEFAULT_KV_BUDGET_BYTES

class _OneLineBadValues(TyperGroup):
    """A bad option value (`--mode fast`, `-k 0`, `--threads x`) ends as one line on stderr naming the option and what
    it takes, exit 2, like every other failure a user can cause; an unknown option or a missing argument still shows
    the usage line first (Click's own output)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except typer.BadParameter as exc:  # Click's, or the copy of Click that newer Typers carry
            if isinstance(exc, sys.modules[typer.BadParameter.__module__].MissingParameter):
                raise
            message = exc.format_message().replace("Value error, ", "")  # pydantic's prefix (Typer >= 0.2x)
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            render.error(message + where)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_OneLineBadValues,
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

# Options with a fixed set of values are Enums, so that `--help` lists the values and Typer refuses any other (the
# values are the engine's own tuples).
Mode = Enum("Mode", {m: m for m in MODES}, type=str)
KVType = Enum("KVType", {k: k for k in KV_KINDS}, type=str)
Refine = Enum("Refine", {r: r for r in REFINE_METHODS}, type=str)

StoreOpt = Annotated[Optional[str], typer.Option("--store", "-s", help="Store name (kept under the epi data directory) or a path. Default: `default`, or $EPI_STORE.")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="The model: any name `epi models` lists (an installed one: `qwen-1.5b`, answering by default where installed, `qwen-0.5b`, `smollm2`, the bundled SmolLM2-135M and fast reader; or one Ollama, LM Studio or the Hugging Face cache keeps: `qwen2.5:7b`), or a .gguf file; or set $EPI_MODEL, or a default with `epi config --answer-model`. At ingest it names the model that reads (by default the answer model itself).")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", "-t", min=1, help="CPU threads for llama.cpp (default: physical cores).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout and nothing else.")]
EpmanOpt = Annotated[bool, typer.Option("--epman", help="kv mode: weight each retrieved block by its relevance (EpMAN; V rows scaled into [0.9, 1.0]).")]
DocOpt = Annotated[Optional[list[str]], typer.Option("--doc", "-d", help="Answer only from documents matching this glob (their path as `epi ls` shows it, or its file name: `--doc book.pdf`, `--doc 'src/*.py'`); repeat it for more.", show_default=False)]
SecondLookOpt = Annotated[bool, typer.Option("--second-look/--no-second-look", help="A lookup read from whole KV blocks whose answer no sentence of the sources holds is answered again, from the passages that match the question best read as text (about 9 s more on 2 cores, for about 1 question in 10). --no-second-look: keep the first answer.")]
ShortOpt = Annotated[bool, typer.Option("--short/--no-short", help="A question asking for a fact (which, what, who, where, when, how many) is answered with the span of the evidence the model finds likeliest first (a name, number, identifier, option), then one sentence. --no-short: the model's own words only.")]
LayeredOpt = Annotated[bool, typer.Option("--layered", help="kv mode: load a larger pool of retrieved blocks and let each model layer attend only to the blocks its own query selects (EM-LLM/InfLLM; needs epi's patched llama.cpp, see `epi doctor`). Reads blocks whole.")]
PoolOpt = Annotated[Optional[int], typer.Option("--pool", help="With --layered: tokens of retrieved blocks in the pool, 4,096-48,000 (default: what the answer context holds, ~7,000). A larger pool consults more of the archive: its blocks share positions in lanes (InfLLM), each layer still seeing 3,072 tokens of them; it costs memory (~23 KB a token with the bundled model) and loading time.", show_default=False)]
ColdOpt = Annotated[float, typer.Option("--cold-seconds", min=0, help="kv mode: the longest a question spends reading events whose KV blocks the answer model does not have yet (they are read from text); past that, passages that match the question are read (a matching sentence with the ones around it, the best first, wherever they lie), the rest left out and named. `epi warm` prepares the blocks ahead; 0: no limit.")]
ReadChoice = Enum("ReadChoice", {r: r for r in READ_CHOICES}, type=str)
ReadOpt = Annotated[ReadChoice, typer.Option("--read", help="How much an answer reads: `lookup` the best few passages; `whole` the part the question names (a chapter, section, file, class), whole; `overview` the map's summaries (`epi map`); `auto` chooses from the question.")]
KVBudgetOpt = Annotated[Optional[str], typer.Option("--kv-budget", help="Disk the store may use for KV blocks, all models together (e.g. `500MB`, `20GB`, `0`); kept in the store. Default 10GB.", show_default=False)]

def handle_errors(fn: Callable) -> Callable:
    """Every failure a user can cause ends as one line on stderr and a non-zero exit, never a traceback."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (EpiError, StoreError) as exc:
            render.error(str(exc))
            raise typer.Exit(1)
        except Terminated:
            render.error("terminated (SIGTERM); everything committed before it is kept")
            raise typer.Exit(143)
        except KeyboardInterrupt:
            render.error("interrupted; everything committed before the interruption is kept")
            raise typer.Exit(130)
        except BrokenPipeError:  # `epi ls --json | head`: the reader left, which is no failure (Click said 1)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is left to flush goes nowhere
            raise typer.Exit(0)
        except OSError as exc:
            render.error(f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc))
            raise typer.Exit(1)

    return wrapper


@app.command()
@handle_errors
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="PDF, EPUB, HTML, Word (.docx), text, Markdown, reST or GNU Info (.info) files, or folders of them and of code (walked recursively, honouring .gitignore).", show_default=False)],
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    min_tokens: Annotated[int, typer.Option(help="Smallest event, in tokens.", min=16)] = SegmentParams.min_tokens,
    max_tokens: Annotated[int, typer.Option(help="Largest event, in tokens.", min=16)] = SegmentParams.max_tokens,
    gamma: Annotated[float, typer.Option(help="Surprise threshold: mean + GAMMA x std of the last tokens (EM-LLM eq. 1).")] = SegmentParams.gamma,
    refine: Annotated[Refine, typer.Option(help="Boundary refinement (EM-LLM 3.3): each surprise cut may move back to the sentence or line end where the model's attention keys split best into two groups, judged by `modularity` or `conductance`; `none` keeps the surprise cuts.")] = Refine(SegmentParams.refine),
    kv_type: Annotated[KVType, typer.Option(help="How each event's KV block is stored for kv mode: q8_0 (about 12 KB/token with the bundled model), q4_0 (6.5 KB/token, less faithful) or f16 (23 KB/token, exact).")] = KVType(DEFAULT_KIND),
    kv: Annotated[bool, typer.Option("--kv/--no-kv", help="Keep KV blocks (fast answers in kv mode). --no-kv keeps only text: it sets the store's KV budget to 0 (answers in text mode).")] = True,
    kv_budget: KVBudgetOpt = None,
    commit_every: Annotated[int, typer.Option(min=1, help="Commit a long document every N events, so that an interrupted ingest resumes from there (run the same command again).")] = DEFAULT_COMMIT_EVERY,
    cluster: Annotated[Optional[str], typer.Option("--cluster", envvar="EPI_CLUSTER", help="Read the files on a Ray cluster's workers (this process writes the store): the head's HOST:PORT, or `local` to start one here on 127.0.0.1 (docs/cluster.md). Needs `pip install 'epi[cluster]'`.", show_default=False)] = None,
    workers: Annotated[Optional[int], typer.Option(min=1, help="With --cluster local: worker processes (default 2).", show_default=False)] = None,
    background: Annotated[bool, typer.Option("--background", help="Prepare the answer model's blocks and the map in a background process after reading, and return at once: ask while it warms (`epi warm --status` shows how far).")] = False,
    answer_model: Annotated[Optional[str], typer.Option("--answer-model", help="The model whose answers this ingest prepares for: default the answer model ($EPI_MODEL, else `epi config --answer-model`, else `qwen-1.5b` when installed; any name `epi models` lists). A model that answers as text only (sliding-window, recurrent) keeps no blocks: the fast reader reads for it. It reads the documents itself, keeping its KV blocks in the same pass, then writes the map; with `--model` or `--background` another model reads first and it prepares its blocks after (`epi warm`). `none`: the fast reader only (questions then read what they can from text, see `epi ask --cold-seconds`).", show_default=False)] = None,
    write_map: Annotated[bool, typer.Option("--map/--no-map", help="After the answer model's blocks, write the map of the new documents (`epi map`): summaries that questions about a whole chapter, file or book read; not for an answer model under a billion parameters, which looks every question up. --no-map leaves it for later.")] = True,
    watch: Annotated[bool, typer.Option("--watch", help="After reading, keep watching PATHS: added and changed files are read, removed or renamed ones leave the store with their KV blocks, until Ctrl-C. The store stays locked for other writers meanwhile; changed files get the answer model's blocks as they are read where it is the reader (otherwise it prepares them when asked, or by `epi warm`).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Read documents into the store: one llama.cpp pass per file, surprise-segmented events, embeddings.

    Unchanged files are skipped (content hash); a changed file replaces its old events. Each file is committed on
    its own, a long one every `--commit-every` events, so an error, Ctrl-C or a crash never loses the work already
    done; run the same command again to resume (inside a long file too).

    The answer model (`--answer-model`, by default Qwen2.5-Coder-1.5B when installed) reads the documents itself: it
    cuts the events where it is surprised and keeps each event's KV block in the same pass, so that questions load
    the blocks instead of re-reading text; then it writes the map. Blocks are kept while the store's KV budget
    (`--kv-budget`, default 10GB) allows. `--answer-model none` is the fast path: the bundled SmolLM2-135M reads,
    about 3x the speed, and questions read text (docs/benchmarks.md). `--background` reads with SmolLM2, returns, and
    prepares the answer model's blocks and the map in a background process while you ask (`epi warm --status` shows
    how far; answers reach full quality when it is done). `--model` (or $EPI_MODEL) names the reading model.
    """
    if min_tokens > max_tokens:
        raise EpiError("--min-tokens must not exceed --max-tokens")
    if max_tokens > MAX_EVENT_TOKENS:
        raise EpiError(f"--max-tokens must be at most {MAX_EVENT_TOKENS} (an event must fit the ingest window)")
    params = SegmentParams(gamma=gamma, min_tokens=min_tokens, max_tokens=max_tokens, refine=refine.value)
    spec = cluster_spec(cluster, workers, threads)  # None: read here
    found = list(discover(paths))
    if all(isinstance(f, Skipped) for f in found):  # say why before loading a model for nothing
        raise EpiError(nothing_to_ingest(found))
    budget_text = "0" if not kv else kv_budget
    budget = None if budget_text is None else parse_size(budget_text)  # a typo fails before the model loads
    Store.refuse_if_being_written(store_path(store))  # before the model loads
    # One reader: the answer model cuts the events and keeps its blocks in one pass, unless the read must be fast
    # (--background warms afterwards) or keeps no blocks (--no-kv).
    plan = plan_ingest(model, chosen_answer_model(answer_model), kv, background, write_map)
    ws = Workspace(plan.reading, store, threads, warn=render.warning)
    with render.status("loading model and embedder", quiet=as_json):
        st = ws.store_for_writing(params)
        ws.embedder.load(batches=True)  # before the progress bars start
    changes = watch_changes(paths) if watch else None
    if changes is not None:
        next(changes)  # the watcher runs from here on: nothing that changes during the first pass is missed
    results = []
    with ws.ingest_run(st, params, kv_type.value if kv else None, budget, commit_every, spec,
                       plan.reader_keeps_blocks) as ingestor:
        results += ingest_found(ingestor, found, as_json)
        gone = [] if changes else stored_but_gone(st, paths, found)  # the watch removes what goes itself
        if changes is not None:  # what the watch read is warmed and mapped too, once it stops
            results += follow_changes(st, ingestor, paths, changes, as_json)
    if not as_json:
        render.ingest_summary(results, st.path)
    ws.close()
    if gone:
        shown = ", ".join(printable(g) for g in gone[:3]) + (", ..." if len(gone) > 3 else "")
        render.warning(f"{len(gone)} stored document{'s' if len(gone) > 1 else ''} from "
                       f"{', '.join(str(p) for p in paths if p.is_dir())} {'are' if len(gone) > 1 else 'is'} no longer "
                       f"there (removed, renamed or now ignored): {shown}; `epi rm` drops "
                       f"{'them' if len(gone) > 1 else 'it'}, `epi ingest --watch` keeps a folder in step")
    new_docs = {r.path for r in results if r.status == "ingested"}
    if new_docs and plan.follows and background:  # every event without a block, then every part without a summary
        render.job_started(*background_job.start_or_join(store_path(store), plan.answering, threads,
                                                        plan.writes_map),
                           as_json=as_json)
    elif new_docs:
        if plan.prepares_blocks:
            warm_documents(plan.answering, store, threads, new_docs, as_json)
        if plan.writes_map:
            map_documents(plan.answering, store, threads, new_docs, as_json)
    if any(r.status == "failed" for r in results) or all(r.status == "skipped" for r in results):
        raise typer.Exit(1)


def stored_but_gone(st: Store, paths: list[Path], found: list) -> list[str]:
    """The display paths of stored documents under the folders ingested that this walk did not find: a file removed,
    renamed or now ignored stays in the store until `epi rm` (outside --watch, which removes them itself)."""
    roots = [str(p.resolve()) for p in paths if p.is_dir()]
    present = {str(item[0]) for item in found if not isinstance(item, Skipped)}
    return sorted(d.display_path for d in st.documents() if d.path not in present and
                  any(d.path.startswith(r.rstrip(os.sep) + os.sep) for r in roots))


def ingest_found(ingestor, found: list, as_json: bool) -> list:
    results = []
    with render.IngestProgressView(found, quiet=as_json) as view:
        for result in ingestor.ingest(found, view):
            results.append(result)
            if as_json:
                print(json.dumps(result.as_json()), flush=True)
    return results


def follow_changes(st: Store, ingestor, paths: list[Path], changes, as_json: bool) -> list:
    """`ingest --watch`: each batch of changes read or removed as it comes (engine/ingest/watch.py); Ctrl-C while
    waiting ends it quietly, during a file as any interrupted ingest does (what was committed is kept). Returns the
    results of the files it read."""
    render.info(f"watching {', '.join(str(p) for p in paths)} for changes (Ctrl-C stops)")
    results = []
    while True:
        try:
            touched = next(changes)
        except (KeyboardInterrupt, StopIteration):
            render.info("stopped watching")
            return results
        if not touched:
            continue
        batch = plan(st, paths, touched)
        for key, shown in batch.removed:
            st.remove_document(key)
            if as_json:
                print(json.dumps({"path": shown, "status": "removed"}), flush=True)
            else:
                render.info(f"- {shown}: removed (no longer in {', '.join(str(p) for p in paths)})")
        if batch.removed:
            st.collect_kv_garbage()  # the removed documents' blocks, in every model's tier
        if batch.found:
            results += ingest_found(ingestor, batch.found, as_json)
            ingestor.finish_run()


@app.command()
@handle_errors
def ask(
    question: Annotated[str, typer.Argument(help="Your question, in quotes.", show_default=False)],
    k: Annotated[int, typer.Option("-k", min=1, max=50, help="Events found by similarity, before their neighbours are added.")] = DEFAULT_K,
    mode: Annotated[Optional[Mode], typer.Option(help="`kv` loads the retrieved events' stored KV blocks (the default when the store has them); `text` re-reads their text.", show_default=False)] = None,
    neighbours: Annotated[int, typer.Option(min=0, max=3, help="Adjacent events added around each hit (temporal contiguity).")] = DEFAULT_NEIGHBOURS,
    epman: EpmanOpt = DEFAULT_EPMAN,
    doc: DocOpt = None,
    whole: Annotated[Optional[bool], typer.Option("--whole/--narrow", help="--whole reads the retrieved events whole (kv mode: their stored KV blocks); --narrow only the sentences that match the question best. Default: whole, except with the bundled SmolLM2-135M, which answers better from the narrowed sentences.", show_default=False)] = None,
    short: ShortOpt = DEFAULT_SHORT,
    second_look: SecondLookOpt = SECOND_LOOK,
    layered: LayeredOpt = DEFAULT_LAYERED,
    pool: PoolOpt = None,
    cold_seconds: ColdOpt = COLD_PREFILL_SECONDS,
    read: ReadOpt = ReadChoice(DEFAULT_READ),
    continue_: Annotated[bool, typer.Option("--continue", "-c", help="A follow-up to the last `epi ask` on this store: the answer model rewrites it into the standalone question it means (shown dimmed) for retrieval, and reads the earlier question and answer too.")] = False,
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    explain: Annotated[bool, typer.Option("--explain", help="Say how the answer was planned: the ways of reading tried, in order, why each, and which one answered (--json always has it, as `plan`).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Answer a question from the store, streaming the answer, then the quotes that support it and the sources.

    A question that names a chapter, section, page, file or code symbol ("in chapter 3", "section 2.4", "on page
    12", "in utils.py", "what does Cache.get return") is answered from that part of the archive. Asked about such a
    part as a whole ("summarise chapter 10", "who betrayed whom in chapter 3", "what does the cache module do"), it
    reads the whole part from its KV blocks; asked about a document or the archive as a whole ("what is this book
    about", "what does this library do") or about each part in turn ("what does each chapter cover"), it reads the
    map's summaries (`epi map`). `--read` overrides the choice.

    Example:  epi ask "what does the retry policy default to?" -k 5 --doc 'src/*.py'
    """
    archive = Archive(store, model, threads, warn=render.warning, on_prepare=render.prepare_progress(quiet=as_json))
    try:
        history = continued.last_turns(archive.store_dir) if continue_ else None
        if continue_ and not history:
            raise EpiError("--continue follows up the last `epi ask` on this store, and there is none yet; ask "
                           "the question on its own")
        # before any loading: a pasted page, or options that cannot run together, are refused at once
        request = AskRequest.build(question, history=history, k=k, mode=None if mode is None else mode.value,
                                   neighbours=neighbours, epman=epman, doc=doc,
                                   narrow=None if whole is None else not whole, layered=layered, pool=pool,
                                   short=short, second_look=second_look, cold_seconds=cold_seconds, read=read.value)
        archive.check(request)  # a typo in --doc, or a kv-only option on a store without blocks
        with render.status("loading model", quiet=as_json):
            archive.load(request)
        result, stream = archive.begin(request)
        if not as_json:
            render.scope(result.scope)
            render.reading(result)
            if explain:
                render.plan(result.plan_steps())
            render.left_cold(result, keeps_blocks=archive.store.kv_budget > 0)
        if as_json:
            for _ in stream:
                pass
            result.verify()  # the quotes checked by the answer model, before they are written out
            print(json.dumps(archive.record(result).as_json(), ensure_ascii=False))
        else:
            render.stream_answer(stream)
            with render.checking_evidence():
                result.verify()
            render.evidence(archive.record(result))
            render.sources(result.retrieved, grouped=result.kind is not QuestionKind.LOOKUP)
            render.timings(result)
        # a chain of follow-ups keeps the question it began at ("and then?" after "and him?")
        continued.remember(archive.store_dir, (history or []) + [
            {"role": "user", "content": question}, {"role": "assistant", "content": result.answer.text.strip()}])
    finally:
        archive.close()  # the model and contexts go, whatever stopped the answer


@app.command()
@handle_errors
def chat(
    k: Annotated[int, typer.Option("-k", min=1, max=50, help="Events found by similarity per question.")] = DEFAULT_K,
    epman: EpmanOpt = DEFAULT_EPMAN,
    doc: DocOpt = None,
    short: ShortOpt = DEFAULT_SHORT,
    second_look: SecondLookOpt = SECOND_LOOK,
    layered: LayeredOpt = DEFAULT_LAYERED,
    pool: PoolOpt = None,
    cold_seconds: ColdOpt = COLD_PREFILL_SECONDS,
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    prefetch: Annotated[bool, typer.Option("--prefetch/--no-prefetch", help="While you read an answer and type, prepare in the background the KV blocks a follow-up would likely read (what the answer left out, its neighbours, then the most asked-for). Off by default: on 2 cores it made follow-ups read more events from blocks but answer no sooner (docs/benchmarks.md).")] = False,
) -> None:
    """Talk to the archive: follow-up questions keep the conversation. Type /help inside for commands (`/doc GLOB`
    restricts the documents, like `--doc`)."""
    from .repl import run_repl

    check_pool(pool, layered)  # each question's AskRequest checks it too (repl.py); here before the model loads
    options = AskOptions(k=k, docs=doc, short=short, layered=layered, epman=epman, cold_seconds=cold_seconds,
                         second_look=second_look)
    ws = Workspace(model, store, threads, warn=render.warning, on_prepare=render.prepare_progress())
    ws.layered_pool = pool or 0
    try:
        with Store.open_existing(ws.store_dir) as st:
            check_doc_globs(st, doc)
            # the store's mode, checked against the options before the model loads; each question resolves it
            # again, as the store's KV budget may change during the chat
            preload = ws.resolve(st, options)
            with render.status("loading model"):
                ws.check_store(st)
                ws.embedder.load(batches=False)
                ws.answerer(preload.mode, st, preload.layered)
            run_repl(ws, st, options, pool, prefetch)
    finally:
        ws.close()


def refuse_without_kv_budget(st: Store) -> None:
    """Warming needs room for blocks: a store whose KV budget is 0 says how to give it some."""
    if st.kv_budget <= 0:
        raise EpiError("this store keeps no KV blocks (its KV budget is 0); set one with `epi config --kv-budget SIZE` "
                       "first")


def warm_documents(model: str, store: str | None, threads: int | None, documents: set[str] | None,
                   as_json: bool) -> None:
    """The answer model's blocks for `documents` (None: every document), with a progress bar and a summary."""
    ws = Workspace(model, store, threads, warn=render.warning)
    try:
        with Store.open_existing(ws.store_dir) as st:
            refuse_without_kv_budget(st)
            with render.status(f"loading {model} to prepare its KV blocks", quiet=as_json):
                ws.check_store(st)
                ws.answerer("kv", st)
            with render.token_progress(f"preparing {model}'s KV blocks", quiet=as_json) as progress:
                result = ws.warm(st, progress, documents)
        if as_json:
            print(json.dumps({"warm": model, **result.as_json()}), flush=True)
        else:
            render.warm_summary(result)
    finally:
        ws.close()


@app.command()
@handle_errors
def warm(
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    background: Annotated[bool, typer.Option("--background", help="Prepare the blocks, then write the map, in a background process, and return at once: ask meanwhile (what has no block yet is read from text).")] = False,
    status: Annotated[bool, typer.Option("--status", help="Show how far the background process is, and its ETA.")] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the background process; what it finished is kept.")] = False,
    write_map: Annotated[bool, typer.Option("--map/--no-map", help="With --background: write the map after the blocks.")] = True,
    job: Annotated[bool, typer.Option("--job", hidden=True, help="Run as the background process itself.")] = False,
    life_fd: Annotated[Optional[int], typer.Option("--life-fd", hidden=True, help="The descriptor of the job's life lock, handed over by the process that started it.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Prepare the answer model's KV blocks for the events that have none, so that questions load them instead of
    reading text first (with a larger model than the one that ingested, that is tens of seconds a question).

    The events earlier questions retrieved come first, most retrieved first, then the rest document by document,
    until every event has its block or the KV budget is full; Ctrl-C stops it and what
    is done is kept: run it again to go on. Examples:

      epi warm --model qwen-1.5b

      epi warm --background     (then: epi warm --status, epi warm --stop)
    """
    if sum((background, status, stop, job)) > 1:
        raise EpiError("use one of --background, --status and --stop at a time")
    if status or stop:
        with Store.open_existing(store_path(store)) as st:  # a missing store fails here, plainly
            store_dir = st.path
        shown = background_job.stop_job(store_dir) if stop else background_job.job_status(store_dir)
        render.job(shown, as_json, stopping=stop)
        return
    chosen = chosen_answer_model(model)
    if job:
        result = background_job.run_job(store_path(store), chosen, threads, write_map, life_fd)
        raise typer.Exit(0 if result.phase == "done" else 1)
    if background:
        with Store.open_existing(store_path(store)) as st:
            refuse_without_kv_budget(st)
            resolve_model_source(chosen, render.warning)  # a model that is not there fails here, not in the job
            started = background_job.start_job(st.path, chosen, threads, write_map)
        render.job_started(started, as_json=as_json)
        return
    warm_documents(chosen, store, threads, None, as_json)


@app.command("map")
@handle_errors
def map_command(
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the map: the answer model summarises each chapter, section and code file from its KV blocks (and the
    sections inside a chapter, a line or two each), then each document from its parts' summaries, then each
    ingested folder from its documents'. Questions about the whole ("what is this book about", "what does this
    library do", "what does each section of chapter 3 cover") search them, by meaning and by words, and cite them
    as summaries; lookups read the passages themselves.

    `epi ingest` writes the map of new documents itself (`--no-map` skips it). Resumable: Ctrl-C or a crash keeps
    what is written, and running it again goes on without summarising anything twice; a changed document's
    summaries are written again. Example:  epi map --model qwen-1.5b
    """
    map_documents(chosen_answer_model(model), store, threads, None, as_json)


def map_documents(model: str, store: str | None, threads: int | None, documents: set[str] | None,
                  as_json: bool) -> None:
    """The map of `documents` (None: every document), with progress, ETA and a summary line."""
    Store.refuse_if_being_written(store_path(store))
    ws = Workspace(model, store, threads, warn=render.warning)
    try:
        with Store.open_existing(ws.store_dir) as st:
            with render.status(f"loading {model} to write the map", quiet=as_json):
                ws.check_store(st)
                ws.embedder.load(batches=False)
                ws.map_answerer(st)
            with render.map_progress(quiet=as_json) as progress:
                result = ws.write_map(st, progress, documents)
        if as_json:
            print(json.dumps({"map": model, **result.as_json()}), flush=True)
        else:
            render.map_summary(result)
    finally:
        ws.close()


@app.command("mcp")
@handle_errors
def mcp_command(
    http: Annotated[Optional[int], typer.Option("--http", min=1, max=65535, metavar="PORT", help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio.", show_default=False)] = None,
    store: StoreOpt = None,
    model: ModelOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Serve the store to AI assistants and editors over the Model Context Protocol (stdio; `--http PORT` for
    streamable HTTP on localhost). The model stays loaded between calls.

    Tools: `search`, `ask` (streams the answer as progress), `read_event`, `list_documents`, `summary`; each
    document's outline is a resource. Questions run one at a time. The setup for Claude Desktop, Claude Code,
    Cursor and VS Code is in docs/usage.md ("MCP server"). Example:  claude mcp add epi -- epi mcp --store books
    """
    try:
        from .mcp_server import serve
    except ImportError as exc:
        if "mcp" not in str(exc):
            raise
        raise EpiError("`epi mcp` needs the MCP SDK, which is not installed: pip install 'epi[mcp]' (./install.sh "
                       "installs it)") from None
    serve(store, model, threads, http)


@app.command("ls")
@handle_errors
def list_documents(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """List the documents in the store with their events and tokens, the archive's size, and each model's KV tier
    against the store's KV budget."""
    with Store.open_existing(store_path(store)) as st:
        docs, stats = st.documents(), st.stats()
        tiers = st.kv_space().usage()
        kv = {"kv_budget_bytes": st.kv_budget, "kv_used_bytes": sum(t.bytes for t in tiers),
              "kv_tiers": [{"tier": t.tier_id, "model": t.config.model_name if t.config else None,
                            "block_kind": t.config.block_kind if t.config else None, "blocks": t.n_blocks,
                            "kv_used_bytes": t.bytes} for t in tiers]}
        job = background_job.job_status(st.path)
        if as_json:
            print(json.dumps({"store": str(st.path), "background_job": None if job is None else job.as_json(),
                              "documents": [
                {"path": d.display_path, "kind": d.kind, "format": document_format(d.kind, d.display_path),
                 "tokens": d.n_tokens, "events": d.n_events, "pages": d.n_pages,
                 "lines": None if d.kind in BLOCK_KINDS else d.n_lines,
                 "blocks": d.n_lines if d.kind in BLOCK_KINDS else None, "status": d.status} for d in docs],
                **{k: v for k, v in stats.items() if k != "path"}, **kv}))
        else:
            render.documents(docs, stats, kv)
            if job is not None and job.running:
                render.job(job, as_json=False)


@app.command()
@handle_errors
def show(
    event_id: Annotated[int, typer.Argument(help="An event id, as printed by `epi ask` sources or `--json`.", max=2**63 - 1, show_default=False)],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one event: its text exactly as extracted, where it comes from, and its surprise statistics."""
    with Store.open_existing(store_path(store)) as st:
        events = st.get_events([event_id])
        if not events:
            raise EpiError(unknown_event(event_id, st.path))
        ev = events[0]
        doc = st.get_document(ev.document_id)
        if as_json:
            print(json.dumps({"event_id": ev.id, "document": doc.display_path, "ordinal": ev.ordinal,
                              "page_start": ev.page_start, "page_end": ev.page_end, "line_start": ev.line_start,
                              "line_end": ev.line_end, "tokens": ev.token_end - ev.token_start,
                              "section": describe_section(decode_section(ev.section)),
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
        documents = st.documents()
        stored = {d.path for d in documents}
        by_display: dict[str, set[str]] = {}  # two files ingested from different folders may show the same name
        for d in documents:
            for shown in {d.display_path, printable(d.display_path)}:  # a name as `ls` escapes it, too
                by_display.setdefault(shown, set()).add(d.path)
        missing = []
        for p in paths:
            resolved = str(Path(p).expanduser().resolve())
            named = by_display.get(p, set())
            if resolved in stored:  # the file's own path names one document, whatever else shows the same name
                key = resolved
            elif len(named) > 1:
                raise EpiError(f"{p} names {len(named)} documents ({', '.join(sorted(named))}); give the one to "
                               "remove by its full path")
            else:
                key = next(iter(named), resolved)
            if st.remove_document(key):
                render.info(f"removed {p}")
            else:
                missing.append(p)
        st.collect_kv_garbage()  # their KV blocks, in every model's tier
    if missing:
        raise EpiError(f"not in the store: {', '.join(missing)} (see `epi ls`)")


@app.command()
@handle_errors
def compact(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Give disk space back: remove KV blocks no event names any more and shrink the database after removals.

    `epi ingest` and `epi rm` remove the KV blocks of replaced or removed documents on their own; this also rewrites
    the database file (SQLite VACUUM), which needs about its size in free disk while it runs.
    """
    with Store.open_existing(store_path(store)) as st, st.writer():
        db_before = st.stats()["disk_bytes"]
        with render.status("compacting", quiet=as_json):
            blocks, block_bytes = st.collect_kv_garbage()
            st.vacuum()
        db_after = st.stats()["disk_bytes"]
        if as_json:
            print(json.dumps({"store": str(st.path), "blocks_removed": blocks, "kv_reclaimed_bytes": block_bytes,
                              "db_bytes_before": db_before, "db_bytes_after": db_after}))
        else:
            render.compaction(blocks, block_bytes, db_before, db_after)


@app.command()
@handle_errors
def reembed(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Embed a store made by an older epi again, with the embedder windows new stores get.

    Stores made before this epi cut long events into 160-word windows, which in code often run past the 256 word
    pieces the embedder reads, so a long event's tail was not searchable by meaning. Such a store keeps working as
    it is (`epi doctor` says which windows it uses); this gives it the new windows. Only the vectors change: no
    document is read again and no KV block is touched. It takes about 40 s per 100k tokens on 2 cores;
    Ctrl-C leaves the store as it was.
    """
    Store.refuse_if_being_written(store_path(store))
    ws = Workspace(store=store, warn=render.warning)
    try:
        with Store.open_existing(ws.store_dir) as st:
            before = st.identity.embedder
            with render.reembed_progress(quiet=as_json) as progress:
                result = ws.reembed(st, progress)
            if as_json:
                print(json.dumps({"store": str(st.path), "embedder_before": before, "embedder": st.identity.embedder,
                                  "embedded": result.done if result.written else 0,
                                  "seconds": round(result.seconds, 1)}))
            else:
                render.reembed_summary(result, st.identity.embedder)
    finally:
        ws.close()


@app.command()
@handle_errors
def config(
    store: StoreOpt = None,
    kv_budget: KVBudgetOpt = None,
    default_model: Annotated[Optional[str], typer.Option("--answer-model", help="Make this model answer by default (any name `epi models` lists, or a .gguf file); `default` goes back to the installed default. --model and $EPI_MODEL still win.")] = None,
    model_folder: Annotated[Optional[list[str]], typer.Option("--model-folder", help="A folder `epi models` and --model search for .gguf files (repeatable); `--model-folder -PATH` removes one.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the store's settings and yours, or change them.

    Example:  epi config --kv-budget 20GB     (lowering it evicts least recently used KV blocks at once)
              epi config --answer-model qwen2.5:7b     (a model Ollama keeps answers from now on)
    """
    user = change_model_settings(default_model, model_folder or [], render.warning)
    user_values = {"answer_model": chosen_answer_model(), "model_folders": user.model_folders}
    path = store_path(store)
    if kv_budget is None and not path.is_dir():  # nothing ingested yet: the user's settings alone
        if as_json:
            print(json.dumps(user_values))
        else:
            render.settings(user_values)
        return
    evicted = 0
    with Store.open_existing(path) as st:
        if kv_budget is not None:
            with st.writer():
                evicted = apply_kv_budget(st, parse_size(kv_budget))
        settings = {"store": str(st.path), "kv_budget_bytes": st.kv_budget, "kv_evicted_bytes": evicted,
                    "kv_block_kind": st.kv_block_kind,
                    "kv_used_bytes": st.kv_space().used_bytes(), "embedder": st.identity.embedder,
                    "segmenter": st.identity.segmenter.get("model_name"), "segmentation": st.identity.segmentation,
                    **user_values}
        if as_json:
            print(json.dumps(settings))
        else:
            render.settings(settings)
            if evicted:  # a bare number is bytes: "--kv-budget 20" keeps nothing, and says so
                render.warning(f"the new budget evicted {evicted / 1e6:,.1f} MB of KV blocks (least recently used "
                               "first); sizes without a unit are bytes")


@app.command()
@handle_errors
def models(
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List every model epi can answer with: its own, and those Ollama, LM Studio and the Hugging Face cache keep
    (and the folders `epi config --model-folder` names), read in place, never changed.

    Each shows its architecture, size, quantization, context, KV bytes per token at the store's block type, how many
    tokens the store's KV budget holds for it, the memory it needs, and how it answers: from KV blocks, as text only
    (a model whose KV cannot be cut into event blocks re-reads the retrieved events), or not at all.

    Example:  epi models            then   epi ask --model qwen2.5:7b "..."   or   epi config --answer-model qwen2.5:7b
    """
    from .engine.llama.model_catalog import list_models, machine

    kind, budget = DEFAULT_KIND, DEFAULT_KV_BUDGET_BYTES
    path = store_path(store)
    if path.is_dir():
        try:
            with Store.open_existing(path) as st:
                kind, budget = st.kv_block_kind or DEFAULT_KIND, st.kv_budget
        except StoreError:
            pass  # no store yet, or one being written: the defaults say what a new store would hold
    where = machine()
    rows = [m.as_json(kind, budget, where["memory_bytes"], where["gpu_offload"]) for m in list_models()]
    if as_json:
        print(json.dumps({"machine": where, "kv_block_kind": kind, "kv_budget_bytes": budget, "models": rows}))
    else:
        render.models(rows, where)


@app.command()
@handle_errors
def doctor(
    store: StoreOpt = None,
    model: ModelOpt = None,
    quick: Annotated[bool, typer.Option("--quick", help="Skip reading every KV block and answer model file to verify their checksums.")] = False,
    repair: Annotated[bool, typer.Option("--repair", help="Remove the KV blocks and assembled answer models that fail their check; blocks are prepared again from text, models assembled again from their packages, when next needed.")] = False,
) -> None:
    """Check the installation: versions, CPU features and threads, GPU offload, model, embedder and store health,
    and every stored KV block's checksum (`--quick` skips that)."""
    from .engine.diagnostics import collect

    progress = lambda total: render.byte_progress("verifying KV blocks", total)  # noqa: E731
    ok = render.doctor(collect(model, store, verify_blocks=not quick, repair=repair, progress=progress))
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


def _terminate(signum, frame) -> None:
    raise Terminated()


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)  # like Ctrl-C: commits kept, one line said, exit 128 + 15
    try:
        app()
    except BrokenPipeError:  # `epi ask ... | head` closes stdout early
        sys.stderr.close()
        sys.exit(0)
