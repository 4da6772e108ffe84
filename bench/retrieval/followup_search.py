"""Follow-up searches against the standalone question's, retrieval only (no answer is written): how many of the
passages the standalone form finds (its k=5 hits, a neighbour counting) each search finds.

Two cases per question of a follow-up set:
- the follow-up in its conversation, searched as `condense.search_for` makes it;
- a topic switch: the question's standalone form asked after an unrelated turn of the same set (another
  question's first turn, chosen with a fixed seed), which should be searched as asked.

Each is measured with the rule that a question given back by the rewrite is glued to the last question only when
shorter than N words, for several N (tried, not kept: docs/heldout.md, "Follow-ups on a fifth blind set, and a new
question in a chat"). The model's rewrites are made once and saved (`--rewrites` reads them back).

    python bench/retrieval/followup_search.py --set-store bench/heldout/followups5=/work/stores/fu5 [...] --out FILE
"""
from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Callable

from episodic_cli.engine.answer.condense import Condenser, bare, search_for
from episodic_cli.engine.retrieval.retrieve import fuse, with_leaders_first
from episodic_cli.engine.retrieval.scope import names_a_place
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store

K, POOL = 5, 20  # epi ask's k, and retrieve()'s candidate pool for it
WORDS = [8, 10, 12, 14, 16, 18, 20, None]  # None: no length rule (the code before)


def turns(questions: list[str], answers: list[str]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for q, a in zip(questions, answers):
        out += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return out


def rewrites(sets: list[tuple[Path, Path]], model: str) -> list[dict]:
    rows, rng = [], random.Random(7)
    for folder, stores in sets:
        for path in sorted(folder.glob("*.json")):
            qset = json.loads(path.read_text())
            ws = Workspace(model, str(stores / qset["set"]))
            condenser = Condenser(ws.model, ws.threads)
            qs = qset["questions"]
            for n, q in enumerate(qs):
                history = turns(q["history"], q["history_answers"])[-4:]
                other = qs[(n + 1 + rng.randrange(len(qs) - 1)) % len(qs)]
                switch = turns(other["history"][:1], other["history_answers"][:1])
                rows.append({"set": qset["set"], "store": str(stores / qset["set"]), "qid": q["qid"],
                             "question": q["question"], "standalone": q["standalone"], "history": history,
                             "raw": condenser.rewrite(history, q["question"]), "switch_history": switch,
                             "switch_raw": condenser.rewrite(switch, q["standalone"])})
                print(f"  {q['qid']}", flush=True)
            condenser.close()
            ws.close()
    return rows


def search(history: list[dict[str, str]], asked: str, raw: str, words: int | None) -> str:
    """The search `Workspace.condense` makes, with the length rule at `words` (None: off, as epi does): a question
    given back by the rewrite is searched as typed when it has `words` words or more."""
    if names_a_place(asked):
        return asked
    if words is not None and len(asked.split()) >= words and bare(raw or asked) == bare(asked):
        return asked
    return search_for(history, asked, raw)


def searchers(ws: Workspace, st: Store) -> tuple[Callable[[str], list[int]], Callable[[list[int]], set]]:
    """`ranked(text)`: the event ids of a text's fused candidate pool, best first (retrieve()'s fusion, cached);
    `near(ids)`: those events and their neighbours, as (document, ordinal)."""
    ws._adopt_embedder(st)
    cache: dict[str, list[int]] = {}

    def ranked(text: str) -> list[int]:
        if text not in cache:
            rankings = [st.search_dense(ws.embedder.embed_query(text), POOL), st.search_lexical(text, POOL)]
            cache[text] = [i for i, _ in with_leaders_first(fuse(rankings), rankings)]
        return cache[text]

    def near(ids: list[int]) -> set[tuple[int, int]]:
        return {(e.document_id, e.ordinal + d) for e in st.get_events(ids) for d in (-1, 0, 1)}

    return ranked, near


def measure(rows: list[dict], model: str) -> dict:
    found = {case: defaultdict(lambda: defaultdict(float)) for case in ("follow-up", "switch")}
    counts: dict[str, int] = defaultdict(int)
    for store_dir in sorted({r["store"] for r in rows}):
        ws = Workspace(model, store_dir)
        with Store.open_existing(ws.store_dir) as st:
            ranked, near = searchers(ws, st)

            def hits(text: str) -> list[int]:
                return ranked(text)[:K]

            for r in (r for r in rows if r["store"] == store_dir):
                gold = {(e.document_id, e.ordinal) for e in st.get_events(hits(r["standalone"]))}
                counts[r["set"]] += 1
                for words in WORDS:
                    for case, (history, asked, raw) in (
                            ("follow-up", (r["history"], r["question"], r["raw"])),
                            ("switch", (r["switch_history"], r["standalone"], r["switch_raw"]))):
                        got = near(hits(search(history, asked, raw, words)))
                        found[case][r["set"]][str(words)] += len(gold & got) / max(len(gold), 1)
        ws.close()
    return {"questions": dict(counts),
            "recall": {case: {str(w): round(sum(per[s][str(w)] for s in counts) / sum(counts.values()), 3)
                              for w in WORDS} for case, per in found.items()},
            "recall_by_set": {case: {s: {str(w): round(per[s][str(w)] / counts[s], 3) for w in WORDS}
                                     for s in counts} for case, per in found.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set-store", action="append", default=[], help="SETS_FOLDER=STORES_FOLDER (each set's store "
                    "is STORES_FOLDER/<set name>)")
    ap.add_argument("--rewrites", type=Path, default=None, help="the rewrites saved by an earlier run")
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.rewrites:
        rows = json.loads(args.rewrites.read_text())["rows"]
    else:
        pairs = [tuple(Path(p) for p in s.split("=", 1)) for s in args.set_store]
        rows = rewrites(pairs, args.model)
    result = measure(rows, args.model)
    for case, by_words in result["recall"].items():
        print(case, "  ".join(f"{'off' if w == 'None' else '<' + w}: {v:.3f}" for w, v in by_words.items()))
    args.out.write_text(json.dumps({**result, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
