"""Concurrency run: epi's commands started at random moments on one store for a few minutes, the KV tier's bytes
sampled every 20 ms against the budget in force at that moment (issue 30, "How it is checked").

A store is ingested with the bundled model; a second model (its weights quantized to Q8_0: another file, so another
tier whose blocks every answer must prepare from text) is made once. Then, for `--seconds`, up to `--parallel`
commands run at once, each picked at random and started after a random pause (0-3 s); the first and every fifth
command up to `--ingests` are ingests, so a run always includes them (a random draw can miss the rarer kinds):

    ingest   a new small document each time (`--answer-model none`)   rm   one of those an ingest stored
    ask      with the bundled model, or with the second one       config   --kv-budget 1MB / 5MB / 20MB / 10GB
    doctor   --quick

A sampler takes the KV space's lock (the one every block write, eviction and budget change holds), reads the
budget recorded in the store and sums the block files, every 20 ms: a sample over the budget is a violation. Every
command must end with rc 0 or one `error:` line on stderr (a second writer refused, a store being written), never a
traceback.

    python bench/faults/concurrency.py --seconds 180 --out bench/results/concurrency.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from conftest import PDF_QUESTION, TEXT_QUESTION, pdf_pages, prose_lines, text_document  # noqa: E402
from pdf_fixture import make_pdf  # noqa: E402
from episodic_cli.store.file_lock import exclusive_lock  # noqa: E402
from episodic_cli.store.records import DEFAULT_KV_BUDGET_BYTES  # noqa: E402

BUDGETS = ("1MB", "5MB", "20MB", "10GB")
SAMPLE_S = 0.02


def epi_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "episodic_cli", *map(str, args)]


def second_model(path: Path) -> Path:
    import llama_cpp as L

    from episodic_cli.engine.llama.models import bundled_model_path

    if not path.exists():
        params = L.llama_model_quantize_default_params()
        params.ftype = L.LLAMA_FTYPE_MOSTLY_Q8_0
        params.allow_requantize = True
        if L.llama_model_quantize(str(bundled_model_path()).encode(), str(path).encode(), ctypes.byref(params)):
            raise SystemExit("could not make the second model")
    return path


class Sampler(threading.Thread):
    """Every SAMPLE_S: (time, bytes of block files, budget in force), read under the KV space's lock."""

    def __init__(self, store: Path):
        super().__init__(daemon=True)
        self.store, self.samples, self.stop = store, [], threading.Event()

    def budget(self) -> int:
        conn = sqlite3.connect(f"{(self.store / 'store.sqlite3').as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'kv_budget_bytes'").fetchone()
        finally:
            conn.close()
        return DEFAULT_KV_BUDGET_BYTES if row is None else int(row[0])

    def run(self) -> None:
        lock = exclusive_lock(self.store / "kv" / "space.lock")  # what every block writer holds (store/file_lock.py)
        while not self.stop.is_set():
            with lock:
                used = 0
                for p in self.store.glob("kv/*/blocks/*/*.ekvb"):
                    try:
                        used += p.stat().st_size
                    except FileNotFoundError:
                        pass
                self.samples.append((time.monotonic(), used, self.budget()))
            time.sleep(SAMPLE_S)


def command(kind: str, rng: random.Random, store: Path, extras: list[Path], model2: Path, stored: list[str]
            ) -> list[str]:
    if kind == "ingest":  # a new document each time: a real ingest (events, blocks), not an unchanged file skipped
        extra = extras[0].with_name(f"extra-{len(extras)}.md")
        extra.write_text("\n".join(prose_lines(100 + len(extras), 40)), encoding="utf-8")
        extras.append(extra)
        return epi_cmd("ingest", extra, "--store", store, "--answer-model", "none")
    if kind == "rm":
        # a document an ingest of this run stored (else the first, never ingested: a one-line refusal)
        return epi_cmd("rm", rng.choice(stored) if stored else extras[0], "--store", store)
    if kind == "ask":
        return epi_cmd("ask", rng.choice((TEXT_QUESTION, PDF_QUESTION)), "--store", store, "--json", "--whole")
    if kind == "ask2":
        return epi_cmd("ask", rng.choice((TEXT_QUESTION, PDF_QUESTION)), "--store", store, "--json", "--whole",
                       "--model", model2)
    if kind == "config":
        return epi_cmd("config", "--store", store, "--kv-budget", rng.choice(BUDGETS))
    return epi_cmd("doctor", "--quick", "--store", store)


def told(rc: int, out: str, err: str) -> bool:
    if "Traceback" in out + err:
        return False
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return rc == 0 or (bool(lines) and lines[-1].startswith("error: ")) or (rc == 1 and "FAIL" in out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--ingests", type=int, default=2, help="at least this many of the commands are ingests")
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = args.root or Path(tempfile.mkdtemp(prefix="epi-concurrency-"))
    env = dict(os.environ, EPI_HOME=os.environ.get("EPI_HOME", str(root / "home")), EPI_MODEL="smollm2")
    os.environ.update(env)
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    pdf = make_pdf(docs / "keeper.pdf", pdf_pages())
    text = docs / "license-notes.txt"
    text.write_text(text_document(), encoding="utf-8")
    extra = docs / "extra-0.md"
    extra.write_text("\n".join(prose_lines(7, 40)), encoding="utf-8")
    extras = [extra]
    store = root / "store"
    made = subprocess.run(epi_cmd("ingest", pdf, text, "--store", store, "--answer-model", "none"),
                          capture_output=True, text=True, env=env)
    if made.returncode != 0:
        raise SystemExit(made.stderr)
    model2 = second_model(root / "second.q8_0.gguf")

    sampler = Sampler(store)
    sampler.start()
    running: list[tuple[str, subprocess.Popen, float]] = []
    finished = []
    stored: list[str] = []  # extra documents ingested (rc 0) and not removed since
    t0 = time.monotonic()
    # Weighted towards what moves the budget and writes blocks: an ingest holds the writer lock for a minute,
    # during which every config is refused (in one line), so fewer of them.
    kinds = ("ingest", "rm", "ask", "ask", "ask2", "ask2", "ask2", "config", "config", "config", "doctor")
    while time.monotonic() - t0 < args.seconds or running:
        for kind, proc, started in list(running):
            if proc.poll() is not None:
                out, err = proc.communicate()
                finished.append({"command": kind, "rc": proc.returncode, "seconds": round(time.monotonic() - started, 1),
                                 "told": told(proc.returncode, out, err),
                                 "last_line": (err.strip().splitlines() or [""])[-1][:200]})
                running.remove((kind, proc, started))
                path = proc.args[4]  # [python, -m, episodic_cli, ingest|rm, PATH, ...]
                if kind == "ingest" and proc.returncode == 0:
                    stored.append(path)
                elif kind == "rm" and proc.returncode == 0 and path in stored:
                    stored.remove(path)
        if time.monotonic() - t0 < args.seconds and len(running) < args.parallel:
            time.sleep(rng.uniform(0, 3))
            kind = rng.choice(kinds)
            started_n = len(finished) + len(running)
            if started_n % 5 == 0 and started_n // 5 < args.ingests:
                kind = "ingest"
            running.append((kind, subprocess.Popen(command(kind, rng, store, extras, model2, stored), stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE, text=True, env=env), time.monotonic()))
        time.sleep(0.05)
    sampler.stop.set()
    sampler.join()

    over = [(round(t - t0, 2), used, budget) for t, used, budget in sampler.samples if used > budget]
    by_kind: dict[str, dict] = {}
    for f in finished:
        k = by_kind.setdefault(f["command"], {"runs": 0, "rc0": 0, "one_line": 0, "untold": 0})
        k["runs"] += 1
        k["rc0"] += f["rc"] == 0
        k["one_line"] += f["rc"] != 0 and f["told"]
        k["untold"] += not f["told"]
    summary = {
        "seconds": args.seconds, "parallel": args.parallel, "commands": len(finished), "by_command": by_kind,
        "samples": len(sampler.samples), "samples_over_budget": len(over), "first_over": over[:5],
        "peak_bytes": max((u for _, u, _ in sampler.samples), default=0),
        "budgets_seen": sorted({b for _, _, b in sampler.samples}),
        "untold_failures": sum(not f["told"] for f in finished),
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
    }
    summary["pass"] = not over and not summary["untold_failures"]
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "runs": finished}, indent=1) + "\n")


if __name__ == "__main__":
    main()
