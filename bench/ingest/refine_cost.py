"""What boundary refinement (EM-LLM 3.3) costs at ingest and what it changes, measured in one run.

Ingests the same ~10k-token document (CPython's pydoc_data topics prose) with `--refine none` and with
`--refine modularity` (and conductance with --all), alternating, into fresh stores with the same loaded model and
embedder. Reports each ingest's wall and process CPU time (with --threads 1 the CPU time barely moves with other
load on the machine; the wall time does); the time of the steps refinement adds, timed inside the run (robust to
other load on the machine, unlike the wall times): reading the window's cells (minus the block reads `none` does
anyway), the graph's keys and scoring the cuts (and, apart, choosing each event's representative keys, which
every kv-mode ingest does); how many surprise cuts refinement moved and how far; and the share
of cuts that fall on a paragraph break (either side of a blank line), a rough sign of where topics change in this
prose.

    python bench/ingest/refine_cost.py [--tokens 10000] [--repeat 2] [--threads N] [--no-kv] [--all]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from episodic_cli.engine.kv import keeper as kv_capture_module
from episodic_cli.engine.ingest import pipeline as ingest_module
from episodic_cli.engine.ingest import segment as segment_module
from episodic_cli.engine.ingest.token_offsets import token_char_offsets
from episodic_cli.engine.ingest.segment import SegmentParams
from episodic_cli.engine.documents.sources import discover
from episodic_cli.engine.workspace import Workspace
from episodic_cli.store import Store
from ingest_throughput import haystack


class RefineMeter:
    """Times the steps refinement adds and records (surprise cut, refined cut) per decision."""

    def __init__(self):
        self.seconds = {"read": 0.0, "keys": 0.0, "score": 0.0, "rep_keys": 0.0}
        self.moves: list[tuple[int, int]] = []

    def _timed(self, step: str, fn):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[step] += time.perf_counter() - t
        return wrapper

    def install(self) -> None:
        refine_cut = segment_module.refine_cut

        def recorded_refine_cut(keys, cuts, method):
            chosen = refine_cut(keys, cuts, method)
            self.moves.append((int(cuts[-1]), chosen))  # the surprise cut is the last candidate
            return chosen

        ingest_module.read_window = self._timed("read", ingest_module.read_window)
        ingest_module.similarity_keys = self._timed("keys", ingest_module.similarity_keys)
        segment_module.refine_cut = self._timed("score", recorded_refine_cut)
        kv_capture_module.representative_keys = self._timed("rep_keys", kv_capture_module.representative_keys)

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        self.moves = []


def document(n_tokens: int, ws: Workspace) -> str:
    """The first `n_tokens` tokens of the topics prose, cut at a token boundary."""
    text = haystack(8 * n_tokens)
    tokens = ws.model.tokenize(text)
    table = ws.model.pieces()
    offsets = token_char_offsets(text, [table[t] for t in tokens])
    return text[: offsets[min(n_tokens, len(tokens))]]


def paragraph_share(store_dir: Path) -> float:
    with Store.open_existing(store_dir) as st:
        events = st.events_of(st.documents()[0].id)
    at_break = [a.text.rstrip(" \t").endswith("\n\n") or b.text.lstrip(" \t").startswith("\n\n")
                for a, b in zip(events, events[1:])]
    return float(np.mean(at_break)) if at_break else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-kv", action="store_true", help="text-only stores (refinement still reads the keys)")
    ap.add_argument("--all", action="store_true", help="conductance too")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="epi-refine-"))
    base = Workspace(store=str(root / "unused"), threads=args.threads)
    doc = root / "topics.txt"
    doc.write_text(document(args.tokens, base), encoding="utf-8")
    base.embedder.load(batches=True)  # before timing
    meter = RefineMeter()
    meter.install()
    methods = ["none", "modularity"] + (["conductance"] if args.all else [])
    rows: dict[str, list[tuple[float, dict, int, float, float]]] = {m: [] for m in methods}
    moves: dict[str, list[tuple[int, int]]] = {}
    for run in range(args.repeat):
        for method in methods if run % 2 == 0 else methods[::-1]:
            ws = Workspace(store=str(root / f"{method}-{run}"), threads=args.threads)
            for name in ("prepared", "model", "embedder"):
                ws.__dict__[name] = base.__dict__[name]
            params = SegmentParams(refine=method)
            st = ws.store_for_writing(params)
            ingestor = ws.ingestor(st, params, None if args.no_kv else "q8_0")
            meter.reset()
            cpu = time.process_time()
            try:
                with st.writer():
                    [result] = ingestor.ingest(list(discover([doc])))
            finally:
                ingestor.close()
                st.close()
            cpu = time.process_time() - cpu
            assert result.status == "ingested", result.error
            rows[method].append((result.seconds, dict(meter.seconds), result.events, paragraph_share(st.path), cpu))
            moves[method] = meter.moves
            steps = "  ".join(f"{k} {v:.3f} s" for k, v in meter.seconds.items())
            print(f"run {run} {method:11s} {result.tokens} tokens  {result.seconds:7.2f} s (cpu {cpu:.2f} s)  {steps}  "
                  f"{result.events} events", flush=True)

    def median(method: str, pick) -> float:
        return float(np.median([pick(r) for r in rows[method]]))

    none_wall, none_read = median("none", lambda r: r[0]), median("none", lambda r: r[1]["read"])
    none_cpu = median("none", lambda r: r[4])
    print(f"\n{'refine':12s} {'ingest s':>9s} {'vs none':>8s} {'cpu s':>8s} {'vs none':>8s} {'added s':>8s} "
          f"{'added':>7s} {'rep keys':>9s} {'events':>7s} {'moved':>9s} {'mean shift':>11s} {'paragraph cuts':>15s}"
          f"   (medians of {args.repeat} runs)")
    for method in methods:
        wall = median(method, lambda r: r[0])
        added = median(method, lambda r: r[1]["read"] + r[1]["keys"] + r[1]["score"]) - none_read
        decisions = moves.get(method, [])
        moved = [beta - chosen for beta, chosen in decisions if chosen != beta]
        shift = f"{np.mean(moved):.1f} tok" if moved else "-"
        rep = median(method, lambda r: r[1]["rep_keys"]) / wall
        cpu = median(method, lambda r: r[4])
        print(f"{method:12s} {wall:9.2f} {wall / none_wall - 1:+8.1%} {cpu:8.2f} {cpu / none_cpu - 1:+8.1%} "
              f"{added:8.3f} {added / wall:7.1%} {rep:9.1%} {rows[method][0][2]:7d} "
              f"{len(moved):>4d}/{len(decisions):<4d} {shift:>11s} {rows[method][0][3]:15.0%}")


if __name__ == "__main__":
    main()
