"""Follow-ups in `epi chat` on a cold store, with and without preparing ahead while the user types, side by side.

For each follow-up question of the whole-scope sets (bench/heldout/whole/*.json, kind "follow-up"): a fresh copy of
its store with no KV block of the answer model (what a fast `epi ingest --answer-model none` leaves), then, as `epi
chat` at its defaults does (`--cold-seconds 10`), the earlier turn is asked, the user "types" for --think seconds,
and the follow-up is asked, rewritten for retrieval from the conversation. With prefetch the chat's helper
(chat_prefetch.py) prepares the likely next events during the typing; without, the machine is idle as long. The two
conditions alternate their order from one question to the next, each on its own copy. Reported per follow-up: the
follow-up's first token after the question, the events it read from text (cold), the tokens it left out to keep
within --cold-seconds, and its answer (read them: the answers are in the JSON).

    python bench/latency/chat_prefetch.py --stores /work/stores [--sets whole-code-dotenv ...] [--think 30]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "retrieval"))
from retrieval_variants import copy_store  # noqa: E402

from episodic_cli.chat_prefetch import ChatPrefetch  # noqa: E402
from episodic_cli.engine.answer.kv_mode import event_block_key  # noqa: E402
from episodic_cli.engine.ask_options import AskOptions  # noqa: E402
from episodic_cli.engine.llama.models import answer_model  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402
from episodic_cli.store import Store  # noqa: E402

SETS = Path(__file__).resolve().parents[1] / "heldout" / "whole"


def turn(ws: Workspace, st: Store, question: str, history: list[dict]) -> dict:
    """One chat turn as the REPL runs it: the rewrite for retrieval, the answer streamed whole."""
    hot_before = None
    search = ws.condense(history[-4:], question) if history else question
    started = time.perf_counter()
    result, stream = ws.ask(st, question, AskOptions(second_look=False), history=history[-4:], search=search)
    keeper = ws.block_keeper(st)
    hot_before = sum(keeper.has(event_block_key(r)) for r in result.retrieved if r.summary is None)
    first, pieces = None, []
    for piece in stream:
        if first is None:
            first = time.perf_counter() - started
        pieces.append(piece)
    return {"question": question, "search": search, "first_token_s": round(first or 0.0, 2),
            "events": len(result.retrieved), "hot_at_ask": hot_before,
            "left_cold_tokens": sum(r.n_tokens for r in result.left_cold),
            "read_as_sentences": len(result.cold_passages), "answer": "".join(pieces).strip(),
            "retrieved": result.retrieved + result.left_cold}


def trial(source: Path, scratch: Path, model: str, q: dict, prefetch: bool, think: float) -> dict:
    copy = scratch / f"{q['qid']}-{'on' if prefetch else 'off'}"
    copy_store(source, copy)  # with no KV block at all
    ws = Workspace(model, str(copy))
    helper = None
    try:
        with Store.open_existing(copy) as st:
            ws.check_store(st)
            history: list[dict] = []
            for earlier in q["history"]:
                first = turn(ws, st, earlier, history)
                history += [{"role": "user", "content": earlier}, {"role": "assistant", "content": first["answer"]}]
            named = []
            if prefetch:
                helper = ChatPrefetch(ws, st)
                named = helper.ahead(first["retrieved"])
            time.sleep(think)  # the user reads the answer and types the follow-up
            if helper is not None:
                helper.pause()
            st.refresh()
            follow = turn(ws, st, q["question"], history)
    finally:
        if helper is not None:
            helper.close()
        ws.close()
        shutil.rmtree(copy, ignore_errors=True)
    del follow["retrieved"]
    return {"qid": q["qid"], "prefetch": prefetch, "named_ahead": len(named), **follow}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", type=Path, required=True, help="folder with one store per set, named as the set")
    ap.add_argument("--sets", nargs="*", default=["whole-code-dotenv", "whole-code-tenacity", "whole-manual-bzip2"])
    ap.add_argument("--think", type=float, default=30.0, help="seconds between an answer and the follow-up")
    ap.add_argument("--model", default=None, help="answer model (default: epi chat's)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/chat_prefetch.json"))
    args = ap.parse_args()
    model = answer_model(args.model)
    load_start = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="epi-prefetch-") as scratch:
        n = 0
        for name in args.sets:
            spec = json.loads((SETS / f"{name}.json").read_text(encoding="utf-8"))
            for q in spec["questions"]:
                if q["kind"] != "follow-up":
                    continue
                order = (True, False) if n % 2 == 0 else (False, True)
                n += 1
                for prefetch in order:
                    row = trial(args.stores / name, Path(scratch), model, q, prefetch, args.think)
                    rows.append(row)
                    print(f"{row['qid']:<10} prefetch={'on ' if prefetch else 'off'} first token "
                          f"{row['first_token_s']:>6.2f} s, {row['hot_at_ask']}/{row['events']} events hot, "
                          f"{row['left_cold_tokens']:>4} tokens left cold, {row['named_ahead']} named ahead | "
                          f"{row['answer'][:70]!r}", flush=True)
    summary = {}
    for flag in (True, False):
        mine = [r for r in rows if r["prefetch"] is flag]
        summary["on" if flag else "off"] = {
            "median_first_token_s": statistics.median(r["first_token_s"] for r in mine),
            "hot_events": sum(r["hot_at_ask"] for r in mine), "events": sum(r["events"] for r in mine),
            "left_cold_tokens": sum(r["left_cold_tokens"] for r in mine)}
    load_end = os.getloadavg()
    for name, s in summary.items():
        print(f"prefetch {name}: median first token {s['median_first_token_s']:.2f} s, {s['hot_events']}/{s['events']}"
              f" events hot at the question, {s['left_cold_tokens']} tokens left cold")
    print(f"load {load_start[0]:.1f} -> {load_end[0]:.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv),
                                    "model": model, "think_s": args.think, "load_start": load_start,
                                    "load_end": load_end, "summary": summary, "rows": rows}, indent=1),
                        encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
