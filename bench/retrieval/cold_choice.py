"""What a cold question reads, without answering: is the gold excerpt among what it reads, by rule and room.

Every retrieved event is treated as cold (no block for the answer model), as after `epi ingest --answer-model none`
or far past the KV budget. For each held-out question the events `Workspace.ask` retrieves are chosen from by:

- `sentence`: the rule before 2026-11-27 (each cold event's best sentence, scored within that event alone, most
  relevant event first, then events whole while room is left);
- `passages-rN`: engine/retrieval/cold_reading.py (sentences scored over all the cold events at once, the best
  first, each read with N sentences either side, then events whole while room is left).

`room` is tokens of text the question may prefill: `--cold-seconds` times the machine's prefill rate (10 s at ~60
tokens/s = 600). Prints, per set and in total, how often the gold excerpt lies inside what was read, and the tokens
read; writes the rows to --out.

    python bench/retrieval/cold_choice.py --stores DIR [--only SET ...] [--rooms 300 600 900] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "answers"))
from eval import covers, load_average  # noqa: E402
from heldout import K, load_sets, stale_questions  # noqa: E402

from episodic_cli.engine.llama.models import answer_model  # noqa: E402
from episodic_cli.engine.retrieval import cold_reading  # noqa: E402
from episodic_cli.engine.retrieval.evidence import focus, readable  # noqa: E402
from episodic_cli.engine.workspace import Workspace  # noqa: E402


def sentence_rule(question, retrieved, room, tokens_of) -> list[str]:
    """The texts read under the rule before 2026-11-27 (Workspace.fit_cold at 11a1c0e), every event cold."""
    order = list(range(len(retrieved)))[::-1]
    sentences: dict[int, tuple[str, int]] = {}
    for i in order:
        best = focus(question, [retrieved[i]], 1)
        if best:
            text = readable(retrieved[i].event.text[best[0].span.start:best[0].span.end])
            n = tokens_of(text)
            if n <= room:
                sentences[i] = (text, n)
                room -= n
    whole: set[int] = set()
    for i in order:
        extra = retrieved[i].n_tokens - sentences.get(i, ("", 0))[1]
        if extra <= room:
            whole.add(i)
            room -= extra
            sentences.pop(i, None)
    if not whole and not sentences:
        whole.add(order[0])
    return [retrieved[i].event.text for i in sorted(whole)] + [t for t, _ in sentences.values()]


def passages_rule(question, retrieved, room, tokens_of, radius) -> list[str]:
    reading = cold_reading.choose(question, retrieved, list(range(len(retrieved))), room, tokens_of, radius)
    return ([retrieved[i].event.text for i in sorted(reading.whole)]
            + [reading.excerpt(retrieved[i], i) for i in sorted(reading.passages)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=Path, default=Path(__file__).resolve().parents[1] / "heldout")
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--only", nargs="+")
    ap.add_argument("--rooms", type=int, nargs="+", default=[300, 600, 900])
    ap.add_argument("--radii", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rules = {"sentence": sentence_rule} | {
        f"passages-r{n}": (lambda q, r, room, t, n=n: passages_rule(q, r, room, t, n)) for n in args.radii}
    out = {"command": " ".join(sys.argv), "load_start": load_average(), "rooms": args.rooms, "sets": []}
    totals: dict[str, int] = {}
    n_all = 0
    for spec in load_sets(args.sets):
        if args.only and spec["set"] not in args.only or not (args.stores / spec["set"]).exists():
            continue
        ws = Workspace(answer_model(None), store=str(args.stores / spec["set"]))
        store = ws.store_for_reading()
        tokens_of = lambda t: len(ws.model.tokenize(t))  # noqa: E731
        rows = []
        try:
            questions = [q for q in spec["questions"] if q["qid"] not in stale_questions(store, spec["questions"])]
            for q in questions:
                retrieved = ws.retrieve(store, q["question"], K, 1)
                row = {"qid": q["qid"], "all": covers([r.event.text for r in retrieved], q["gold_text"]),
                       "retrieved_tokens": sum(r.n_tokens for r in retrieved)}
                for room in args.rooms:
                    for name, rule in rules.items():
                        texts = rule(q["question"], retrieved, room, tokens_of)
                        row[f"{name}@{room}"] = covers(texts, q["gold_text"])
                        row[f"{name}@{room}:tokens"] = sum(tokens_of(t) for t in texts)
                rows.append(row)
        finally:
            store.close()
            ws.close()
        n_all += len(rows)
        sums = {key: int(sum(r[key] for r in rows)) for key in rows[0] if ":" not in key and key != "qid"
                and key != "retrieved_tokens"} if rows else {}
        for key, v in sums.items():
            totals[key] = totals.get(key, 0) + v
        print(f"{spec['set']:<16} n={len(rows):<3} " + " ".join(f"{k}={v}" for k, v in sums.items()), flush=True)
        out["sets"].append({"set": spec["set"], "rows": rows, "gold_read": sums})
    print(f"{'total':<16} n={n_all:<3} " + " ".join(f"{k}={v}" for k, v in totals.items()))
    out["total"] = totals
    out["n"] = n_all
    out["load_end"] = load_average()
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
