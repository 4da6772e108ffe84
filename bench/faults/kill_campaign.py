"""kill -9 at random moments across `epi ingest` of a corpus with one long file, then resume: does the store come out
exactly as an uninterrupted run's?

One uninterrupted `epi ingest` of the corpus into a reference store; then, into a second store, the same command is
started again and again and killed (SIGKILL) after a random delay, until `--kills` kills have landed; after each kill
the store must open (`epi ls`), and a last run goes to completion. The two stores are compared: the same documents,
each with the same events (ordinal, token span, text), none duplicated, none missing, no partial document left; then
`epi ask` must answer from the resumed store without a KV block warning. Small events and `--commit-every 4` make a
long file commit many groups, so kills land inside documents, between them, and during commits.

    python bench/faults/kill_campaign.py --kills 20 [--seed 1] [--long-tokens 12000] [--root DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INGEST_FLAGS = ["--min-tokens", "32", "--max-tokens", "96", "--commit-every", "4"]
QUESTION = "What does the documentation say about the evaluation order of expressions?"


def make_corpus(root: Path, long_tokens: int) -> list[Path]:
    """Three short real texts and one long one (CPython's pydoc topics prose, the PSF License)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ingest"))
    from ingest_throughput import haystack  # noqa: PLC0415 - the benchmarks' real prose

    root.mkdir(parents=True, exist_ok=True)
    prose = haystack(4 * long_tokens + 6000)
    paths = []
    for i in range(3):
        path = root / f"short-{i}.txt"
        path.write_text(prose[i * 2000 : (i + 1) * 2000], encoding="utf-8")
        paths.append(path)
    long = root / "long.txt"
    long.write_text(prose[6000 : 6000 + 4 * long_tokens], encoding="utf-8")
    return paths + [long]


def epi(*args: str, env: dict, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "episodic_cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def ingest_killed_after(paths: list[Path], store: Path, env: dict, delay: float) -> bool:
    """Start an ingest and SIGKILL it after `delay` seconds; False if it finished first."""
    proc = subprocess.Popen([sys.executable, "-m", "episodic_cli", "ingest", *map(str, paths), "--store", str(store),
                             *INGEST_FLAGS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        proc.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True


def contents(store: Path, env: dict) -> dict[str, list]:
    """document -> [(ordinal, token_start, token_end, text)], read through the store's own code."""
    code = ("import json, sys; from episodic_cli.store import Store\n"
            "with Store.open_existing(sys.argv[1]) as st:\n"
            "    print(json.dumps({d.display_path: {'status': d.status, 'events': [[e.ordinal, e.token_start, "
            "e.token_end, e.text] for e in st.events_of(d.id)]} for d in st.documents()}))")
    out = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def campaign(paths: list[Path], root: Path, kills: int, seed: int, env: dict) -> dict:
    reference, resumed = root / "reference", root / "resumed"
    t0 = time.perf_counter()
    done = epi("ingest", *map(str, paths), "--store", str(reference), *INGEST_FLAGS, env=env)
    if done.returncode != 0:
        raise SystemExit(f"reference ingest failed: {done.stderr.strip()}")
    full = time.perf_counter() - t0
    rng = random.Random(seed)
    landed, delays, unopenable = 0, [], 0
    while landed < kills:
        delay = rng.uniform(1.0, full)
        if ingest_killed_after(paths, resumed, env, delay):
            landed += 1
            delays.append(round(delay, 1))
            if (resumed / "store.sqlite3").exists() and epi("ls", "--store", str(resumed), env=env).returncode != 0:
                unopenable += 1
        else:  # it finished before the kill: start over on a fresh store, so every kill interrupts real work
            for path in sorted(resumed.rglob("*"), reverse=True):
                path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    final = epi("ingest", *map(str, paths), "--store", str(resumed), *INGEST_FLAGS, env=env)
    want, got = contents(reference, env), contents(resumed, env)
    ask = epi("ask", QUESTION, "--store", str(resumed), "--json", env=env)
    return {
        "kills": landed, "kill_delays_s": delays, "uninterrupted_s": round(full, 1),
        "store_unopenable_after_a_kill": unopenable, "final_rc": final.returncode,
        "same_documents": sorted(want) == sorted(got),
        "documents_with_other_events": sorted(d for d in want if want[d]["events"] != got.get(d, {}).get("events")),
        "partial_left": sorted(d for d, v in got.items() if v["status"] != "complete"),
        "events": sum(len(v["events"]) for v in want.values()),
        "ask_rc": ask.returncode, "ask_block_warnings": ask.stderr.count("KV block"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--long-tokens", type=int, default=12000, help="about how long the long file is")
    ap.add_argument("--root", type=Path, default=None)
    args = ap.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="epi-kill-"))
    env = dict(os.environ, EPI_HOME=os.environ.get("EPI_HOME", str(root / "home")))
    paths = make_corpus(root / "corpus", args.long_tokens)
    result = campaign(paths, root, args.kills, args.seed, env)
    print(json.dumps(result, indent=1))
    ok = (result["same_documents"] and not result["documents_with_other_events"] and not result["partial_left"]
          and not result["store_unopenable_after_a_kill"] and result["ask_rc"] == 0 and not result["ask_block_warnings"])
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main()
