"""Per-layer block selection (`--layered`) against kv mode, side by side in one run, on the held-out sets and on
generated passkey/needle haystacks.

Every question is asked in these conditions, one after another on the same store, in this order:
- `kv`          today's default: the 2 best-matching sentences of the k=3 retrieved events, behind the sink;
- `kv-whole-kshift` as `kv-whole`, with K moved to the blocks' new places by llama.cpp's K-shift inside the first
                decode (every cell of the cache re-rotated), as before 2026-11-24; the cost baseline of the next;
- `kv-whole`    the k=3 retrieved events' blocks whole (`--whole`): every layer sees them all (~1.5-3k tokens), K
                rotated to their new places as the blocks are assembled (native/src/rope_shift.c);
- `kv-budget`   whole blocks at layered's visible budget: as many hits (LAYERED_POOL_K and their neighbours) as
                fit LAYER_BUDGET tokens, every layer seeing all of them (~3k tokens, what each layer of `layered`
                sees): the issue's cost baseline, "the same visible budget" (kv-whole reads fewer tokens, ~2k);
- `layered-kshift` as `layered`, with llama.cpp's K-shift instead;
- `layered`     the layered pool (12 hits + neighbours, up to the answer context), loaded cold; every layer sees
                kv-whole's events first, then the pool blocks its own question query selects (engine/answer/layered.py),
                LAYER_BUDGET tokens in all (kv mode's cap); the question is read with kv-whole's events, its last
                token again under the selection;
- `layered-reread` the same, the whole question decoded again under the selection (the design before 2026-11-24);
                it finds the pool in place, so its first token has no loading in it;
- `pool-whole`  the same pool, every layer sees all of it: what a larger pool alone does, and the cost baseline for
                the selection (same cells, no masks);
- `layered-wide` as `layered` over a pool WIDE_POOL times larger (~21k tokens) than the answer context holds, laid
                out in lanes that share positions (InfLLM's memory beyond the window): what a larger pool adds.
Scores: contains-match of the gold answer; `src` = the gold excerpt lies inside the events read (the pool for the
two pool conditions); `sel` = for layered, the share of layers whose visible blocks hold the gold excerpt (among
questions whose pool holds it). Cost: first token (s) and decode speed (tokens/s after the first), medians; for the
selecting conditions the first token's two parts, loading the pool and the probe (`load_s`, `probe_s`); and the
per-question ratios of first token and decode speed between conditions (RATIOS). The five conditions before
`layered-reread` start from an empty cache (the sink reloaded from its file), so each loads all of its blocks.

    python bench/kv/layered.py [--only SET ...] [--needles 16000 32000] [--out docs/layered.md] [--limit N]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
import generators as gen  # noqa: E402
from eval import BENCH_OPTIONS, ask_once, covers, load_average, score_answer, squash  # noqa: E402
from heldout import ingest, load_sets, resolve, stale_questions  # noqa: E402

from episodic_cli.engine.kv.keys import k_shift  # noqa: E402
from episodic_cli.engine.paths import cache_dir  # noqa: E402
from episodic_cli.engine.documents.sources import file_sha256  # noqa: E402
from episodic_cli.store import Store, StoreError  # noqa: E402
from episodic_cli.engine.budgets import DEFAULT_K, LAYER_BUDGET, LAYERED_POOL_K  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402

ANSWER_MAX_TOKENS = 48
# In this order for each question: layered loads its pool cold (after kv mode's own context), layered-reread and
# pool-whole then find the same pool in place.
CONDITIONS = ("kv", "kv-whole-kshift", "kv-whole", "kv-budget", "layered-kshift", "layered", "layered-reread",
              "pool-whole", "layered-wide")
COLD = ("kv-whole-kshift", "kv-whole", "kv-budget", "layered-kshift", "layered")  # asked on an emptied cache
# (numerator, denominator): layered against the same visible budget read whole (the target: <= 1.10x) and
# against kv-whole (retrieval's own ~2k tokens); the native K move against llama.cpp's K-shift
RATIOS = (("layered", "kv-budget"), ("layered", "kv-whole"), ("kv-budget", "kv-whole"),
          ("kv-whole", "kv-whole-kshift"), ("layered", "layered-kshift"))
WIDE_POOL = 3  # layered-wide's pool, in answer contexts' room
NEEDLE_DEPTHS = [0.1, 0.3, 0.5, 0.7, 0.9]


def ask(ws: Workspace, store, question: str, answer: str, gold: str, condition: str) -> dict:
    layered = condition in ("pool-whole", "layered", "layered-kshift", "layered-reread", "layered-wide")
    ws.layered_pool = WIDE_POOL * ws.room() if condition == "layered-wide" else 0
    answerer = ws.answerer("kv", store, layered=layered)
    if layered:  # the pool's blocks all visible, or each layer's own choice
        answerer.budget = 10**9 if condition == "pool-whole" else LAYER_BUDGET
        answerer.reread_question = condition == "layered-reread"
    answerer.k_shift = None if condition.endswith("-kshift") else k_shift(answerer.keeper.rope, ws.model)
    if condition in COLD:
        answerer.reset()
    warnings: list[str] = []
    # kv-budget: hits until retrieval's 3,072 tokens are full; the layered ones: what `epi ask --layered` retrieves
    # (its anchors capped at LAYERED_ANCHOR_TOKENS); kv-whole: k=3, retrieval's few best events
    k = LAYERED_POOL_K if condition == "kv-budget" else DEFAULT_K if layered else 3
    options = replace(BENCH_OPTIONS, k=k, mode="kv", narrow=condition == "kv", layered=layered)
    result, row = ask_once(ws, store, question, gold, warnings, options, max_tokens=ANSWER_MAX_TOKENS)
    a = result.answer
    n_answer = len(ws.model.tokenize(a.text)) if a.text else 0
    decode_s = a.timings.total_s - a.timings.first_token_s
    row.update(condition=condition, retrieved_tokens=sum(r.n_tokens for r in result.retrieved),
               decode_tps=round((n_answer - 1) / decode_s, 2) if n_answer > 1 and decode_s > 0 else None,
               **score_answer(row["answer"], answer))
    report = a.layered
    if layered and report is not None and report.visible is not None:
        holding = {r.event.id for r in result.retrieved if covers([r.event.text], gold) > 0}
        columns = [i for i, event_id in enumerate(report.event_ids) if event_id in holding]
        if columns:
            row["selected_share"] = float(report.visible[:, columns].any(axis=1).mean())
        row["layered"] = report.as_json()
    return row


def warm_page_cache(store_dir: Path) -> int:
    """Reads every file of the store's KV tiers once; returns the bytes read. Timed conditions then compare compute
    and memory, not the disk: layered reads pool blocks that kv-whole and kv-budget never touch, and on a cold page
    cache the first questions of a set paid those reads (+0.1-0.2 s of layered's first token, measured 2026-11-24)."""
    total = 0
    for path in sorted((store_dir / "kv").rglob("*")):
        if path.is_file():
            with open(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    total += len(chunk)
    return total


def run_store(name: str, ws: Workspace, questions: list[dict], log, limit: int | None,
              conditions: tuple[str, ...] = CONDITIONS) -> list[dict]:
    log(f"{name}: {warm_page_cache(Path(ws.store_dir)) / 1e6:.0f} MB of KV tier files read into the page cache")
    store = ws.store_for_reading()
    rows = []
    try:
        ws.check_store(store)
        stale = set(stale_questions(store, questions))
        for q in [q for q in questions if q["qid"] not in stale][:limit]:
            for condition in conditions:
                row = ask(ws, store, q["question"], q["answer"], q["gold_text"], condition)
                row.update(set=name, qid=q["qid"])
                rows.append(row)
                log(f"  {q['qid']:<18} {condition:<12} {row['contains']:.0f} src={row['source_recall']:.0f} "
                    f"sel={row.get('selected_share', float('nan')):.2f} ttft={row['first_token_s']:.2f}s "
                    f"{squash(row['answer'])[:50]!r}")
    finally:
        store.close()
    return rows


def needle_set(length: int, folder: Path) -> tuple[Path, list[dict]]:
    gs = gen.needle_document(length, NEEDLE_DEPTHS, seed=11, nith=False)
    (name, text), = gs.documents.items()
    path = folder / name
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path, [{"qid": q.qid, "question": q.question, "answer": q.answer, "gold_text": q.gold_text}
                  for q in gs.questions]


def holds(ws: Workspace, path: Path, log) -> bool:
    """Whether the store already holds this haystack, whatever path it was ingested from (earlier runs wrote it to
    a temporary folder each time, and ingested it again under each new path: a second copy that doubles every
    needle among the hits). Copies beyond the first are removed."""
    try:
        store = Store.open_existing(ws.store_dir)
    except StoreError:  # no store yet
        return False
    sha = file_sha256(path)
    with store:
        copies = [d.path for d in store.documents() if d.content_sha256 == sha and not d.partial]
        for extra in copies[1:]:
            store.remove_document(extra)
            log(f"  removed a second copy of the haystack from the store: {extra}")
    return bool(copies)


def summary(rows: list[dict]) -> list[str]:
    asked = [c for c in CONDITIONS if any(r["condition"] == c for r in rows)]  # `--conditions` may leave some out
    selecting = [c for c in ("layered-kshift", "layered", "layered-reread", "layered-wide") if c in asked]
    lines = ["| set | n | " + " | ".join(f"{c}: right / src" for c in asked) + " | pool tokens "
             + " / ".join(selecting) + " | sel " + " / ".join(selecting) + " | first token " + " / ".join(asked)
             + " (s) | decode tok/s " + " / ".join(asked) + " | load + probe (s) " + " / ".join(selecting)
             + " |", "|---|---|" + "---|" * len(asked) + "---|---|---|---|---|"]
    for name in dict.fromkeys(r["set"] for r in rows):
        by = {c: [r for r in rows if r["set"] == name and r["condition"] == c] for c in asked}
        n = len({r["qid"] for r in rows if r["set"] == name})
        cells = [f"{sum(r['contains'] for r in by[c]):.0f} / {sum(r['source_recall'] for r in by[c]):.0f}"
                 for c in asked]
        med = lambda xs: f"{statistics.median(xs):.2f}" if xs else "-"  # noqa: E731
        pools = " / ".join(f"{statistics.median(xs):.0f}" if xs else "-" for xs in (
            [r["layered"]["pool_tokens"] for r in by[c] if r.get("layered")] for c in selecting))
        sel = " / ".join(med([r["selected_share"] for r in by[c] if "selected_share" in r]) for c in selecting)
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + f" | {pools} | {sel} | "
                     + " / ".join(med([r["first_token_s"] for r in by[c]]) for c in asked) + " | "
                     + " / ".join(med([r["decode_tps"] for r in by[c] if r["decode_tps"]]) for c in asked)
                     + " | " + " / ".join(f"{med([r['layered']['load_s'] for r in by[c] if r.get('layered')])}"
                                          f" + {med([r['layered']['probe_s'] for r in by[c] if r.get('layered')])}"
                                          for c in selecting) + " |")
    lines += ["", *ratio_table(rows)]
    total = {c: sum(r["contains"] for r in rows if r["condition"] == c) for c in asked}
    n = len({(r["set"], r["qid"]) for r in rows})
    lines += ["", "All: " + ", ".join(f"{c} {total[c]:.0f} of {n}" for c in asked) + "."]
    return lines


def quartiles(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) < 4:
        return f"{statistics.median(xs):.2f}"
    q1, q2, q3 = statistics.quantiles(xs, n=4)
    return f"{q2:.2f} ({q1:.2f}-{q3:.2f})"


def ratios(rows: list[dict], a: str, b: str, key: str, only: str | None = None) -> list[float]:
    """row[key] of condition `a` over the same question's row of condition `b`, for every question (of set `only`)."""
    by = {(r["set"], r["qid"], r["condition"]): r for r in rows}
    out = []
    for (name, qid, condition), r in by.items():
        other = by.get((name, qid, b))
        if condition == a and other and (only is None or name == only) and r[key] and other[key]:
            out.append(r[key] / other[key])
    return out


def ratio_table(rows: list[dict]) -> list[str]:
    """Per-question ratios (median, interquartile range) of the first token and of decode speed, by set and all."""
    sets = list(dict.fromkeys(r["set"] for r in rows))
    lines = ["Per question, first token a / b and decode tokens/s a / b: median (interquartile range).", "",
             "| a / b | " + " | ".join(f"first token, {s}" for s in sets) + " | **first token, all** | decode, all |",
             "|---|" + "---|" * (len(sets) + 2)]
    for a, b in RATIOS:
        lines.append(f"| {a} / {b} | " + " | ".join(quartiles(ratios(rows, a, b, "first_token_s", s)) for s in sets)
                     + f" | **{quartiles(ratios(rows, a, b, 'first_token_s'))}** "
                     f"| {quartiles(ratios(rows, a, b, 'decode_tps'))} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parents[1] / "heldout")
    ap.add_argument("--only", nargs="*", help="held-out set names (default: all; none with --only)")
    ap.add_argument("--needles", nargs="*", type=int, default=[16000], help="haystack lengths in tokens")
    ap.add_argument("--stores", type=Path, default=cache_dir() / "heldout")
    ap.add_argument("--limit", type=int, default=None, help="questions per set")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("docs/layered.md"), help="the tables, as prose")
    ap.add_argument("--json-out", type=Path, default=Path("bench/results/layered.json"), help="the rows")
    ap.add_argument("--conditions", nargs="*", choices=CONDITIONS, default=list(CONDITIONS),
                    help="ask only these (in the fixed order above; default: all)")
    args = ap.parse_args(argv)
    conditions = tuple(c for c in CONDITIONS if c in args.conditions)
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    t0, load_start = time.perf_counter(), load_average()
    rows: list[dict] = []
    for spec in load_sets(args.sets):
        if args.only is not None and spec["set"] not in args.only:
            continue
        paths = [resolve(p) for p in spec["documents"]]
        if not all(p.exists() for p in paths):
            log(f"{spec['set']}: skipped (documents missing)")
            continue
        ws = Workspace(store=str(args.stores / spec["set"]), threads=args.threads)
        ingest(ws, paths, log)
        rows += run_store(spec["set"], ws, spec["questions"], log, args.limit, conditions)
        ws.close()
    for length in args.needles:
        # the haystack is kept beside its store (same path, same bytes each run), so a second run reuses the store
        path, questions = needle_set(length, args.stores / "haystacks")
        ws = Workspace(store=str(args.stores / f"needle-{length}"), threads=args.threads)
        if not holds(ws, path, log):
            ingest(ws, [path], log)
        rows += run_store(f"needle-{length}", ws, questions, log, args.limit, conditions)
        ws.close()
    if not rows:
        log("nothing was asked; nothing written")
        return 1
    command = "python bench/kv/layered.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = [f"Produced by `{command}`, wall {(time.perf_counter() - t0) / 60:.1f} min, load average at start "
            f"{load_start}, at the end {load_average()}; at most {ANSWER_MAX_TOKENS} answer tokens, greedy.", "",
            *summary(rows)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text) + "\n", encoding="utf-8")
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
