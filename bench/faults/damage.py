"""Damage campaign: random damage to each kind of file a store holds; is it found by `epi doctor`, does it change an
answer, is anything lost? (issue 30, "How it is checked").

One real store is built through the CLI with the bundled model (two documents, KV blocks), and one partial store
whose long document was interrupted after its first checkpoint (it holds a window file). Then for each file kind

    block     a KV block file (kv/<tier>/blocks/ab/<key>.ekvb)
    index     index.hnsw
    database  store.sqlite3 (the WAL folded in first)
    wal       store.sqlite3-wal (a copy taken while a connection held uncheckpointed commits)
    window    ingest/<document>-<token>.window of the partial store

and each shape

    truncate  cut the file at a random length
    flip      XOR 32 random bytes at a random place
    swap      exchange two random 64-byte ranges
    zero      zero one random 4 KiB page

`--n` damages are made, each on a fresh copy, and then, through the real entry point (`python -m episodic_cli`):
`epi doctor` (full: every block read) -> detected when it exits 1 or names a removal; one question with
`ask --json -k 3` -> changed when the answer or its sources differ from the undamaged store's, refused when the
command ends with one `error:` line; `epi doctor --repair` where doctor found something, then the archive read raw
(every event's text) -> lost when it differs from the undamaged store's (a document to ingest again). A window is
checked by resuming the ingest instead of asking: changed when the resumed document's events differ from an
uninterrupted run's.

Target: no damage changes an answer without doctor naming it; no traceback anywhere.

    python bench/faults/damage.py --n 5 --seed 30 --out bench/results/damage.json

Trials run round by round (round i: every kind and shape once), and the results file is rewritten after each, so a
run stopped by `--minutes` still covers every kind and shape evenly.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from conftest import TEXT_QUESTION, pdf_pages, prose_lines, text_document  # noqa: E402
from pdf_fixture import make_pdf  # noqa: E402

KINDS = ("block", "index", "database", "wal", "window")
SHAPES = ("truncate", "flip", "swap", "zero")
QUESTIONS = (TEXT_QUESTION,)  # one question a damage: each ask is ~25 s on a loaded 2-core machine
PAGE = 4096


def epi(*args, env: dict, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "episodic_cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def one_line_or_ok(proc: subprocess.CompletedProcess) -> bool:
    """rc 0, or a failure told in one `error:` line (doctor's table counts as told: it exits 1 by design)."""
    if "Traceback" in proc.stdout + proc.stderr:
        return False
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return proc.returncode == 0 or (lines and lines[-1].startswith("error: ")) or "store" in proc.stdout


def damage(path: Path, shape: str, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    n = len(data)
    if n == 0:
        return "empty file, untouched"
    if shape == "truncate":
        cut = rng.randrange(0, n)
        path.write_bytes(bytes(data[:cut]))
        return f"truncated {n} -> {cut} bytes"
    if shape == "flip":
        at = rng.randrange(0, max(1, n - 32))
        for i in range(at, min(n, at + 32)):
            data[i] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))
        return f"XOR of 32 bytes at {at}"
    if shape == "swap":
        a, b = sorted(rng.sample(range(0, max(2, n - 64)), 2))
        data[a : a + 64], data[b : b + 64] = data[b : b + 64], data[a : a + 64]
        path.write_bytes(bytes(data))
        return f"swapped 64 bytes at {a} and {b}"
    page = rng.randrange(0, max(1, n // PAGE))
    data[page * PAGE : (page + 1) * PAGE] = bytes(len(data[page * PAGE : (page + 1) * PAGE]))
    path.write_bytes(bytes(data))
    return f"zeroed page {page}"


def archive(store: Path) -> dict:
    """Every event's (document, ordinal, text), read raw; or the error that stopped the read."""
    try:
        conn = sqlite3.connect(f"{(store / 'store.sqlite3').as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT d.display_path, e.ordinal, e.text FROM events e "
                                "JOIN documents d ON d.id = e.document_id ORDER BY d.display_path, e.ordinal").fetchall()
        finally:
            conn.close()
        return {"events": [list(r) for r in rows]}
    except sqlite3.Error as exc:
        return {"error": str(exc)}


def answers(store: Path, env: dict) -> tuple[list, list[subprocess.CompletedProcess]]:
    out, procs = [], []
    for q in QUESTIONS:
        proc = epi("ask", q, "--store", store, "--json", "-k", "3", env=env)
        procs.append(proc)
        if proc.returncode == 0:
            d = json.loads(proc.stdout)
            out.append({"answer": d["text"], "sources": [s["event_id"] for s in d["sources"]]})
        else:
            out.append({"refused": (proc.stderr.strip().splitlines() or [""])[-1]})
    return out, procs


def build(root: Path, env: dict) -> dict:
    docs = root / "docs"
    docs.mkdir(parents=True)
    pdf = make_pdf(docs / "keeper.pdf", pdf_pages())
    text = docs / "license-notes.txt"
    text.write_text(text_document(), encoding="utf-8")
    base = root / "base"
    made = epi("ingest", pdf, text, "--store", base, "--answer-model", "none", env=env)
    if made.returncode != 0:
        raise SystemExit(made.stderr)
    conn = sqlite3.connect(base / "store.sqlite3")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    # A copy taken while a connection holds commits not yet checkpointed: its WAL is what the damage hits.
    with_wal = root / "with-wal"
    conn = sqlite3.connect(base / "store.sqlite3", isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("UPDATE documents SET ingested_at = ingested_at + 1")  # real changes: a no-op writes no frame
    conn.execute("UPDATE events SET kv_offset = 0")  # a column format 2 no longer reads
    shutil.copytree(base, with_wal)
    conn.close()
    # A partial store: the long document interrupted after its first checkpoint (a window file).
    long_doc = docs / "long.md"
    long_doc.write_text(text_document() + "\n\n" + "\n".join(prose_lines(30, 120)), encoding="utf-8")
    reference = root / "reference"
    epi("ingest", long_doc, "--store", reference, "--no-kv", "--commit-every", "4", env=env)
    partial = root / "partial"
    proc = subprocess.Popen([sys.executable, "-m", "episodic_cli", "ingest", str(long_doc), "--store", str(partial),
                             "--no-kv", "--commit-every", "4"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env)
    deadline = time.monotonic() + 600
    while not list((partial / "ingest").glob("*.window")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # its commit follows the window file
    proc.kill()
    proc.wait()
    if not list((partial / "ingest").glob("*.window")):
        raise SystemExit("the ingest ended before it could be interrupted after a checkpoint")
    baseline, _ = answers(base, env)
    return {"base": base, "with_wal": with_wal, "partial": partial, "reference": reference, "long_doc": long_doc,
            "answers": baseline, "archive": archive(base), "reference_archive": archive(reference)}


def target(kind: str, copy: Path) -> Path | None:
    if kind == "block":
        files = sorted(copy.glob("kv/*/blocks/*/*.ekvb"))
    elif kind == "index":
        files = [copy / "index.hnsw"]
    elif kind == "database":
        files = [copy / "store.sqlite3"]
    elif kind == "wal":
        files = [copy / "store.sqlite3-wal"]
    else:
        files = sorted((copy / "ingest").glob("*.window"))
    files = [f for f in files if f.is_file() and f.stat().st_size]
    return random.choice(files) if files else None


def trial(kind: str, shape: str, built: dict, root: Path, env: dict, rng: random.Random, i: int) -> dict:
    t0 = time.perf_counter()
    source = {"wal": built["with_wal"], "window": built["partial"]}.get(kind, built["base"])
    copy = root / f"trial-{kind}-{shape}-{i}"
    shutil.copytree(source, copy)
    victim = target(kind, copy)
    if victim is None:
        return {"kind": kind, "shape": shape, "skipped": "no such file in the store"}
    what = damage(victim, shape, rng)
    doctor = epi("doctor", "--store", copy, env=env)
    detected = doctor.returncode != 0 or "removed" in doctor.stdout
    procs = [doctor]
    if kind == "window":
        resumed = epi("ingest", built["long_doc"], "--store", copy, "--no-kv", "--commit-every", "4", env=env)
        procs.append(resumed)
        got = archive(copy)
        changed = got != built["reference_archive"]
        row = {"resume_rc": resumed.returncode}
    else:
        got_answers, asks = answers(copy, env)
        procs += asks
        changed = any("refused" not in g and g != b for g, b in zip(got_answers, built["answers"]))
        row = {"refused": sum("refused" in g for g in got_answers)}
    if detected:  # what --repair does with it; undetected damage is left as it is
        procs.append(epi("doctor", "--repair", "--store", copy, env=env))
    lost = kind != "window" and archive(copy) != built["archive"]
    result = {"kind": kind, "shape": shape, "file": str(victim.relative_to(copy)), "damage": what,
              "detected": detected, "answer_changed": changed, "silent_change": changed and not detected,
              "data_lost": lost, "traceback": any("Traceback" in p.stdout + p.stderr for p in procs),
              # killed by a signal (a segmentation fault in a native library): worse than a traceback
              "crashed": any(p.returncode < 0 or p.returncode >= 128 for p in procs),
              "one_line_or_ok": all(one_line_or_ok(p) for p in procs), "round": i,
              "seconds": round(time.perf_counter() - t0, 1), **row}
    shutil.rmtree(copy, ignore_errors=True)
    return result


def summarize(rows: list[dict], args, seconds: float) -> dict:
    done = [r for r in rows if "skipped" not in r]
    summary = {
        "n": args.n, "seed": args.seed, "rounds_done": len({r.get("round") for r in done}),
        "damages": len(done), "detected": sum(r["detected"] for r in done),
        "answer_changed": sum(r["answer_changed"] for r in done),
        "silent_changes": sum(r["silent_change"] for r in done), "data_lost": sum(r["data_lost"] for r in done),
        "tracebacks": sum(r["traceback"] for r in done), "crashes": sum(r.get("crashed", False) for r in done),
        "not_one_line": sum(not r["one_line_or_ok"] for r in done), "seconds": round(seconds),
        "by_kind": {k: {"damages": sum(r["kind"] == k for r in done),
                        "detected": sum(r["detected"] for r in done if r["kind"] == k),
                        "answer_changed": sum(r["answer_changed"] for r in done if r["kind"] == k),
                        "silent_changes": sum(r["silent_change"] for r in done if r["kind"] == k),
                        "data_lost": sum(r["data_lost"] for r in done if r["kind"] == k)}
                    for k in args.kinds.split(",")},
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
    }
    summary["pass"] = summary["silent_changes"] == 0 and summary["tracebacks"] == 0 and summary["crashes"] == 0
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5, help="damages per file kind and shape")
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--minutes", type=float, default=0, help="start no new damage after this long (0: no limit)")
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    random.seed(args.seed)
    rng = random.Random(args.seed)
    root = args.root or Path(tempfile.mkdtemp(prefix="epi-damage-"))
    env = dict(os.environ, EPI_HOME=os.environ.get("EPI_HOME", str(root / "home")), EPI_MODEL="smollm2")
    t0 = time.perf_counter()
    built = build(root, env)
    rows = []
    plan = [(i, kind, shape) for i in range(args.n) for kind in args.kinds.split(",") for shape in SHAPES]
    for i, kind, shape in plan:
        if args.minutes and time.perf_counter() - t0 > args.minutes * 60:
            break
        row = trial(kind, shape, built, root, env, rng, i)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:  # rewritten after each damage: a stopped run keeps what it measured
            summary = summarize(rows, args, time.perf_counter() - t0)
            args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    summary = summarize(rows, args, time.perf_counter() - t0)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
