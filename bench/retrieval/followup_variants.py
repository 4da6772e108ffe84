"""Two follow-up searches tried against `condense.search_for` on the retrieval proxy of `bench/retrieval/followup_search.py`
(share of the standalone form's k=5 passages found, a neighbour counting), none kept (docs/heldout.md, "Follow-ups
on a fifth blind set, and a new question in a chat"):
- `topic`: the answer model names what the follow-up is about, a short phrase from the conversation, searched with
  the follow-up in place of the glued last question (`topic`), beside the glued text (`topic+glue`), or for every
  follow-up that points back, rewritten or not (`topic-always`);
- `novel`: the glued search without the last question's best passage (`drop1`), its best two (`drop2`), or with its
  best passage moved to fifth place (`last`).

    python bench/retrieval/followup_variants.py --rewrites bench/results/followup-search-s51-sets1-4.json --out FILE
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from followup_search import K, searchers

from episodic_cli.engine.answer.condense import CONDENSE_TOKENS, TURN_CHARS, Condenser, _continues, search_for
from episodic_cli.engine.prompt import clean_question
from episodic_cli.engine.retrieval.scope import names_a_place
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store

TOPIC_SYSTEM = ("Say what a follow-up question is about: name the thing, person, command or topic that its words "
                "pointing back (it, he, she, they, that, this, there) or its missing subject stand for, as a short "
                "phrase taken from the conversation. Reply with the phrase only; do not answer the question.")
TOPIC_EXAMPLES = (
    ("Which function opens the database?", "open_db() in store.py opens it.",
     "What does it return when the path is wrong?", "open_db() in store.py"),
    ("Who commands the ship in chapter 2?", "Captain Moreau commands the Albatross.",
     "Why does he leave the harbour at night?", "Captain Moreau, who commands the Albatross in chapter 2"),
    ("Which option makes compression faster?", "The --fast option.",
     "And on large files?", "the --fast option that makes compression faster"),
)
VARIANTS = ["as epi does", "topic", "topic+glue", "topic-always", "drop1", "drop2", "last"]


def _turn(turns: str, follow_up: str) -> str:
    return f"Conversation:\n{turns}\nFollow-up question: {follow_up}"


def topic(condenser: Condenser, history: list[dict[str, str]], follow_up: str) -> str:
    turns = "".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: "
                    f"{clean_question(m['content'][:TURN_CHARS]).strip()}\n" for m in history)
    messages = [{"role": "system", "content": TOPIC_SYSTEM}]
    for q, a, f, phrase in TOPIC_EXAMPLES:
        messages += [{"role": "user", "content": _turn(f"User: {q}\nAssistant: {a}\n", f)},
                     {"role": "assistant", "content": phrase}]
    messages.append({"role": "user", "content": _turn(turns, clean_question(follow_up))})
    model, session = condenser.model, condenser.session
    tokens = np.asarray(model.tokenize(model.apply_chat_template(messages), special=True), dtype=np.int32)
    tokens = tokens[max(len(tokens) - (session.n_ctx - CONDENSE_TOKENS), 0):]
    session.clear()
    condenser._prompt = np.zeros(0, dtype=np.int32)  # the rewrite's cached prefix is gone
    pos = session.prefill(tokens, 0)
    text = ""
    for piece in session.generate(pos, 40, lambda: "\n" in text):
        text += piece
    return text.strip().split("\n")[0].strip().strip('"')[:200]


def add_topics(rows: list[dict], model: str) -> None:
    for store in sorted({r["store"] for r in rows}):
        ws = Workspace(model, store)
        condenser = Condenser(ws.model, ws.threads)
        for r in (r for r in rows if r["store"] == store):
            r["topic"] = topic(condenser, r["history"], r["question"])
            r["switch_topic"] = topic(condenser, r["switch_history"], r["standalone"])
            print(f"  {r['qid']}: {r['topic'][:80]}", flush=True)
        condenser.close()
        ws.close()


def ranked_ids(variant: str, history, asked: str, raw: str, phrase: str, ranked) -> list[int]:
    """The k event ids a search finds with `variant`; `ranked(text)` is the fused ranking of a text's pool."""
    if names_a_place(asked):
        return ranked(asked)[:K]
    now = search_for(history, asked, raw)
    glued = now not in (asked, raw)
    if variant.startswith("topic") and (glued or variant == "topic-always" and _continues(asked)):
        now = f"{phrase} {now}" if variant == "topic+glue" else f"{phrase} {asked}"
    ids = ranked(now)
    if variant in ("drop1", "drop2", "last") and glued:
        best = ranked([m["content"] for m in history if m["role"] == "user"][-1])
        if variant == "last":
            top = [i for i in ids[:K] if i != best[0]]
            return top[:K - 1] + [best[0]] if len(top) < K else top[:K]
        ids = [i for i in ids if i not in best[:1 if variant == "drop1" else 2]]
    return ids[:K]


def measure(rows: list[dict], model: str) -> dict:
    found = {case: defaultdict(float) for case in ("follow-up", "switch")}
    for store_dir in sorted({r["store"] for r in rows}):
        ws = Workspace(model, store_dir)
        with Store.open_existing(ws.store_dir) as st:
            ranked, near = searchers(ws, st)
            for r in (r for r in rows if r["store"] == store_dir):
                gold = {(e.document_id, e.ordinal) for e in st.get_events(ranked(r["standalone"])[:K])}
                for variant in VARIANTS:
                    for case, args in (
                            ("follow-up", (r["history"], r["question"], r["raw"], r["topic"])),
                            ("switch", (r["switch_history"], r["standalone"], r["switch_raw"], r["switch_topic"]))):
                        got = near(ranked_ids(variant, *args, ranked))
                        found[case][variant] += len(gold & got) / max(len(gold), 1)
        ws.close()
    return {"questions": len(rows),
            "recall": {case: {v: round(x / len(rows), 3) for v, x in per.items()} for case, per in found.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rewrites", type=Path, required=True, help="rows saved by bench/retrieval/followup_search.py (the "
                    "phrases are added, or read back when the file holds them)")
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = json.loads(args.rewrites.read_text())["rows"]
    if not all("topic" in r for r in rows):
        add_topics(rows, args.model)
    result = measure(rows, args.model)
    for case, per in result["recall"].items():
        print(case, "  ".join(f"{v}: {x:.3f}" for v, x in per.items()))
    args.out.write_text(json.dumps({**result, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
