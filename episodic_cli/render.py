"""Everything epi draws on the terminal (rich). Status and progress go to stderr so that stdout stays clean."""
from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from .engine.answer.records import SecondLook
from .engine.retrieval.citations import citation, place, printable
from .engine.ingest.pipeline import IngestResult
from .engine.retrieval.retrieve import RetrievedEvent
from .background import BUSY, JOINED, STARTED
from .run_progress import RunProgress
from .engine.documents.blocks import BLOCK_KINDS
from .engine.documents.sources import EMPTY_FILE, Skipped, document_format

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)


def error(message: str) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)  # one line even when piped (80 cols)


def warning(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)


def info(message: str) -> None:
    err.print(escape(message))


@contextlib.contextmanager
def status(message: str, quiet: bool = False) -> Iterator[None]:
    if quiet or not err.is_terminal:
        yield
        return
    with err.status(f"{message}..."):
        yield


def _size(n: float) -> str:
    """Bytes in decimal units, as `--kv-budget` reads them and disks are sold: 10**10 -> "10 GB", 12_244 ->
    "12.2 KB"."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("KB", "MB", "GB", "TB"):
        n /= 1000
        if round(n, 1) < 1000 or unit == "TB":
            return f"{n:,.1f}".removesuffix(".0") + f" {unit}"
    return ""


@contextlib.contextmanager
def byte_progress(description: str, total: int, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """A bar in bytes (speed, ETA) that disappears when done; yields advance(n_bytes)."""
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
        task = progress.add_task(description, total=max(total, 1))
        yield lambda n: progress.update(task, advance=n)


@contextlib.contextmanager
def token_progress(description: str, quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """A bar in tokens (rate, ETA) that disappears when done; yields update(done, total)."""
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("tokens"),
                  TimeRemainingColumn(), console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
        task = progress.add_task(description, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=max(total, 1))


@contextlib.contextmanager
def map_progress(quiet: bool = False) -> Iterator[Callable]:
    """The map's bar: tokens of parts summarised (rate, ETA) and summaries written; yields update(MapProgress)."""
    with Progress(TextColumn("writing the map ({task.fields[stage]})"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("tokens"), TextColumn("{task.fields[written]} summaries"), TimeRemainingColumn(),
                  console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
        task = progress.add_task("map", total=None, written=0, stage="parts")
        yield lambda state: progress.update(task, completed=state.tokens_done, total=max(state.tokens_total, 1),
                                            written=state.written, stage=state.stage)


@contextlib.contextmanager
def reembed_progress(quiet: bool = False) -> Iterator[Callable]:
    """Events and summaries embedded again (rate, ETA); yields update(ReembedProgress)."""
    with Progress(TextColumn("embedding again"), BarColumn(), MofNCompleteColumn(), TextColumn("events"),
                  TimeRemainingColumn(), console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
        task = progress.add_task("reembed", total=None)
        yield lambda state: progress.update(task, completed=state.done, total=max(state.total, 1))


def reembed_summary(result, embedder: str) -> None:
    if not result.written:
        err.print(escape(f"nothing to do: the store is embedded with {embedder} already"), soft_wrap=True)
        return
    err.print(escape(f"embedded {result.done:,} events and summaries again in {_duration(result.seconds)}; the "
                     f"store's embedder is now {embedder}"), soft_wrap=True)


def map_summary(result) -> None:
    levels = ", ".join(f"{n} {level}" for level, n in result.per_level.items() if n)
    line = (f"wrote {result.written:,} summaries ({levels or 'none'}) in {_duration(result.seconds)}"
            if result.written else "wrote no summaries" if result.missed else
            "the map is up to date: every part already has its summary")
    if result.skipped and result.written:
        line += f"; {result.skipped:,} parts were summarised already"
    if result.missed:
        line += (f"; {result.missed:,} parts got no summary (the model wrote nothing, or their document changed "
                 "meanwhile): run `epi map` again")
    if result.stopped:
        line += f"; stopped ({result.stopped}): run `epi map` again to go on"
    err.print(escape(line), soft_wrap=True)


def warm_summary(result) -> None:
    if not result.events_to_do:
        err.print("every event already has its KV block for this model")
        return
    rate = result.tokens_done / result.seconds if result.seconds > 0 else 0.0
    line = (f"prepared {result.events_kept:,} of {result.events_to_do:,} events' KV blocks "
            f"({result.tokens_done:,} tokens in {_duration(result.seconds)}, {rate:,.0f} tokens/s)")
    if result.stopped:
        line += f"; stopped: {result.stopped} (raise it with `epi config --kv-budget SIZE`)"
    err.print(escape(line), soft_wrap=True)


def job_started(status, how: str = STARTED, as_json: bool = False) -> None:
    """`how`: started, joined (a job already running for this model takes these documents up too) or busy (one runs
    for another model)."""
    if as_json:
        print(json.dumps({"background_job": {**status.as_json(), "how": how}}), flush=True)
        return
    if how == BUSY:
        err.print(escape(f"a background job for {status.model} runs on this store (pid {status.pid}); when it is done, "
                         "`epi warm --background` prepares the new documents' blocks"), soft_wrap=True)
        return
    what = (f"the background job already running (pid {status.pid}) prepares {status.model}'s KV blocks and the map "
            "for these documents too" if how == JOINED else
            f"preparing {status.model}'s KV blocks, then the map, in the background (pid {status.pid})")
    err.print(escape(f"{what}: ask now (what has no block yet is read from text); `epi warm --status` shows how far"),
              soft_wrap=True)


def job(status, as_json: bool, stopping: bool = False) -> None:
    """The background job's state (`epi warm --status`, `--stop`, and a line of `epi ls` while it runs)."""
    if as_json:
        print(json.dumps({"background_job": None if status is None else status.as_json()}), flush=True)
        return
    if status is None:
        err.print("no background job has run on this store (`epi warm --background` starts one)")
        return
    if stopping and not status.running:
        err.print(escape(f"the background job is not running: {job_line(status)}"), soft_wrap=True)
        return
    err.print(escape(job_line(status)), soft_wrap=True)


def job_line(status) -> str:
    what = f"{status.model} in the background (pid {status.pid})"
    if status.running:
        line = f"{what}: {status.phase}"
        if status.tokens_total:
            line += (f", {status.tokens_done:,} of {status.tokens_total:,} tokens "
                     f"({100 * status.tokens_done / status.tokens_total:.0f}%)")
            eta = status.eta_seconds()
            line += f", about {_duration(eta)} left" if eta is not None else ""
        return line
    line = f"{what}: {status.phase} after {_duration(status.updated - status.started)}"
    parts = [f"{status.blocks_kept:,} blocks prepared"] + (
        [f"{status.summaries_written:,} summaries written"] if status.summaries_written else [])
    line += " (" + ", ".join(parts) + ")"
    return line + (f"; {status.message}" if status.message else "")


def left_cold(result, keeps_blocks: bool = True) -> None:
    """Say which retrieved events the answer read only in part, or left out, because their blocks are not prepared
    yet."""
    if not result.left_cold and not result.cold_passages:
        return
    short = len(result.cold_passages)
    whole = len(result.retrieved) - short
    tokens = sum(r.n_tokens for r in result.left_cold + result.cold_passages)
    parts = [f"read {whole} of {whole + short + len(result.left_cold)} retrieved events whole"]
    if short:
        parts.append(f"{short} as the passages that match the question")
    if result.left_cold:
        parts.append(f"left out {len(result.left_cold)}")
    if keeps_blocks:
        warning(f"{', '.join(parts)}: their KV blocks for this model are not prepared yet ({tokens:,} tokens to read "
                "from text first); `epi warm` prepares them, `--cold-seconds 0` reads them whole now")
    else:  # a KV budget of 0: `epi warm` would refuse
        warning(f"{', '.join(parts)}: this store keeps no KV blocks ({tokens:,} tokens to read from text first); "
                "`--cold-seconds 0` reads them whole now, `epi config --kv-budget SIZE` lets blocks be kept")


def compaction(blocks: int, block_bytes: int, db_before: int, db_after: int) -> None:
    line = (f"removed {blocks:,} unused KV block(s) ({_size(block_bytes)}); database and index "
            f"{_size(db_before)} → {_size(db_after)}")
    err.print(escape(line), soft_wrap=True)


def prepare_progress(quiet: bool = False) -> Callable[[int, int], None]:
    """kv mode's cold events (no stored block for this model yet) are prefilled from text before the answer starts;
    on a big model on a CPU that takes seconds, so a line says so at once and, after the first second, how far it
    is."""
    started: list[float] = []

    def show(done: int, total: int) -> None:
        if quiet or not err.is_terminal or total <= 0:
            return
        now = time.monotonic()
        if not started:
            started.append(now)
        elapsed = now - started[0]
        if done == 0:  # at once: a big model's first batch alone may take seconds
            err.file.write(f"preparing events not yet in the KV cache: {total:,} tokens\r")
            err.file.flush()
        elif elapsed >= 1.0:
            eta = (total - done) * elapsed / max(done, 1)
            end = "\n" if done >= total else "\r"
            err.file.write(f"preparing events not yet in the KV cache: {done:,} of {total:,} tokens "
                           f"(~{eta:.0f} s left)    {end}")
            err.file.flush()
        if done >= total:
            started.clear()

    return show


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _count(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e4 else f"{n:,.0f}"


class IngestProgressView:
    """Two bars: the current file in tokens and the whole run in files and tokens, with the run's tokens/s and the
    time left (run_progress.py: files not reached yet are estimated from their size, marked "~")."""

    def __init__(self, found: list, quiet: bool = False):
        self.quiet = quiet
        sizes = {}
        for f in found:
            if not isinstance(f, Skipped):
                with contextlib.suppress(OSError):
                    sizes[f[1]] = os.path.getsize(f[0])
        self.run = RunProgress(sizes)
        self.progress = Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), TaskProgressColumn(),
            TextColumn("{task.fields[count]}"), TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[left]}"),
            # Bars only on a terminal: piped, rich would print their final frame into the log.
            console=err, transient=False, disable=quiet or not err.is_terminal,
        )
        self.overall = None
        self.current = None

    def __enter__(self) -> "IngestProgressView":
        self.progress.__enter__()
        self.overall = self.progress.add_task(f"all {self.run.files_total} files", total=1, count="", rate="",
                                              left="")
        self._draw_overall()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def _draw_overall(self) -> None:
        run = self.run
        total, done = run.tokens_total, run.tokens_completed
        rate = run.tokens_per_s
        approx = "~" if run.estimated else ""
        self.progress.update(
            self.overall, total=max(total, 1), completed=min(done, total),
            count=f"{run.files_done}/{run.files_total} files, {_count(done)}/{approx}{_count(total)} tokens",
            rate=f"{rate:,.0f} tok/s" if rate else "", left=f"ETA {approx}{_duration(run.seconds_left)}")

    def document_reading(self, display_path: str, page: int, pages: int) -> None:
        """OCR reading a scanned PDF's pages (seconds each), in the current file's bar."""
        if self.current is None:
            self.current = self.progress.add_task(display_path[-48:], total=max(pages, 1), completed=0,
                                                  count="", rate="", left="")
        self.progress.update(self.current, total=max(pages, 1), completed=page - 1,
                             count=f"OCR: page {page:,} of {pages:,}")

    def document_counting(self, display_path: str, chars_done: int, chars_total: int) -> None:
        """The counting pass before a file's tokens are known: its characters, in the current file's bar."""
        if self.current is None:
            self.current = self.progress.add_task(printable(display_path)[-48:], total=max(chars_total, 1), completed=0,
                                                  count="", rate="", left="")
        self.progress.update(self.current, total=max(chars_total, 1), completed=chars_done,
                             count=f"counting tokens: {_count(chars_done)}/{_count(chars_total)} characters")

    def document_started(self, display_path: str, n_tokens: int, resumed_at: int = 0) -> None:
        if self.current is not None:
            self.progress.remove_task(self.current)
        self.run.document_started(display_path, n_tokens, resumed_at)
        self.current = self.progress.add_task(printable(display_path)[-48:], total=n_tokens, completed=resumed_at,
                                              count=f"{resumed_at:,}/{n_tokens:,} tokens", rate="", left="")
        self._draw_overall()
        if resumed_at and not self.quiet:
            self.progress.console.print(escape(f"resuming {printable(display_path)} at token {resumed_at:,} of "
                                               f"{n_tokens:,}"), soft_wrap=True)

    def tokens_done(self, n: int) -> None:
        self.run.tokens_done(n)
        if self.current is not None and self.run.current is not None:
            done, total = self.run.current
            rate = self.run.tokens_per_s
            left = (total - done) / rate if rate else None
            self.progress.update(self.current, completed=done, count=f"{done:,}/{total:,} tokens",
                                 left=_duration(left))
        self._draw_overall()

    def document_finished(self, result: IngestResult) -> None:
        if self.current is not None:
            self.progress.remove_task(self.current)
            self.current = None
        self.run.document_finished(result.display_path, result.tokens if result.status == "ingested" else 0)
        self._draw_overall()
        if self.quiet:
            return
        # soft_wrap: one line per file even when piped (rich would otherwise wrap at 80 columns, mid-number).
        if result.status == "ingested":
            err.print(f"[green]✓[/] {escape(printable(result.display_path))}: {result.tokens:,} tokens, {result.events} events, "
                      f"{result.seconds:.1f} s ({result.tokens_per_s:,.0f} tok/s)", soft_wrap=True)
            if result.note:
                err.print(f"  [yellow]{escape(result.note)}[/]", soft_wrap=True)
        elif result.status == "unchanged":
            err.print(f"[dim]= {escape(printable(result.display_path))}: unchanged, skipped[/]", soft_wrap=True)
        elif result.status == "skipped" and result.error == EMPTY_FILE:  # an empty __init__.py is not news
            err.print(f"[dim]- {escape(printable(result.display_path))}: empty, skipped[/]", soft_wrap=True)
        elif result.status == "skipped":
            err.print(f"[yellow]- {escape(printable(result.display_path))}: skipped ({escape(result.error or '')})[/]", soft_wrap=True)
        else:
            err.print(f"[red]✗ {escape(printable(result.display_path))}: {escape(result.error or 'failed')}[/]", soft_wrap=True)


def ingest_summary(results: list[IngestResult], store_dir: Path) -> None:
    counts = {s: sum(r.status == s for r in results) for s in ("ingested", "unchanged", "skipped", "failed")}
    tokens = sum(r.tokens for r in results if r.status == "ingested")
    parts = [f"{v} {k}" for k, v in counts.items() if v]
    err.print(f"{', '.join(parts)}; {tokens:,} new tokens in store {escape(str(store_dir))}", soft_wrap=True)
    if counts["ingested"] or counts["unchanged"]:
        err.print('next: [bold]epi ask "your question"[/] or [bold]epi chat[/]')


def stream_answer(stream: Iterable[str], shown: list[str] | None = None) -> str:
    """Print the answer as it streams; `shown` collects the pieces printed, so that a caller stopped by Ctrl-C
    keeps what the user saw (after a second look, the answer read again once it has begun)."""
    shown = [] if shown is None else shown
    set_aside: list[str] = []
    try:
        for piece in stream:
            if isinstance(piece, SecondLook):  # the answer so far is set aside: what follows replaces it
                set_aside[:], shown[:] = shown, []
                out.print("\n[dim]No sentence of the sources holds that answer; read again from the passages that "
                          "match the question best:[/]")
                continue
            shown.append(piece)
            out.print(piece, end="", markup=False)
    finally:  # stopped before the second answer said anything (or it said nothing): the first is what was seen
        if set_aside and not "".join(shown).strip():
            shown[:] = set_aside
    out.print()
    return "".join(shown)


@contextlib.contextmanager
def checking_evidence() -> Iterator[None]:
    """A spinner while the answer model checks the quotes (result.verify(): about a second a sentence)."""
    with out.status("checking the evidence, sentence by sentence", spinner="dots"):
        yield


def evidence(answer) -> None:
    """The quotes that support an answer (api.Answer), under it, with the answer's own words highlighted; or, when
    no sentence of the sources holds them, a plain statement that the answer is not sourced. An answer of several
    sentences is shown sentence by sentence instead (as result.verify() judged them)."""
    if len(answer.sentences) > 1:
        sentence_evidence(answer.sentences)
        return
    if not answer.supported:
        out.print("\n[bold yellow]Not supported by the sources:[/] [yellow]no sentence in them holds what this answer "
                  "says; read the passages below before trusting it.[/]")
        if answer.evidence:
            out.print("[dim]Closest to the question:[/]")
    else:
        out.print("\n[bold]Evidence[/]")
    for q in answer.evidence:
        _quote(q)


def sentence_evidence(sentences) -> None:
    """Each sentence of a long answer, then the quote that supports it, or a mark that none does."""
    backed = sum(s.supported for s in sentences)
    out.print(f"\n[bold]Evidence, sentence by sentence[/] [dim]({backed} of {len(sentences)} supported)[/]")
    for s in sentences:
        if s.supported:
            # a check that applied and did not run: the quote shares the sentence's words, nothing more is known
            unchecked = " [dim](quote not checked by the model)[/]" if s.checked is False else ""
            out.print(f"[green]✓[/] {escape(s.sentence)}{unchecked}", soft_wrap=True)
            for q in s.quotes:
                _quote(q)
        elif s.doubted:
            out.print(f"[yellow]? {escape(s.sentence)}[/]\n   [dim yellow]the closest quote may not say this; read it "
                      "before trusting the sentence:[/]", soft_wrap=True)
            for q in s.quotes:
                _quote(q)
        else:
            out.print(f"[yellow]? {escape(s.sentence)}[/]\n   [dim yellow]no sentence in the sources holds this[/]",
                      soft_wrap=True)


def _quote(q) -> None:
    """One supporting quote (api.Quote), the answer's words highlighted, with where it is."""
    quote, marked, at = " ".join(q.quote.split()), "", 0
    # highlight offsets refer to the quote as stored; map them onto the whitespace-squashed form shown
    squashed = []
    for a, b in q.highlight:
        word = q.quote[a:b]
        k = quote.find(word, at)
        if k >= 0:
            squashed.append((k, k + len(word)))
            at = k + len(word)
    at = 0
    for a, b in squashed:
        marked += escape(quote[at:a]) + f"[bold yellow]{escape(quote[a:b])}[/]"
        at = b
    marked += escape(quote[at:])
    origin = "" if q.event_id is None else f", event {q.event_id}"
    out.print(f" [cyan]“[/]{marked}[cyan]”[/]\n   [dim]{escape(q.citation)}{origin}[/]", soft_wrap=True)


def sources(retrieved, grouped: bool = False) -> None:
    """The sources, numbered; `grouped` (an answer that read a whole part): runs of consecutive events of a document
    as one line each, since a chapter read whole is tens of events."""
    if not retrieved:
        out.print("[dim]no sources: the store has no events that match[/]")
        return
    if grouped:
        runs: list[list] = []
        for r in retrieved:
            last = runs[-1][-1] if runs else None
            if (last is not None and r.summary is None and last.summary is None
                    and last.document.id == r.document.id and r.event.ordinal == last.event.ordinal + 1):
                runs[-1].append(r)
            else:
                runs.append([r])
        if len(runs) < len(retrieved):
            out.print("\n[bold]Sources[/]")
            for i, run in enumerate(runs, 1):
                first, last = run[0], run[-1]
                if first.summary is not None or len(run) == 1:
                    ident = "" if first.summary is not None else f"  [dim]event {first.event.id}[/]"
                    out.print(f" [cyan][{i}][/] {escape(citation(first))}{ident}")
                    continue
                out.print(f" [cyan][{i}][/] {escape(_run_citation(run))}  [dim]events {first.event.id}-"
                          f"{last.event.id} ({sum(r.n_tokens for r in run):,} tokens)[/]")
            return
    out.print("\n[bold]Sources[/]")
    for i, r in enumerate(retrieved, 1):
        excerpt = " ".join(r.event.text.split())
        excerpt = excerpt[:140] + ("…" if len(excerpt) > 140 else "")
        if r.summary is not None:
            out.print(f" [cyan][{i}][/] {escape(citation(r))}  [dim]{escape(r.summary.model.split()[0])}[/]\n"
                      f"     {escape(excerpt)}")
            continue
        mark = "" if r.score is not None else " [dim](neighbour)[/]"
        out.print(f" [cyan][{i}][/] {escape(citation(r))}{mark}  [dim]event {r.event.id}[/]\n     {escape(excerpt)}")


def reading(result) -> None:
    """What a whole-scope or overview answer read ("read all of ch. 12, 7,930 tokens"), and a chat follow-up's
    rewrite, dimmed: what was searched for is visible, so a rewrite that drifted is seen."""
    if getattr(result, "search", None):
        err.print(f"[dim]searched as: {escape(result.search)}[/]", soft_wrap=True)
    if getattr(result, "reading", None):
        err.print(f"[dim]{escape(result.reading)}[/]", soft_wrap=True)


def plan(steps: list[dict] | None) -> None:
    """`epi ask --explain`: the ways of reading the plan tried, in order, why each is there and what became of it
    (engine/ask_plan.py), dimmed: a fallback taken is seen."""
    if not steps:
        return
    err.print(f"[dim]plan: {escape(' -> '.join(s['way'] for s in steps))}[/]", soft_wrap=True)
    for n, s in enumerate(steps, 1):
        became = s["outcome"] + (f": {s['why_not']}" if s.get("why_not") else "")
        err.print(f"[dim] {n}. {escape(s['way'])}: {escape(s['reason'])} ({escape(became)})[/]", soft_wrap=True)


def _run_citation(run) -> str:
    """A run of consecutive events: the first one's citation, its pages or lines extended to the last one's."""
    first, last = run[0].event, run[-1].event
    head = citation(run[0])
    kind = run[0].document.kind
    if first.page_start is not None and last.page_end is not None:
        head = re.sub(r", pp?\. [\d-]+$", "", head) + ", " + place(kind, first.page_start, last.page_end)
    elif first.line_start is not None and last.line_end is not None:
        head = re.sub(r", (?:lines?|¶) [\d-]+$", "", head) + ", " + place(kind, None, None, first.line_start,
                                                                          last.line_end)
    return head


def scope(restriction) -> None:
    """What part of the archive a question was answered from ("ch. 3", "util.py"), and scope words that matched
    nothing (the question was then answered from everything)."""
    if restriction is None:
        return
    for note in restriction.notes:
        warning(note)
    if restriction.described:
        err.print(f"[dim]searching {escape(restriction.described)} only[/]", soft_wrap=True)


def timings(result) -> None:
    t = result.answer.timings
    n = sum(r.n_tokens for r in result.retrieved)
    err.print(f"[dim]{result.mode} mode · {n:,} retrieved tokens · first token {t.first_token_s:.2f} s · "
              f"total {t.total_s:.2f} s[/]")
    report = result.answer.layered
    if report is not None and report.visible_blocks:
        low, high = min(report.visible_blocks), max(report.visible_blocks)
        err.print(f"[dim]layered: a pool of {report.pool_blocks} blocks ({report.pool_tokens:,} tokens); each layer "
                  f"saw {low if low == high else f'{low}-{high}'} of them (at most {report.budget_tokens:,} tokens)[/]")


def documents(docs, stats: dict, kv: dict) -> None:
    if not docs:
        out.print(f"store {escape(str(stats.get('path', '')))} is empty; add files with [bold]epi ingest PATH[/]")
        return
    table = Table(box=None, header_style="bold")
    for col, just in (("document", "left"), ("format", "left"), ("length", "right"), ("tokens", "right"),
                      ("events", "right")):
        table.add_column(col, justify=just)
    for d in docs:
        unit = "\u00b6" if d.kind in BLOCK_KINDS else "lines"  # EPUB, HTML and Word are cited by block
        extent = f"{d.n_pages} pp." if d.n_pages else (f"{d.n_lines:,} {unit}" if d.n_lines else "")
        shown = escape(document_format(d.kind, d.display_path))
        shown = f"{shown} [yellow](partial)[/]" if d.partial else shown  # an ingest of it is running or was cut off
        table.add_row(escape(printable(d.display_path)), shown, extent, f"{d.n_tokens:,}", f"{d.n_events:,}")
    out.print(table)
    out.print(f"\n{stats['n_documents']} documents · {stats['n_events']:,} events · {stats['n_tokens']:,} tokens · "
              f"{_size(stats['disk_bytes'])} on disk · {escape(str(stats.get('path', '')))}")
    out.print(f"KV blocks: {_size(kv['kv_used_bytes'])} of the {_size(kv['kv_budget_bytes'])} budget "
              "([bold]epi config --kv-budget SIZE[/] changes it)")
    for t in kv["kv_tiers"]:
        out.print(f"  {escape(t['tier'])}: {t['blocks']:,} blocks, {_size(t['kv_used_bytes'])}")


_SERVING = {"blocks": "[green]blocks[/]", "text": "[yellow]text[/]", "none": "[red]no[/]"}


def _short(n: float) -> str:
    """1.1G, 491M, 15K: sizes in a narrow column."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}" if n < 10 * scale else f"{n / scale:.0f}{unit}"
    return f"{n:.0f}"


def models(rows: list[dict], machine: dict) -> None:
    """`epi models`: one line a model, then why each that is not served with blocks is not."""
    table = Table(box=None, header_style="bold")
    table.add_column("model", no_wrap=True)
    for col in ("from", "arch", "params", "quant", "file", "context", "KV/tok", "budget", "memory", "answers"):
        table.add_column(col, justify="right" if col in ("params", "file", "context", "KV/tok", "budget", "memory")
                         else "left", no_wrap=True)
    for r in rows:
        name = escape(r["name"]) + (" [bold cyan]*[/]" if r["default"] else "")
        if "architecture" not in r:
            table.add_row(name, r["source"], *[""] * 8, _SERVING["none"])
            continue
        memory = _short(r["memory_needed_bytes"]) + ("" if r["fits_memory"] else " [red]too big[/]")
        table.add_row(name, r["source"], escape(r["architecture"]),
                      _short(r["parameters"]).replace("G", "B"), r["quantization"],
                      _short(r["file_bytes"]), _short(r["context_length"]), _short(r["kv_bytes_per_token"]),
                      _short(r["kv_budget_tokens"] or 0), memory, _SERVING[r["serving"]])
    out.print(table)
    gpu = "all layers on the GPU" if machine["gpu_offload"] else "CPU only (no GPU offload in this build)"
    out.print(f"\n* answers by default. This machine: {_size(machine['memory_bytes'])} of memory, {gpu}. KV/tok: "
              "bytes a token's stored block takes; budget: tokens the store's KV budget holds; answers: from KV "
              "blocks, as text only, or not at all. --model takes the names in the first column.")
    for r in rows:
        if r["why"]:
            out.print(f"  [dim]{escape(r['qualified'])}: {escape(r['why'])}[/]")


def settings(values: dict) -> None:
    for key, value in values.items():
        shown = _size(value) if key.endswith("_bytes") else value
        out.print(f"[bold]{key}[/]: {escape(str(shown))}")


def event(ev, doc) -> None:
    where = citation(RetrievedEvent(ev, doc, None, None))
    out.print(f"[bold]event {ev.id}[/] · {escape(where)} · event {ev.ordinal + 1} of {doc.n_events} · "
              f"{ev.token_end - ev.token_start} tokens · surprise mean {ev.surprise_mean:.2f}, max {ev.surprise_max:.2f}")
    out.print(ev.text, markup=False)


def doctor(checks: list[tuple[str, str, bool | None]]) -> bool:
    """Rows of (what, value, ok); ok None means informational."""
    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    healthy = True
    for what, value, ok in checks:
        mark = "" if ok is None else ("[green]ok[/] " if ok else "[red]FAIL[/] ")
        healthy = healthy and ok is not False
        table.add_row(what, mark + escape(value))
    out.print(table)
    return healthy
