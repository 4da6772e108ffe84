"""Are the documents that `ingest_run.py`'s kills cut stored exactly as an uninterrupted ingest stores them?

A document in flight at a kill is the first one the next run ingests (the runs walk the archive in the same
order, and print "unchanged" for the documents already complete). Each is ingested again alone, uninterrupted,
into a fresh reference store with the same command, and the two stores' events are compared: the same ordinals,
token spans and text, none missing, none duplicated, the document no longer partial. The whole big store is also
opened and counted, and `epi doctor` run on it.

    python bench/archive/check_resumed.py --out /work/epi-1m/out --store /work/epi-1m/store [--reference DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from kill_campaign import contents  # noqa: E402 - the kill campaign's comparison, through the store's own code


def cut_documents(out: Path) -> list[str]:
    """The path of the first document each run after a kill ingested: the one the kill cut."""
    runs = sorted(out.glob("run-*.json*"), key=lambda p: int(p.stem.split("-")[1]))
    summary = json.loads((out / "summary.json").read_text())
    killed = {r["run"] for r in summary["runs"] if r["killed"]}
    cut = []
    for path in runs:
        n = int(path.stem.split("-")[1])
        if n - 1 not in killed:
            continue
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["status"] == "ingested":
                cut.append(rec["path"])
                break
    return cut


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="ingest_run.py's OUT")
    ap.add_argument("--store", type=Path, required=True, help="the big store")
    ap.add_argument("--reference", type=Path, default=None, help="where the reference stores go (default: a temp dir)")
    args = ap.parse_args()
    reference_root = args.reference or Path(tempfile.mkdtemp(prefix="epi-reference-"))
    env = dict(os.environ)
    big = contents(args.store, env)
    report = {"documents_in_store": len(big), "partial": sorted(p for p, d in big.items() if d["status"] != "complete"),
              "cut": []}
    for i, path in enumerate(cut_documents(args.out)):
        ref_store = reference_root / f"ref-{i}"
        run = subprocess.run([sys.executable, "-m", "episodic_cli", "ingest", path, "--store", str(ref_store),
                              "--answer-model", "none", "--json"], capture_output=True, text=True, env=env)
        ref = contents(ref_store, env)
        ((display, want),) = ref.items()
        got = big.get(display)  # both name the file by its absolute path
        report["cut"].append({
            "path": path, "reference_rc": run.returncode, "events": len(want["events"]),
            "identical": got is not None and got["events"] == want["events"] and got["status"] == want["status"],
            "big_store_events": None if got is None else len(got["events"])})
        print(json.dumps(report["cut"][-1]), flush=True)
    doctor = subprocess.run([sys.executable, "-m", "episodic_cli", "doctor", "--store", str(args.store)],
                            capture_output=True, text=True, env=env)
    report["doctor_rc"], report["doctor_tail"] = doctor.returncode, doctor.stdout[-2000:]
    (args.out / "resumed-check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "doctor_tail"}))


if __name__ == "__main__":
    main()
