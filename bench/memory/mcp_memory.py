"""`epi mcp`'s resident memory over many varied questions: flat means the high-water mark (VmHWM) after the last
question within 10% of the one after the warm-up questions (issue 37).

The server runs as a subprocess on a store with the answer model's KV blocks, driven over stdio with the official
`mcp` client. The calls are mostly `ask` (lookups; every tenth a part read whole, `read: whole`, every twentieth a
question about the whole, `read: overview`), with a `search` and a `read_event` of its best hit after every fifth
question and a `summary` every twentieth; the questions are made from the documents' own headings, backticked terms
(`--kv-budget`, `epi warm`), function and class names and sentences, so they read different passages. After every
call the server's VmRSS and VmHWM are read from /proc/PID/status. The warm-up (--warm-up, 10 questions) holds one
call of each kind, so each path's buffers are there before the baseline is taken.

    python bench/memory/mcp_memory.py [--store DIR --questions-from FILE...] [--questions 200] [--answer-tokens 64]
                               [--threads N]

Without --store it ingests README.md and docs/usage.md of this checkout (--docs) with `epi ingest --answer-model
MODEL --no-map` into a store under --build-dir (kept, and reused when it is already there). `--answer-tokens` caps
each answer (the ask tool's `answer_tokens`) so that 200 questions fit a 2-core machine; memory depends on what an
answer reads, not on its length. Writes bench/results/mcp_memory.json (or --out) after every fifth question, so a
run cut short still says how far it got. docs/benchmarks.md's run: `--store` a copy of the held-out python-dotenv
store, `--questions-from` its README.md and src/dotenv/*.py, `--threads 1 --answer-tokens 16`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "latency"))
from mcp_latency import env, epi, memory_kb, server_pid  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/usage.md"]
CHECKPOINTS = (1, 5, 10, 25, 50, 75, 100, 125, 150, 175, 200)


# ------------------------------------------------------------------------------------------------ questions


def _plain(text: str) -> str:
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # [label](link) -> label
    return " ".join(text.replace("**", "").replace("*", "").split())


def material(paths: list[Path]) -> tuple[list[str], list[str], list[str]]:
    """(headings, backticked terms, prose sentences) of the Markdown documents, code blocks and tables left out."""
    headings, terms, sentences = [], [], []
    paragraphs: list[str] = []
    for path in paths:
        if path.suffix == ".py":  # code: its functions and classes are the terms, its docstrings' lines the prose
            source = path.read_text(encoding="utf-8")
            names = re.findall(r"^\s*(?:def|class) ([A-Za-z]\w{3,})", source, re.M)
            terms += [n for n in names if not n.startswith("_")]
            paragraphs += [" ".join(d.split()) for d in re.findall(r'"""(.*?)"""', source, re.S)]
            continue
        in_code, para = False, []
        for line in path.read_text(encoding="utf-8").splitlines() + [""]:
            if line.startswith("```"):
                in_code = not in_code
                continue
            if in_code or line.startswith("|"):
                continue
            if line.startswith("#"):
                title = _plain(line.lstrip("#").replace("`", ""))
                if 1 <= len(title.split()) <= 8:
                    headings.append(title)
                line = ""
            if line.strip() and not line.startswith("- "):
                para.append(line.strip())
                continue
            if para:
                paragraphs.append(" ".join(para))
            para = [line[2:].strip()] if line.startswith("- ") else []
    for text in paragraphs:
        terms += [t for t in re.findall(r"`([^`]{3,40})`", text) if re.match(r"^(epi \w+|--[\w-]+|\w+\(\)?)", t)]
        for s in re.split(r"(?<=[.;])\s+", _plain(text)):
            words = s.split()
            if 8 <= len(words) <= 24 and not s.startswith(("`", "(")) and s[:1].isupper():
                sentences.append(s.rstrip(".;:"))
    dedup = lambda xs: list(dict.fromkeys(xs))  # noqa: E731
    return dedup(headings), dedup(terms), dedup(sentences)


def questions(paths: list[Path], n: int, seed: int = 37) -> list[dict]:
    """n ask calls: lookups from terms, headings and sentences; every tenth (from the third) a part read whole,
    every twentieth (from the eighth) a question about the whole, answered from the map where there is one."""
    headings, terms, sentences = material(paths)
    rng = random.Random(seed)
    term_forms = ["What does `{}` do?", "When would I use `{}`?", "What is `{}` for?", "How does `{}` behave?"]
    heading_forms = ["What does the documentation say about {}?", "Explain {}.", "What should I know about {}?"]
    out = []
    for i in range(n):
        if i % 10 == 2:
            part = f"the section “{rng.choice(headings)}”" if i % 20 == 2 or not terms else f"`{rng.choice(terms)}`"
            out.append({"question": f"Summarise {part}.", "read": "whole"})
            continue
        if i % 20 == 7:
            out.append({"question": rng.choice(["What is this project for?", "What does this archive cover?",
                                                "Give an overview of what these documents describe."]),
                        "read": "overview"})
            continue
        pick = i % 3
        if pick == 0 and terms:
            q = rng.choice(term_forms).format(rng.choice(terms))
        elif pick == 1 and headings:
            q = rng.choice(heading_forms).format(rng.choice(headings))
        else:
            s = rng.choice(sentences)
            q = f"Is it true that {s[0].lower()}{s[1:]}?"
        out.append({"question": q, "read": "auto"})
    return out


def search_queries(paths: list[Path], n: int, seed: int = 38) -> list[str]:
    headings, terms, _ = material(paths)
    rng = random.Random(seed)
    return [rng.choice(terms if i % 2 else headings) for i in range(n)]


# ------------------------------------------------------------------------------------------------ the run


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def summary(samples: list[dict], asks: list[dict], warm_up: int, started: float) -> dict:
    """The numbers the report gives: the high-water mark after the warm-up and now, RSS at checkpoints."""
    after = {s["ask"]: s for s in samples if s["call"] == "ask"}
    done = len(asks)
    out = {"questions_done": done, "calls_done": len(samples), "seconds": round(time.perf_counter() - started, 1),
           "ask_seconds_median": round(statistics.median(a["seconds"] for a in asks), 2) if asks else None,
           "rss_mb_at": {str(q): round(after[q]["VmRSS"] / 1024, 1) for q in CHECKPOINTS if q in after},
           "hwm_mb_at": {str(q): round(after[q]["VmHWM"] / 1024, 1) for q in CHECKPOINTS if q in after}}
    if warm_up in after and done >= warm_up:
        base, last = after[warm_up], samples[-1]
        out |= {"warm_up_questions": warm_up, "hwm_after_warm_up_mb": round(base["VmHWM"] / 1024, 1),
                "hwm_at_end_mb": round(last["VmHWM"] / 1024, 1),
                "hwm_ratio": round(last["VmHWM"] / base["VmHWM"], 4),
                "rss_after_warm_up_mb": round(base["VmRSS"] / 1024, 1), "rss_at_end_mb": round(last["VmRSS"] / 1024, 1),
                "rss_min_after_warm_up_mb": round(min(s["VmRSS"] for s in samples if s["ask"] >= warm_up) / 1024, 1),
                "rss_max_mb": round(max(s["VmRSS"] for s in samples) / 1024, 1),
                "flat_within_10pct": last["VmHWM"] <= base["VmHWM"] * 1.10}
    return out


async def run(args: argparse.Namespace, store: Path, paths: list[Path], report: dict) -> None:
    asks = questions(paths, args.questions)
    queries = search_queries(paths, args.questions // 5 + 1)
    params = StdioServerParameters(command=sys.executable, env=env(), cwd=str(ROOT), args=[
        "-m", "episodic_cli", "mcp", "--store", str(store), "--model", args.model,
        *(["--threads", str(args.threads)] if args.threads else [])])
    samples: list[dict] = []
    done: list[dict] = []
    report |= {"samples": samples, "asks": done}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            t_init = time.perf_counter()
            await session.initialize()
            pid = server_pid()
            report["server_pid"] = pid
            report["server_ready_s"] = round(time.perf_counter() - t_init, 2)
            report["memory_at_start_kb"] = memory_kb(pid)
            started = time.perf_counter()

            def sample(call: str, ask_n: int) -> None:
                samples.append({"call": call, "ask": ask_n, "t": round(time.perf_counter() - started, 1),
                                **memory_kb(pid)})

            for i, q in enumerate(asks):
                t0 = time.perf_counter()
                result = await session.call_tool("ask", {"question": q["question"], "read": q["read"],
                                                         "answer_tokens": args.answer_tokens})
                seconds = time.perf_counter() - t0
                data = result.structured_content or {}
                done.append({"n": i + 1, "question": q["question"], "read": q["read"], "seconds": round(seconds, 2),
                             "error": result.content[0].text if result.is_error else None,
                             "kind": data.get("kind"), "sources": len(data.get("sources", [])),
                             "first_token_s": data.get("timings", {}).get("first_token_s")})
                sample("ask", i + 1)
                if i % 5 == 2:  # a search, then its best hit read with its neighbours
                    found = await session.call_tool("search", {"query": queries[i // 5], "k": 5})
                    sample("search", i + 1)
                    hits = (found.structured_content or {}).get("hits") or []
                    if hits:
                        await session.call_tool("read_event", {"id": hits[0]["event_id"], "neighbours": 1})
                        sample("read_event", i + 1)
                if i % 20 == 4:  # the map's summaries (a tool error where the store has none: still a call)
                    await session.call_tool("summary", {})
                    sample("summary", i + 1)
                if i + 1 == 5:
                    per = (time.perf_counter() - started) / 5
                    print(f"  5 questions in {per * 5:.0f} s: {per:.1f} s each, {args.questions} in ~"
                          f"{per * args.questions / 60:.0f} min (load average {load_average()})", flush=True)
                if (i + 1) % 5 == 0 or i + 1 == len(asks):
                    s = samples[-1]
                    print(f"  {i + 1} questions, {time.perf_counter() - started:.0f} s: VmRSS {s['VmRSS'] / 1024:.0f} "
                          f"MB, VmHWM {s['VmHWM'] / 1024:.0f} MB, load average {load_average()}", flush=True)
                    report["memory"] = summary(samples, done, args.warm_up, started)
                    report["load_average_now"] = load_average()
                    write_report(args.out, report)
    report["memory"] = summary(samples, done, args.warm_up, started)


def write_report(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=None, help="a store with MODEL's blocks (default: build one)")
    ap.add_argument("--build-dir", type=Path, default=Path("/tmp/epi-mcp-memory"),
                    help="where the store is built without --store (reused when there)")
    ap.add_argument("--docs", nargs="+", default=DOCS, help="documents to ingest and draw questions from")
    ap.add_argument("--questions-from", nargs="+", default=None,
                    help="Markdown or Python files the questions are made from (default: --docs)")
    ap.add_argument("--model", default="qwen-1.5b", help="the answer model (default qwen-1.5b)")
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--warm-up", type=int, default=10, help="questions before the baseline high-water mark")
    ap.add_argument("--answer-tokens", type=int, default=64, help="the most tokens of each answer")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mcp_memory.json")
    args = ap.parse_args()
    paths = [(ROOT / d) if not Path(d).is_absolute() else Path(d) for d in args.docs]
    sources = [Path(p) for p in args.questions_from] if args.questions_from else paths
    store = args.store
    report: dict = {"date": date.today().isoformat(), "model": args.model,
                    "questions_from": [str(p) for p in sources] if args.questions_from else args.docs,
                    "answer_tokens": args.answer_tokens, "threads": args.threads, "cpus": os.cpu_count(),
                    "machine": platform.machine(), "load_average_before": load_average(),
                    "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    if store is None:
        store = args.build_dir / "store"
        if not (store / "store.sqlite3").exists():
            threads = ["--threads", str(args.threads)] if args.threads else []
            print(f"ingesting {', '.join(args.docs)} into {store} ...", flush=True)
            t0 = time.perf_counter()
            subprocess.run(epi("ingest", "--store", str(store), "--answer-model", args.model, "--no-map", *threads,
                               *map(str, paths)), check=True, capture_output=True, env=env())
            report["ingest_s"] = round(time.perf_counter() - t0, 1)
            print(f"  ingested in {report['ingest_s']:.0f} s", flush=True)
    listed = json.loads(subprocess.run(epi("ls", "--store", str(store), "--json"), check=True, capture_output=True,
                                       env=env()).stdout)
    report["store"] = str(store)
    report["store_documents"] = listed
    t0 = time.perf_counter()
    asyncio.run(run(args, store, sources, report))
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["load_average_after"] = load_average()
    write_report(args.out, report)
    mem = report["memory"]
    print(f"{mem['questions_done']} questions ({mem['calls_done']} calls) in {report['wall_s']:.0f} s, "
          f"{mem['ask_seconds_median']} s per question (median)")
    if "hwm_ratio" in mem:
        print(f"VmHWM {mem['hwm_after_warm_up_mb']:.0f} MB after question {mem['warm_up_questions']} -> "
              f"{mem['hwm_at_end_mb']:.0f} MB at the end: x{mem['hwm_ratio']:.3f} "
              f"({'flat' if mem['flat_within_10pct'] else 'NOT flat'}, within 10%)")
    print("VmRSS MB at question " + ", ".join(f"{q}: {v:.0f}" for q, v in mem["rss_mb_at"].items()))
    print(f"load average {report['load_average_before']} before, {report['load_average_after']} after")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
