"""epi against the pipelines a user would build instead, side by side in one run, with the same embedder and model.

Issue 57 item 6. Three pipelines answer the held-out lookup sets' questions, interleaved question by question:

- **epi**: `bench/answers/heldout.py`'s own path (`heldout.ask`, kv mode, epi ask's defaults, at most
  `heldout.ANSWER_MAX_TOKENS` tokens) on each set's own store, read by the answer model as `epi ingest` does; a set
  with no store in --stores is ingested first, as heldout.py does.
- **langchain**: LangChain's RAG tutorial: `RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)`
  (langchain-text-splitters), the 4 chunks most similar to the question (InMemoryVectorStore's k=4, cosine), joined
  by blank lines into the hub prompt "rlm/rag-prompt" (RAG_PROMPT below), sent as one user message.
- **llamaindex**: LlamaIndex's defaults: `SentenceSplitter()` (llama-index-core: 1024 tiktoken tokens, overlap 200,
  each chunk's `file_path` metadata embedded and shown to the model as the library does), the 2 most similar
  (similarity_top_k=2), and its DEFAULT_TEXT_QA_PROMPT_TMPL (imported from the library), sent as one user message.

The peers use epi's own embedder (`Embedder.embed_texts` / `embed_query`: all-MiniLM-L6-v2 in numpy, long texts
as averaged 256-piece windows) with numpy brute-force cosine, as the tutorials' in-memory stores do, and the GGUF
epi answers with through llama-cpp-python's `Llama.create_chat_completion` (the model's own chat template; greedy,
temperature 0; `n_threads` 2; streamed, so the first token's time is measured). Every pipeline reads the same
text: the documents as epi's store holds them (its events joined per document), so loaders are not compared.

Each pipeline runs in a process of its own (peak memory: its VmHWM from /proc at the end), started once per set,
then answers one warm-up question ("What is this about?", not scored) before the set's questions, so no pipeline's
first question pays its model's load. Questions go to the three in turn, the order rotated every question, so a
change in the machine's load falls on all of them. Scored as heldout.py scores (eval.score_answer: the gold answer
inside the answer; eval.covers: the gold excerpt inside what was retrieved).

    pip install -e '.[peer]'
    python bench/answers/peer_rag.py --only code-pluggy [--stores DIR] [--archive /work/archive-1m] [--epi-tree DIR]

Writes bench/results/peer-rag/<date>-<set>.json per set and prints the table. `--archive DIR` reads each set's
documents from the archive's copies (bench/archive/heldout_paths.json: the versions the sets were written on);
`--epi-tree DIR` runs epi from a clean copy of the code (`git archive HEAD | tar -x -C DIR`) instead of the
working tree.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PIPELINES = ("epi", "langchain", "llamaindex")
WARM_UP = "What is this about?"
THREADS = 2
N_CTX = 4096  # LlamaIndex's 2 x 1024 tiktoken tokens plus its prompt fit with room; LangChain's 4 x 1000 characters
# The hub prompt "rlm/rag-prompt" (LangChain's RAG tutorial), word for word; the hub is not reachable offline.
RAG_PROMPT = ("You are an assistant for question-answering tasks. Use the following pieces of retrieved context to "
              "answer the question. If you don't know the answer, just say that you don't know. Use three sentences "
              "maximum and keep the answer concise.\nQuestion: {question} \nContext: {context} \nAnswer:")
LC_CHUNK, LC_OVERLAP, LC_K = 1000, 200, 4
LI_K = 2


def vm_hwm_kb() -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


# -- the peers --------------------------------------------------------------------------------------------------------

def langchain_chunks(documents: list[dict]) -> list[dict]:
    """The tutorial's split: `RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200).split_documents`."""
    from langchain_core.documents import Document
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=LC_CHUNK, chunk_overlap=LC_OVERLAP, add_start_index=True)
    docs = splitter.split_documents([Document(page_content=d["text"], metadata={"source": d["path"]})
                                     for d in documents])
    return [{"text": c.page_content, "embed": c.page_content, "context": c.page_content, "source": c.metadata["source"],
             "start": c.metadata["start_index"]} for c in docs]


def llamaindex_chunks(documents: list[dict]) -> list[dict]:
    """LlamaIndex's default node parser, `SentenceSplitter()`, on Documents carrying `file_path` as
    SimpleDirectoryReader leaves it visible; each node embedded and shown with its metadata as the library does."""
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.schema import MetadataMode

    nodes = SentenceSplitter().get_nodes_from_documents(
        [Document(text=d["text"], metadata={"file_path": d["path"]}) for d in documents])
    return [{"text": n.get_content(metadata_mode=MetadataMode.NONE), "embed": n.get_content(MetadataMode.EMBED),
             "context": n.get_content(metadata_mode=MetadataMode.LLM), "source": n.metadata["file_path"],
             "start": n.start_char_idx} for n in nodes]


def peer_prompt(name: str, question: str, chunks: list[dict]) -> str:
    if name == "langchain":  # the tutorial's `"\n\n".join(doc.page_content for doc in retrieved_docs)`
        return RAG_PROMPT.format(question=question, context="\n\n".join(c["context"] for c in chunks))
    from llama_index.core.prompts.default_prompts import DEFAULT_TEXT_QA_PROMPT_TMPL

    # the default response synthesizer (compact) packs the retrieved nodes' texts, joined by blank lines, into one
    # text_qa prompt when they fit, as two nodes of 1024 tokens do
    return DEFAULT_TEXT_QA_PROMPT_TMPL.format(context_str="\n\n".join(c["context"] for c in chunks), query_str=question)


class Peer:
    def __init__(self, name: str, setup: dict):
        import numpy as np

        import episodic_cli.engine  # noqa: F401  (OMP_WAIT_POLICY=passive on 2 cores, as epi gets, before llama_cpp)
        from episodic_cli.engine.embed.embedder import Embedder
        from llama_cpp import Llama

        self.name, self.np = name, np
        self.k = LC_K if name == "langchain" else LI_K
        t0 = time.perf_counter()
        self.chunks = (langchain_chunks if name == "langchain" else llamaindex_chunks)(setup["documents"])
        t1 = time.perf_counter()
        self.embedder = Embedder()
        self.embedder.load(batches=True)
        t2 = time.perf_counter()
        self.vectors = self.embedder.embed_texts([c["embed"] for c in self.chunks])
        t3 = time.perf_counter()
        self.llm = Llama(setup["model_path"], n_ctx=N_CTX, n_threads=THREADS, n_threads_batch=THREADS, verbose=False)
        self.max_tokens = setup["max_tokens"]
        self.index = {"chunks": len(self.chunks), "split_s": round(t1 - t0, 2), "embed_s": round(t3 - t2, 1),
                      "chunk_chars_median": statistics.median(len(c["text"]) for c in self.chunks),
                      "model_load_s": round(time.perf_counter() - t3, 1)}

    def ask(self, q: dict) -> dict:
        from eval import covers, score_answer

        np = self.np
        t0 = time.perf_counter()
        query = self.embedder.embed_query(q["question"])
        scores = self.vectors @ query  # unit vectors: cosine
        top = [int(i) for i in np.argsort(-scores, kind="stable")[: self.k]]
        hits = [self.chunks[i] for i in top]
        prompt = peer_prompt(self.name, q["question"], hits)
        t_retrieved = time.perf_counter()
        first = None
        pieces = []
        for chunk in self.llm.create_chat_completion([{"role": "user", "content": prompt}], temperature=0.0,
                                                     top_k=1, repeat_penalty=1.0, max_tokens=self.max_tokens,
                                                     stream=True):
            text = chunk["choices"][0]["delta"].get("content")
            if text:
                if first is None:
                    first = time.perf_counter()
                pieces.append(text)
        done = time.perf_counter()
        answer = "".join(pieces).strip()
        row = {"qid": q["qid"], "answer": answer, "source_recall": covers([h["text"] for h in hits], q["gold_text"]),
               "first_token_s": round((first or done) - t0, 3), "answer_s": round(done - t0, 3),
               "retrieve_s": round(t_retrieved - t0, 3), "answer_tokens": len(pieces),
               "prompt_tokens": self.llm.n_tokens - len(pieces),
               "hits": [f"{h['source']}@{h['start']}" for h in hits], "scores": [round(float(scores[i]), 4) for i in top]}
        row.update(score_answer(answer, q["answer"]))
        return row


# -- epi --------------------------------------------------------------------------------------------------------------

class Epi:
    """bench/answers/heldout.py's run_set, one question at a time: the same workspace, options and row."""

    def __init__(self, setup: dict):
        from dataclasses import replace

        import eval as bench_eval
        import heldout
        from episodic_cli.engine.budgets import SECOND_LOOK
        from episodic_cli.engine.llama.models import answer_model

        # as heldout.main sets it when --second-look is not given: epi ask's default
        heldout.BENCH_OPTIONS = replace(bench_eval.BENCH_OPTIONS, second_look=SECOND_LOOK)
        self.heldout = heldout
        self.warnings: list[str] = []
        self.ws = heldout.Workspace(answer_model(None), store=setup["store"], threads=None, warn=self.warnings.append)
        self.store = self.ws.store_for_reading()
        self.ws.check_store(self.store)
        self.index = {"store": setup["store"], "model": self.ws.prepared.source.name}

    def ask(self, q: dict) -> dict:
        row = self.heldout.ask(self.ws, self.store, q, "kv", self.warnings)
        return {k: row[k] for k in ("qid", "answer", "source_recall", "first_token_s", "answer_s", "contains", "f1",
                                    "exact", "prompt_tokens", "retrieved_tokens", "first_answer", "first_contains",
                                    "short_answer", "kv_fallbacks") if k in row}

    def close(self):
        self.store.close()
        self.ws.close()


def prepare_set(spec: dict, paths: list[Path], store_dir: Path, out: Path) -> None:
    """Ingest the set's documents into its own store as heldout.run_set does (files already there are skipped), and
    write what the peers read: each document's text as the store holds it, and the questions scorable here."""
    import heldout
    from episodic_cli.engine.llama.models import answer_model, reader_model

    model = answer_model(None)
    reader = reader_model(None, model)
    ws = heldout.Workspace(reader, store=str(store_dir), threads=None)
    info = heldout.ingest(ws, paths, lambda m: print(m, file=sys.stderr, flush=True))
    ws.close()
    ws = heldout.Workspace(model, store=str(store_dir), threads=None)
    store = ws.store_for_reading()
    try:
        ws.check_store(store)
        documents = [{"path": d.display_path, "text": "".join(e.text for e in store.events_of(d.id))}
                     for d in store.documents()]
        stale = heldout.stale_questions(store, spec["questions"])
        info["store_tokens"] = sum(d.n_tokens for d in store.documents())
        model_path = str(ws.prepared.path)
    finally:
        store.close()
        ws.close()
    out.write_text(json.dumps({"documents": documents, "stale": stale, "ingest": info, "model_path": model_path,
                               "max_tokens": heldout.ANSWER_MAX_TOKENS}), encoding="utf-8")


def worker(name: str, setup_file: Path) -> int:
    """One pipeline in its own process: JSON lines in on stdin (a question, or null to end), out on the stdout it was
    started with (everything else printed goes to stderr)."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    setup = json.loads(setup_file.read_text(encoding="utf-8"))
    if name == "prepare":
        prepare_set(setup["spec"], [Path(p) for p in setup["paths"]], Path(setup["store"]), Path(setup["out"]))
        channel.write(json.dumps({"vm_hwm_kb": vm_hwm_kb()}) + "\n")
        return 0
    pipeline = Epi(setup) if name == "epi" else Peer(name, setup)
    channel.write(json.dumps({"ready": pipeline.index}) + "\n")
    for line in sys.stdin:
        q = json.loads(line)
        if q is None:
            break
        channel.write(json.dumps(pipeline.ask(q)) + "\n")
    if name == "epi":
        pipeline.close()
    channel.write(json.dumps({"vm_hwm_kb": vm_hwm_kb()}) + "\n")
    return 0


class Worker:
    def __init__(self, name: str, setup: dict, tmp: Path, env: dict):
        self.name = name
        setup_file = tmp / f"{name}.json"
        setup_file.write_text(json.dumps(setup), encoding="utf-8")
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", name, str(setup_file)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env)

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker ended (exit {self.proc.wait()})")
        return json.loads(line)

    def ask(self, q: dict | None) -> dict:
        self.proc.stdin.write(json.dumps(q) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def finish(self) -> int | None:
        hwm = self.ask(None)["vm_hwm_kb"]
        self.proc.wait()
        return hwm


# -- the run ----------------------------------------------------------------------------------------------------------

def archive_paths(archive: Path, set_name: str) -> list[Path] | None:
    table = json.loads((HERE.parent / "archive" / "heldout_paths.json").read_text(encoding="utf-8"))["sets"]
    return [archive / p for p in table[set_name]["documents"]] if set_name in table else None


def library_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("langchain-text-splitters", "langchain-core", "llama-index-core", "llama_cpp_python", "tiktoken",
                 "nltk", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def epi_code(tree: Path) -> dict:
    git = lambda *a: subprocess.run(["git", *a], cwd=HERE.parents[1], capture_output=True, text=True).stdout.strip()  # noqa: E731
    if tree != HERE.parents[1]:
        return {"tree": str(tree), "commit": (tree / ".commit").read_text().strip() if (tree / ".commit").exists()
                else None, "dirty": []}
    return {"tree": str(tree), "commit": git("rev-parse", "HEAD"),
            "dirty": git("status", "--short", "--", "episodic_cli", "native", "store").splitlines()}


def run_set(spec: dict, args, log) -> dict:
    from eval import load_average
    from heldout import resolve

    paths = (archive_paths(args.archive, spec["set"]) if args.archive else None) or \
        [resolve(p) for p in spec["documents"]]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        log(f"{spec['set']}: skipped, missing {', '.join(missing)}")
        return {"set": spec["set"], "skipped": f"missing {', '.join(missing)}"}
    env = dict(os.environ)
    if args.epi_tree:
        env["PYTHONPATH"] = os.pathsep.join([str(args.epi_tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    load_start = load_average()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="peer-rag-") as tmp_name:
        tmp = Path(tmp_name)
        store = args.stores / spec["set"]
        log(f"{spec['set']}: store {store} ({'reused' if store.exists() else 'ingesting'}); documents "
            f"{', '.join(map(str, paths))}")
        prepared_file = tmp / "prepared.json"
        t0 = time.perf_counter()
        prep = Worker("prepare", {"spec": spec, "paths": [str(p) for p in paths], "store": str(store),
                                  "out": str(prepared_file)}, tmp, env)
        prep_hwm = prep.read()["vm_hwm_kb"]
        prep.proc.wait()
        prepared = json.loads(prepared_file.read_text(encoding="utf-8"))
        prepared["ingest"]["prepare_s"] = round(time.perf_counter() - t0, 1)
        prepared["ingest"]["prepare_vm_hwm_kb"] = prep_hwm
        questions = [q for q in spec["questions"] if q["qid"] not in prepared["stale"]]
        if prepared["stale"]:
            log(f"  not scored (gold excerpt not in this copy): {', '.join(prepared['stale'])}")
        setup = {"store": str(store), "documents": prepared["documents"], "model_path": prepared["model_path"],
                 "max_tokens": prepared["max_tokens"]}
        workers, index, warm = {}, {}, {}
        for name in args.pipelines:  # one at a time: their setups do not compete with each other
            workers[name] = Worker(name, setup, tmp, env)
            index[name] = workers[name].read()["ready"]
            warm[name] = workers[name].ask({"qid": "warm-up", "question": WARM_UP, "answer": "-", "gold_text": "-"})
            log(f"  {name}: ready {index[name]}; warm-up {warm[name]['first_token_s']:.1f}s")
        rows = {name: [] for name in args.pipelines}
        for i, q in enumerate(questions):
            order = list(args.pipelines[i % len(args.pipelines):]) + list(args.pipelines[:i % len(args.pipelines)])
            for name in order:
                row = workers[name].ask(q)
                row["order"] = order.index(name)
                row["load_1m"] = load_average()[0]
                rows[name].append(row)
                log(f"  {q['qid']:<18} {name:<10} {row['contains']:.0f} src={row['source_recall']:.0f} "
                    f"first={row['first_token_s']:6.2f}s all={row['answer_s']:6.2f}s {' '.join(row['answer'].split())[:60]!r}")
        peak = {name: w.finish() for name, w in workers.items()}
    return {"set": spec["set"], "kind": spec["kind"], "description": spec["description"],
            "documents": [str(p) for p in paths], "store": str(store), "ingest": prepared["ingest"],
            "stale": prepared["stale"], "questions": questions, "index": index, "warm_up": warm,
            "peak_vm_hwm_kb": peak, "rows": rows, "load_start": load_start, "load_end": load_average(),
            "wall_min": round((time.perf_counter() - t_start) / 60, 1)}


def summary(result: dict) -> dict:
    out = {}
    for name, rows in result["rows"].items():
        out[name] = {"n": len(rows), "right": int(sum(r["contains"] for r in rows)),
                     "source_recall": int(sum(r["source_recall"] for r in rows)),
                     "first_token_median_s": round(statistics.median(r["first_token_s"] for r in rows), 2),
                     "answer_median_s": round(statistics.median(r["answer_s"] for r in rows), 2),
                     "peak_mb": round(result["peak_vm_hwm_kb"][name] / 1024) if result["peak_vm_hwm_kb"][name] else None}
    return out


def table(results: list[dict]) -> list[str]:
    lines = ["| set | pipeline | right | source recall | first token median (s) | whole answer median (s) | "
             "peak memory (MB) | epi / peer right | peer / epi first token |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "summary" not in r:
            continue
        s = r["summary"]
        e = s.get("epi")
        for name, x in s.items():
            ratio_right = ratio_first = ""
            if e and name != "epi":
                ratio_right = f"{e['right']} / {x['right']}" + (f" = {e['right'] / x['right']:.2f}" if x["right"] else "")
                ratio_first = f"{x['first_token_median_s'] / e['first_token_median_s']:.1f}x"
            lines.append(f"| {r['set']} | {name} | {x['right']} of {x['n']} | {x['source_recall']} of {x['n']} | "
                         f"{x['first_token_median_s']:.2f} | {x['answer_median_s']:.2f} | {x['peak_mb']} | "
                         f"{ratio_right} | {ratio_first} |")
    return lines


def misses(result: dict) -> list[str]:
    """Questions a peer answers right that epi misses."""
    if "epi" not in result["rows"]:
        return []
    epi = {r["qid"]: r for r in result["rows"]["epi"]}
    out = []
    for name, rows in result["rows"].items():
        for r in rows:
            if name != "epi" and r["contains"] and not epi[r["qid"]]["contains"]:
                out.append(f"{result['set']} {r['qid']}: {name} {r['answer']!r}; epi {epi[r['qid']]['answer']!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", type=Path, default=HERE.parent / "heldout")
    ap.add_argument("--only", nargs="*", default=["code-pluggy", "code-truststore", "sections-book", "sections-manual"],
                    help="set names (default: the four unseen lookup sets)")
    ap.add_argument("--stores", type=Path, default=None, help="one store per set, reused (default: heldout.py's)")
    ap.add_argument("--archive", type=Path, default=None, help="read the sets' documents from this archive's copies")
    ap.add_argument("--epi-tree", type=Path, default=None, help="run epi from this copy of the code")
    ap.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "peer-rag")
    args = ap.parse_args(argv)
    import heldout
    from eval import load_average

    if args.stores is None:
        from episodic_cli.engine.paths import cache_dir

        args.stores = cache_dir() / "heldout"
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    date = datetime.now().strftime("%Y-%m-%d")
    common = {"command": "python bench/answers/peer_rag.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs", "date": date,
              "libraries": library_versions(), "epi_code": epi_code(args.epi_tree or HERE.parents[1]),
              "settings": {"threads": THREADS, "n_ctx": N_CTX, "max_tokens": heldout.ANSWER_MAX_TOKENS,
                           "langchain": {"chunk_size": LC_CHUNK, "chunk_overlap": LC_OVERLAP, "k": LC_K,
                                         "prompt": RAG_PROMPT},
                           "llamaindex": {"splitter": "SentenceSplitter() defaults", "similarity_top_k": LI_K},
                           "warm_up": WARM_UP}}
    results = []
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in heldout.load_sets(args.sets):
        if spec["set"] not in args.only:
            continue
        result = {**common, "started": datetime.now().strftime("%Y-%m-%d %H:%M"), **run_set(spec, args, log)}
        if "rows" in result:
            result["summary"] = summary(result)
            result["peer_right_epi_missed"] = misses(result)
            path = args.out / f"{date}-{spec['set']}.json"
            path.write_text(json.dumps(result, indent=1), encoding="utf-8")
            log(f"wrote {path}; load average {result['load_start']} -> {result['load_end']}")
        results.append(result)
    print("\n".join(table(results)))
    for r in results:
        for m in misses(r) if "rows" in r else []:
            print("peer right, epi wrong:", m)
    print("load average now", load_average())
    return 0 if any("rows" in r for r in results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2], Path(sys.argv[3])))
    sys.exit(main())
