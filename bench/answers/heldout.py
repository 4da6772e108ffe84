"""Held-out question sets on real documents: kv mode versus text mode, same questions, same retrieved events.

The sets live in `bench/heldout/*.json`. Their documents are real files nobody on the team wrote, found on a
common Linux install (two PDFs from /usr/share/doc, chapters of the Vim user manual) or installed with epi (the
platformdirs package); their questions were written from the documents alone by people who had not seen epi's
code (see bench/README.md). A set whose documents are missing on this machine is skipped and reported.

For each set: ingest the documents into a store of their own (the `epi ingest` path; unchanged files are skipped on
a rerun), then ask every question through `Workspace.ask` in text mode and in kv mode, both modes on the same
retrieved events, and score contains-match / token F1 against the gold answer and source recall against the gold
excerpt. Writes `heldout.md` and `heldout.json` to --out.

    python bench/answers/heldout.py [--sets bench/heldout] [--stores DIR] [--out docs/] [--threads N] [--only SET ...]
    python bench/answers/heldout.py --retrieval [--only SET ...]   # source recall only, no answers: retrieval.json

`--retrieval` ingests the same way, then only retrieves (what `Workspace.ask` retrieves: k=5 by default, +-1 neighbour) and
reports per question whether the gold excerpt lies inside the retrieved events, and inside a hit itself (not only
a neighbour), with the hits' citations: minutes instead of the answers' half hour.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval import BENCH_OPTIONS, ask_once, covers, load_average, score_answer, squash  # noqa: E402

from episodic_cli.engine.llama.models import answer_model, reader_model  # noqa: E402
from episodic_cli.engine.paths import cache_dir  # noqa: E402
from episodic_cli.engine.ingest.segment import SURPRISE_AT, SegmentParams  # noqa: E402
from episodic_cli.engine.documents.sources import discover  # noqa: E402
from episodic_cli.engine.budgets import DEFAULT_K, SECOND_LOOK  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402

ANSWER_MAX_TOKENS = 64   # room for a sentence around the short gold answer
K = DEFAULT_K  # hits per question, as `epi ask` retrieves by default (`--k` changes it for a run)
MODES = ("text", "kv")


def load_sets(folder: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]


def resolve(document: str) -> Path:
    """A path, `python-package:NAME` for an installed package's source folder (the code set), or
    `epub-from-mdbook:BOOK_DIR:ch08,ch09` for an EPUB built from a local mdBook's chapters (bench/answers/mdbook_epub.py)."""
    if document.startswith("epub-from-mdbook:"):
        import mdbook_epub

        return mdbook_epub.resolve(document, cache_dir() / "heldout-built")
    if document.startswith("python-package:"):
        spec = importlib.util.find_spec(document.split(":", 1)[1])
        return Path(spec.origin).parent if spec and spec.origin else Path(document)
    return Path(document)


def stale_questions(store, questions: list[dict]) -> list[str]:
    """Questions whose gold excerpt is not in this machine's copy of the documents (another version of a PDF or a
    package): they cannot be scored here."""
    text = squash(" ".join("".join(e.text for e in store.events_of(d.id)) for d in store.documents()))
    return [q["qid"] for q in questions if squash(q["gold_text"]) not in text]



def stored_questions(sets: Path, only: list[str], stores: Path, model: str | None, threads: int | None):
    """(workspace, store, question) for every scorable question of the sets named in `only` whose store a heldout.py
    run left in `stores`, a set at a time (its workspace and store closed after its last question): what the
    side-by-side benchmarks (first_token_ab.py) ask again."""
    for spec in load_sets(sets):
        if spec["set"] not in only:
            continue
        store_dir = stores / spec["set"]
        if not store_dir.exists():
            print(f"{spec['set']}: no store at {store_dir} (run bench/answers/heldout.py first); skipped", flush=True)
            continue
        ws = Workspace(model, store=str(store_dir), threads=threads)
        store = ws.store_for_reading()
        try:
            ws.check_store(store)
            stale = set(stale_questions(store, spec["questions"]))
            for q in spec["questions"]:
                if q["qid"] not in stale:
                    yield ws, store, q
        finally:
            store.close()
            ws.close()

SEGMENT = SegmentParams()  # --surprise-at replaces it


def ingest(ws: Workspace, paths: list[Path], log) -> dict:
    """Ingest `paths` into the workspace's store as `epi ingest` does; files already there are skipped."""
    params = SEGMENT
    store = ws.store_for_writing(params)
    ingestor = ws.ingestor(store, params)
    ws.embedder.load(batches=True)  # before the clock starts: its import is not ingest work
    t0 = time.perf_counter()
    tokens = events = files = 0
    try:
        with store.writer():
            for r in ingestor.ingest(discover(paths)):
                if r.status == "ingested":
                    tokens, events, files = tokens + r.tokens, events + r.events, files + 1
                elif r.status == "skipped":  # as epi ingest: a binary or unreadable file in a folder is passed over
                    log(f"  skipped {r.display_path}: {r.error}")
                elif r.status != "unchanged":
                    raise RuntimeError(f"ingest of {r.display_path} failed: {r.error}")
            ingestor.finish_run()  # as epi ingest: finished documents' window files go
    finally:
        ingestor.close()
        store.close()
    seconds = time.perf_counter() - t0
    info = {"files_ingested": files, "tokens": tokens, "events": events, "seconds": round(seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1) if tokens else None}
    log(f"  ingest: {files} files, {tokens} tokens, {events} events in {seconds:.0f}s" if files
        else "  ingest: every file already in the store")
    return info


def ask(ws: Workspace, store, question: dict, mode: str, warnings: list[str], short: bool = True,
        narrow: bool | None = None, cold_seconds: float | None = None, layered: bool = False) -> dict:
    options = replace(BENCH_OPTIONS, k=K, mode=mode, short=short, narrow=narrow, cold_seconds=cold_seconds,
                      layered=layered)
    result, row = ask_once(ws, store, question["question"], question["gold_text"], warnings, options,
                           max_tokens=ANSWER_MAX_TOKENS)
    row["left_cold_tokens"] = sum(r.n_tokens for r in result.left_cold)
    row["narrowed"] = bool(result.focus)
    row["kv_loaded_tokens"], row["kv_prefilled_tokens"] = (result.answer.kv_loaded_tokens,
                                                           result.answer.kv_prefilled_tokens)
    row = {"qid": question["qid"], **row, "retrieved_tokens": sum(r.n_tokens for r in result.retrieved)}
    row.update(score_answer(row["answer"], question["answer"]))
    row["supported"] = bool(result.support().supported)  # evidence quotes hold the answer's own words
    # a second look: the answer it set aside (its score is the run's without it), and the seconds from the question
    # to where that answer ended and to where the one read again did (first_token_s is the first answer's)
    first = result.first_answer
    row["first_answer"] = None if first is None else first.text.strip()
    row["first_contains"] = None if first is None else score_answer(first.text.strip(), question["answer"])["contains"]
    if first is not None:
        row["first_done_s"] = round(first.timings.total_s, 3)
        row["second_look_done_s"] = round(result.answer.timings.total_s, 3)
    # the evidence span the answer started with (engine/answer/short_answer.py), and whether it alone is right
    row["short_answer"] = result.answer.short
    row["short_contains"] = score_answer(result.answer.short, question["answer"])["contains"] if result.answer.short \
        else None
    row["read"] = [result.retrieved[i].event.text[a:b] for i, spans in result.focus or [] for a, b in spans]
    return row


def retrieval_row(ws: Workspace, store, question: dict) -> dict:
    """Where the gold excerpt is among the events `Workspace.ask` would read: inside them (source recall), inside a hit
    itself, and the hits' rank-ordered citations."""
    retrieved = ws.retrieve(store, question["question"], K, 1)
    hits = sorted((r for r in retrieved if r.score is not None), key=lambda r: r.rank)
    gold_hit = next((h.rank for h in hits if covers([h.event.text], question["gold_text"])), None)
    return {"qid": question["qid"], "source_recall": covers([r.event.text for r in retrieved], question["gold_text"]),
            "gold_in_hit": gold_hit, "retrieved_tokens": sum(r.n_tokens for r in retrieved),
            "hits": [f"{h.document.display_path}:{h.event.line_start or h.event.page_start}" for h in hits]}


def run_set(spec: dict, stores: Path, threads: int | None, log, retrieval_only: bool = False, short: bool = True,
            model: str | None = None, narrow: bool | None = None, modes: tuple[str, ...] = MODES,
            cold_seconds: float | None = None, layered: bool = False) -> dict:
    paths = [resolve(p) for p in spec["documents"]]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        log(f"{spec['set']}: skipped, missing {', '.join(missing)}")
        return {"set": spec["set"], "skipped": f"missing {', '.join(missing)}"}
    log(f"{spec['set']}: {spec['description']}")
    warnings: list[str] = []
    model = answer_model(model)  # as `epi ask` picks it
    reader = reader_model(None, model)  # as `epi ingest` picks it: the answer model itself where one is installed
    ws = Workspace(reader, store=str(stores / spec["set"]), threads=threads, warn=warnings.append)
    info = ingest(ws, paths, log)  # files already in the store, read by whichever model, are skipped
    if model != reader:  # another answer model on the same store: its own KV tier, the embedder shared
        answer_ws = Workspace(model, store=str(stores / spec["set"]), threads=threads, warn=warnings.append)
        answer_ws.__dict__["embedder"] = ws.embedder
        ws.close()
        ws = answer_ws
    rows = []
    store = ws.store_for_reading()
    try:
        ws.check_store(store)
        info["store_tokens"] = sum(d.n_tokens for d in store.documents())
        stale = stale_questions(store, spec["questions"])
        if stale:
            log(f"  not scored (gold excerpt not in this copy of the documents): {', '.join(stale)}")
        questions = [q for q in spec["questions"] if q["qid"] not in stale]
        for q in questions:
            if retrieval_only:
                row = retrieval_row(ws, store, q)
                rows.append(row)
                log(f"  {q['qid']:<14} src={row['source_recall']:.0f} hit={row['gold_in_hit']} {row['hits']}")
                continue
            for mode in modes:
                row = ask(ws, store, q, mode, warnings, short, narrow, cold_seconds, layered)
                rows.append(row)
                log(f"  {q['qid']:<14} {mode:<4} {row['contains']:.0f} f1={row['f1']:.2f} "
                    f"src={row['source_recall']:.0f}"
                    f" ttft={row['first_token_s']:.2f}s {squash(row['answer'])[:60]!r}")
    finally:
        store.close()
        ws.close()
    return {"set": spec["set"], "kind": spec["kind"], "description": spec["description"],
            "documents": [str(p) for p in paths], "ingest": info, "questions": questions, "stale": stale,
            "rows": rows}


def pct(xs: list[float]) -> str:
    return f"{100 * sum(xs) / len(xs):.0f}%" if xs else "-"


def write_one_mode_markdown(result: dict, path: Path) -> None:
    """The tables of a run in one mode (`--modes kv`): per set and in total, then every question."""
    mode = result["modes"][0]
    lines = [f"# Held-out sets: {result['model']}, {mode} mode{', whole events' if result.get('whole') else ''}", "",
             f"Produced by `{result['command']}` on {result['machine']}, {result['date']}; wall time "
             f"{result['wall_min']:.1f} min; load average at start {result['load_start']}, at the end "
             f"{result['load_end']}. k={result['k']}, +-1 neighbour, greedy, at most {ANSWER_MAX_TOKENS} tokens.", "",
             "| set | n | src | contains | F1 | first token median (s) | tokens loaded / prefilled |",
             "|---|---|---|---|---|---|---|"]
    right = n = 0
    for s in result["sets"]:
        if "skipped" in s or not s["questions"]:
            lines.append(f"| {s['set']} | {s.get('skipped', 'no question could be scored here')} | | | | | |")
            continue
        rows = [r for r in s["rows"] if r["mode"] == mode]
        right, n = right + sum(r["contains"] for r in rows), n + len(rows)
        lines.append(f"| {s['set']} | {len(rows)} | {int(sum(r['source_recall'] for r in rows))} | "
                     f"{int(sum(r['contains'] for r in rows))} | {statistics.mean(r['f1'] for r in rows):.2f} | "
                     f"{statistics.median(r['first_token_s'] for r in rows):.2f} | "
                     f"{sum(r.get('kv_loaded_tokens') or 0 for r in rows):,} / "
                     f"{sum(r.get('kv_prefilled_tokens') or 0 for r in rows):,} |")
    lines += [f"| all | {n} | | **{int(right)}** | | | |", "", "## Every question", "",
              "| qid | question | gold | src | answer | first token (s) |", "|---|---|---|---|---|---|"]
    for s in result["sets"]:
        for r in (r for r in s.get("rows", []) if r["mode"] == mode):
            q = next(q for q in s["questions"] if q["qid"] == r["qid"])
            lines.append(f"| {r['qid']} | {q['question'].replace('|', chr(92) + '|')} | "
                         f"{q['answer'].replace('|', chr(92) + '|')} | {r['source_recall']:.0f} | "
                         f"{('**ok** ' if r['contains'] else '') + squash(r['answer'])[:80].replace('|', chr(92) + '|')}"
                         f" | {r['first_token_s']:.2f} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_markdown(result: dict, path: Path) -> None:
    if len(result.get("modes", MODES)) == 1:
        return write_one_mode_markdown(result, path)
    lines = ["# Held-out question sets on real documents", "",
             f"Produced by `{result['command']}` on {result['machine']}, {result['date']}, model "
             f"{result['model']}; wall time {result['wall_min']:.1f} min; load average at start "
             f"{result['load_start']}, at the end {result['load_end']}. How to run and where the sets come from: "
             "`bench/README.md`. Rows: `heldout.json` beside this file.", "",
             f"Both modes answer every question through `Workspace.ask` (hybrid retrieval, k={result.get('k', 3)}, +-1 neighbour "
             f"events, best hit last), greedy, at most {ANSWER_MAX_TOKENS} tokens. The answer reads the 2 sentences "
             "of the retrieved events that share the question's rarest words (engine/retrieval/evidence.py; all the events "
             "when none does): **text** decodes the whole prompt, **kv** loads the prompt's cached sink and decodes "
             "the sentences and the question behind it (its stored q8_0 blocks when nothing was narrowed). "
             + ("A question asking for a fact starts its answer with the evidence span the model finds likeliest, "
                "then one sentence (engine/answer/short_answer.py; `short` = answers led by a span, and how many of those "
                "spans alone are right). " if result.get("short", True) else
                "Run with `--no-short`: every answer is the model's own words. ")
             + "`supported` = answers whose own words the quoted sentences hold (evidence.support). Cells: contains-match "
             "(the normalized gold answer inside the normalized answer) / token F1. `src` = the gold excerpt lies "
             "inside the retrieved events (both modes retrieve the same events). `first token` = median seconds "
             "from the question to the first answer token.", "",
             "| set | documents | tokens | n | src | text: contains / F1 | kv: contains / F1 | both / text only / "
             "kv only / neither | same events | first token text / kv (s) | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    total = {m: [] for m in MODES}
    for s in result["sets"]:
        if "skipped" in s or not s["questions"]:
            lines.append(f"| {s['set']} | {s.get('skipped', 'no question could be scored here')} | | | | | | | | | |")
            continue
        by = {m: {r["qid"]: r for r in s["rows"] if r["mode"] == m} for m in MODES}
        qids = [q["qid"] for q in s["questions"]]
        t, k = by["text"], by["kv"]
        for m in MODES:
            total[m] += [by[m][q]["contains"] for q in qids]
        both = sum(bool(t[q]["contains"] and k[q]["contains"]) for q in qids)
        t_only = sum(bool(t[q]["contains"] and not k[q]["contains"]) for q in qids)
        k_only = sum(bool(k[q]["contains"] and not t[q]["contains"]) for q in qids)
        same = sum(t[q]["events"] == k[q]["events"] for q in qids)
        ft = {m: statistics.median(by[m][q]["first_token_s"] for q in qids) for m in MODES}
        docs = ", ".join(Path(d).name or d for d in s["documents"])
        lines.append(
            f"| {s['set']} ({s['kind']}) | {docs} | {s['ingest']['store_tokens']} | {len(qids)} | "
            f"{pct([t[q]['source_recall'] for q in qids])} | "
            f"{pct([t[q]['contains'] for q in qids])} / {statistics.mean(t[q]['f1'] for q in qids):.2f} | "
            f"{pct([k[q]['contains'] for q in qids])} / {statistics.mean(k[q]['f1'] for q in qids):.2f} | "
            f"{both} / {t_only} / {k_only} / {len(qids) - both - t_only - k_only} | {same} of {len(qids)} | "
            f"{ft['text']:.2f} / {ft['kv']:.2f} | {ft['text'] / ft['kv']:.1f}x |")
    n = len(total["text"])
    stale = [f"{s['set']}: {', '.join(s['stale'])}" for s in result["sets"] if s.get("stale")]
    if stale:
        lines += ["", "Not scored (their gold excerpt is not in this machine's copy of the documents): "
                  + "; ".join(stale) + "."]
    rows = {m: [r for s in result["sets"] for r in s.get("rows", []) if r["mode"] == m] for m in MODES}
    sup = {m: (sum(r.get("supported", False) for r in rows[m]),
               sum(bool(r.get("supported")) and bool(r["contains"]) for r in rows[m]),
               sum(not r.get("supported") and bool(r["contains"]) for r in rows[m])) for m in MODES}
    lines += ["", f"All sets: text {int(sum(total['text']))} of {n}, kv {int(sum(total['kv']))} of {n} correct "
              "(contains-match).", "",
              "Answers marked supported by their evidence quotes: " + "; ".join(
                  f"{m} {sup[m][0]} of {len(rows[m])} ({sup[m][1]} of them correct; {sup[m][2]} correct answers "
                  "not marked supported)" for m in MODES) + ".", ""]
    if result.get("short", True):
        led = {m: [r for r in rows[m] if r.get("short_answer")] for m in MODES}
        lines += ["Answers led by an evidence span (short): " + "; ".join(
            f"{m} {len(led[m])} of {len(rows[m])}, the span alone right in {int(sum(r['short_contains'] for r in led[m]))}"
            for m in MODES) + ".", ""]
    lines += ["## Every question", "",
              "| qid | question | gold | src | text answer | kv answer |", "|---|---|---|---|---|---|"]
    for s in result["sets"]:
        for q in s.get("questions", []):
            t = next(r for r in s["rows"] if r["qid"] == q["qid"] and r["mode"] == "text")
            k = next(r for r in s["rows"] if r["qid"] == q["qid"] and r["mode"] == "kv")
            cell = lambda r: ("**ok** " if r["contains"] else "") + squash(r["answer"])[:80].replace("|", "\\|")
            lines.append(f"| {q['qid']} | {q['question'].replace('|', chr(92) + '|')} | "
                         f"{q['answer'].replace('|', chr(92) + '|')} | {t['source_recall']:.0f} | {cell(t)} | "
                         f"{cell(k)} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_retrieval(results: list[dict], out: Path, log) -> int:
    """Source recall per set (and in a hit itself), logged and written to out/retrieval.json."""
    for s in results:
        rows = s.get("rows") or []
        if rows:
            log(f"{s['set']}: source recall {sum(r['source_recall'] for r in rows):.0f} of {len(rows)}, gold in a hit "
                f"{sum(r['gold_in_hit'] is not None for r in rows)}; missed: "
                f"{', '.join(r['qid'] for r in rows if not r['source_recall']) or 'none'}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "retrieval.json").write_text(json.dumps({"date": datetime.now().strftime("%Y-%m-%d %H:%M"),
                                                    "sets": results}, indent=1), encoding="utf-8")
    return 0 if any(s.get("rows") for s in results) else 1


def write_results(args, argv: list[str] | None, results: list[dict], t0: float, load_start, log) -> None:
    ws = Workspace(answer_model(args.model), threads=args.threads)
    result = {"command": "python bench/answers/heldout.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs",
              "date": datetime.now().strftime("%Y-%m-%d %H:%M"), "model": ws.prepared.source.name, "short": args.short,
              "k": K, "whole": args.whole, "narrow": args.narrow, "modes": args.modes, "cold_seconds": args.cold_seconds,
              "cold_rate": args.cold_rate,
              "layered": args.layered,
              "wall_min": (time.perf_counter() - t0) / 60, "load_start": load_start, "load_end": load_average(),
              "sets": results}
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"heldout-{args.tag}" if args.tag else "heldout"
    markdown = args.out / f"{name}.md" if args.tag else args.markdown
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    write_markdown(result, markdown)
    log(f"wrote {markdown}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parents[1] / "heldout")
    ap.add_argument("--stores", type=Path, default=cache_dir() / "heldout", help="one store per set, reused")
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for heldout.json")
    ap.add_argument("--markdown", type=Path, default=Path("docs/heldout.md"), help="the tables, as prose")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", nargs="*", help="set names to run (default: all)")
    ap.add_argument("--retrieval", action="store_true", help="source recall only (no answers): writes retrieval.json")
    ap.add_argument("--no-short", dest="short", action="store_false",
                    help="answers in the model's own words only: no evidence span first (engine/answer/short_answer.py)")
    ap.add_argument("--k", type=int, default=DEFAULT_K, help=f"hits per question (epi ask's -k; default {DEFAULT_K})")
    ap.add_argument("--model", default=None, help="answer with this model (a name or a file; default: epi ask's); "
                    "stores are ingested by the model that reads documents (epi ingest's)")
    ap.add_argument("--whole", action="store_true", help="read the retrieved events whole (epi ask --whole)")
    ap.add_argument("--narrow", action="store_true", help="read the best sentences (epi ask --narrow); neither: "
                    "as epi ask does by default for the model")
    ap.add_argument("--cold-seconds", type=float, default=None, help="as epi ask's (default: no limit)")
    ap.add_argument("--cold-rate", type=float, default=None,
                    help="with --cold-seconds: size what a question reads from text at this many tokens/s instead of "
                    "the rate this machine measured (runs side by side, or at another load, then read the same)")
    ap.add_argument("--layered", action="store_true", help="kv mode with per-layer block selection (epi ask --layered)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="answer modes (default: both)")
    ap.add_argument("--surprise-at", choices=SURPRISE_AT, default=None,
                    help="where new stores measure surprise (default: epi ingest's; segment.SURPRISE_AT)")
    ap.add_argument("--tag", default=None, help="write bench/results/heldout-TAG.json and .md (docs/ untouched)")
    ap.add_argument("--second-look", choices=("on", "off"), default=None,
                    help="answer an unsupported lookup again from the best passages (default: epi ask's; "
                    "--no-second-look); each row keeps the answer set aside and its score")
    args = ap.parse_args(argv)
    global BENCH_OPTIONS  # as epi ask answers, unless told otherwise
    BENCH_OPTIONS = replace(BENCH_OPTIONS, second_look=SECOND_LOOK if args.second_look is None
                            else args.second_look == "on")
    if args.surprise_at:
        global SEGMENT
        SEGMENT = SegmentParams(surprise_at=args.surprise_at)
    global K
    K = args.k
    if args.cold_rate:
        from episodic_cli.engine.llama import prefill_rate

        prefill_rate.rate = lambda *_: args.cold_rate
        prefill_rate.record = lambda *_: None
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    t0, load_start = time.perf_counter(), load_average()
    sets = [s for s in load_sets(args.sets) if not args.only or s["set"] in args.only]
    results = []
    for s in sets:
        results.append(run_set(s, args.stores, args.threads, log, args.retrieval, args.short, args.model,
                               True if args.narrow else False if args.whole else None, tuple(args.modes),
                               args.cold_seconds, args.layered))
        if not args.retrieval and args.tag and results[-1].get("rows"):  # a long run keeps what it has measured
            write_results(args, argv, results, t0, load_start, log)
    if args.retrieval:
        return write_retrieval(results, args.out, log)
    if not any(s.get("rows") for s in results):  # nothing measured: keep whatever --out holds
        log(f"no question was answered (sets: {', '.join(s['set'] for s in results) or 'none matched'}); "
            f"nothing written to {args.out}")
        return 1
    write_results(args, argv, results, t0, load_start, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
