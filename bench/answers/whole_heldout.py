"""Questions about the whole, on held-out sets (bench/heldout/whole/*.json, issue 38): summaries, explanations,
overviews, who-did-what and follow-ups, each with a rubric (what a right answer must state, what it must not
claim). This script asks them and writes the answers beside their rubrics for grading by a reader; it grades
nothing itself (a keyword match would pass a rule stated backwards).

Conditions:
- `--read auto` (the new path: a named part whole, the map for the whole, follow-ups rewritten for retrieval);
- `--read lookup --followups concat` (before: every question a lookup; a follow-up searched with the previous
  question glued in front, as `epi chat` did).
A follow-up is asked after its history, in one conversation, and its standalone form on its own, so that the two
can be compared.

    python bench/answers/whole_heldout.py --stores DIR --tag after [--read auto] [--only SET ...] [--max-tokens N]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from episodic_cli.engine.ask_options import AskOptions
from episodic_cli.engine.paths import cache_dir
from episodic_cli.api import answer_of
from episodic_cli.engine.retrieval.citations import citation
from episodic_cli.engine.retrieval.question_kind import QuestionKind
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store

HERE = Path(__file__).resolve().parent


def ensure_store(store: Path, documents: list[str], model: str) -> None:
    if (store / "store.sqlite3").exists():
        return
    print(f"ingesting {len(documents)} documents into {store} (blocks and map of {model})", flush=True)
    subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", *documents, "--store", str(store),
                    "--answer-model", model], check=True)


def ask(ws: Workspace, st: Store, question: str, history: list[dict] | None, search: str | None,
        kind: QuestionKind | None, max_tokens: int | None, mode: str | None = None) -> dict:
    t0 = time.perf_counter()
    holder: dict = {}

    def stop() -> bool:
        r = holder.get("result")
        return bool(max_tokens and r is not None and len(r.answer.text) > 4 * max_tokens)

    options = AskOptions(kind=kind, mode=mode, cold_seconds=None)
    result, stream = ws.ask(st, question, options, history=history, search=search, should_stop=stop)
    holder["result"] = result
    for _ in stream:
        pass
    result.verify()  # the quotes checked by the answer model, as `epi ask` shows them
    sentences = answer_of(result).as_json()["sentences"]
    return {"answer": result.answer.text.strip(), "kind": result.kind.value, "read": result.reading,
            "search": result.search, "sources": [citation(r) for r in result.retrieved],
            "sentences_supported": sum(s["supported"] for s in sentences), "sentences": len(sentences),
            "sentence_checks": sentences,
            "first_token_s": round(result.answer.timings.first_token_s, 2),
            "total_s": round(time.perf_counter() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=HERE.parent / "heldout" / "whole")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--stores", type=Path, default=cache_dir() / "heldout-whole")
    ap.add_argument("--model", default="qwen-1.5b")
    ap.add_argument("--read", choices=["auto", "lookup"], default="auto")
    ap.add_argument("--followups", choices=["rewrite", "concat"], default="rewrite")
    ap.add_argument("--max-tokens", type=int, default=None, help="cut answers after about this many tokens")
    ap.add_argument("--mode", choices=["kv", "text"], default=None,
                    help="kv: read from the stored blocks (the default when there are any); text: re-read the text "
                         "in one pass (every token sees what came before it in the part, at prefill's cost)")
    ap.add_argument("--qids", nargs="*", default=None, help="only these questions")
    ap.add_argument("--named-opening", type=int, default=None,
                    help="tokens of a named whole's own opening read after its summaries (the default's "
                         "NAMED_OPENING_TOKENS when not given; 0: the summaries alone)")
    ap.add_argument("--tag", required=True)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.named_opening is not None:
        import episodic_cli.engine.ask_run as ask_run  # where the executor reads it
        ask_run.NAMED_OPENING_TOKENS = args.named_opening
    kind = None if args.read == "auto" else QuestionKind.LOOKUP
    rows = []
    for path in sorted(args.sets.glob("*.json")):
        qset = json.loads(path.read_text())
        name = qset.get("set", path.stem)
        if args.only and name not in args.only:
            continue
        store = args.stores / name
        ensure_store(store, qset["documents"], args.model)
        ws = Workspace(args.model, str(store), args.threads)
        with Store.open_existing(ws.store_dir) as st:
            for q in qset["questions"]:
                if args.qids and q["qid"] not in args.qids:
                    continue
                row = {"set": name, "qid": q["qid"], "kind": q["kind"], "question": q["question"],
                       "rubric": q.get("rubric"), "where": q.get("where")}
                history: list[dict] = []
                # The earlier turns' answers are the set's reference answers (history_answers), so that a follow-up
                # is judged on how it is followed up, not on an earlier answer that went wrong; asked when absent.
                reference = q.get("history_answers") or []
                for n, earlier in enumerate(q.get("history") or []):
                    if n < len(reference):
                        answer_text = reference[n]
                    else:
                        search = (ws.condense(history, earlier) if args.followups == "rewrite" else
                                  (history[-2]["content"] + " " + earlier if history else None)) if history else None
                        answer_text = ask(ws, st, earlier, history[-4:], search, kind, args.max_tokens, args.mode)["answer"]
                    history += [{"role": "user", "content": earlier}, {"role": "assistant", "content": answer_text}]
                if history:
                    last_q = history[-2]["content"]
                    search = ws.condense(history[-4:], q["question"]) if args.followups == "rewrite" else \
                        f"{last_q} {q['question']}"
                    row.update(ask(ws, st, q["question"], history[-4:], search, kind, args.max_tokens, args.mode))
                    if q.get("standalone"):
                        row["standalone_result"] = ask(ws, st, q["standalone"], None, None, kind, args.max_tokens, args.mode)
                else:
                    row.update(ask(ws, st, q["question"], None, None, kind, args.max_tokens, args.mode))
                rows.append(row)
                print(f"  {row['qid']:<14} {row['kind']:<12} {row['first_token_s']:6.1f}s  {row['read'] or ''}\n"
                      f"      {row['answer'][:300]!r}", flush=True)
        ws.close()
    out = HERE.parent / "results" / f"whole-{args.tag}.json"
    out.write_text(json.dumps({"tag": args.tag, "read": args.read, "followups": args.followups,
                               "mode": args.mode,
                               "rows": rows},
                              indent=1, ensure_ascii=False) + "\n")
    md = [f"# Whole-scope held-out answers: {args.tag}\n"]
    for r in rows:
        md.append(f"## {r['qid']} ({r['kind']})\n\n**Q:** {r['question']}\n")
        md.append(f"**A:** {r['answer']}\n\n*read:* {r['read']} · *search:* {r['search']} · first token "
                  f"{r['first_token_s']} s\n")
        if r.get("standalone_result"):
            md.append(f"**Standalone A:** {r['standalone_result']['answer']}\n")
        md.append(f"*rubric:* {json.dumps(r['rubric'], ensure_ascii=False)}\n")
    out.with_suffix(".md").write_text("\n".join(md))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
