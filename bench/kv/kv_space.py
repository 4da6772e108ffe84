"""What the KV tier's disk budget costs, and whether "admit on second use once full" earns its misses.

No language model: blocks are random payloads of a chosen size, written and evicted through the real
`store.kv_tier` code (KVSpace, Tier) in a scratch directory, so every stat, unlink and fsync is the real one.

1. Eviction cost. A tier of N block files (N = 1,000, 10,000, 45,000 by default: 45,000 is a 10M-token archive's
   event count at ~220 tokens per event) is filled once, untimed (fsync skipped during that set-up only, then
   `os.sync()`), and then timed, each over `--reps` repetitions (median, min-max):
   - admit into a tier with room (`offer(on_use=True)` -> WRITTEN: one fsynced block write);
   - the first use of a block once the budget is full (-> DEFERRED: the key is remembered in `seen`);
   - its second use (-> WRITTEN after evicting the least recently used block: every block file is listed, stat'ed
     and sorted by mtime to find it);
   - `KVSpace.used_bytes()` on a fresh KVSpace object (the count from the files at open);
   - `collect_garbage(live_keys)` with every block live (a pure scan) and with 10 dead blocks to remove.
   The ratios put each cost beside the admission into a tier with room, and beside the same cost at the smallest N.
   Blocks default to 64 KiB (the bundled model's q8_0 blocks are ~12,244 bytes/token x ~220 tokens = ~2.7 MB): the
   costs are dominated by file counts, stats and fsyncs, and a tier of 45,000 real-size blocks would take ~120 GB.
   One row at the real size (`--real-blocks`, a few hundred blocks) checks that claim.

2. Admission policy. An archive of `--events` events (2,000) whose blocks do not all fit the budget
   (`--budget-blocks`, 300 blocks): ingest captures blocks in document order until the budget is full (`on_use=False`
   never evicts), then a stream of questions each retrieves `--per-question` (6) distinct events. A recurring
   question draws them from a working set of `--popular` (400) events with Zipf-like popularity (weight 1/rank^s); a
   one-off question draws events from the rest of the archive that no question ever retrieves again. Per retrieved
   event, a hit is `Tier.read(key) is not None` before anything is offered. Policies, on identical streams:
   - epi: `tier.touch(key)` for a hit, `tier.offer(..., on_use=True)` for a miss (kept only from its second use
     once the budget is full);
   - LRU: plain LRU that admits every block on its first use, emulated with the public API by offering a missed
     block twice in a row (the first offer is DEFERRED, the second admits it, evicting the least recently used).
   Also printed: the hit rate over the second half of the stream (after the warm-up), on working-set events only, of
   a tier that always held the `--budget-blocks` most popular events (a static reference, not an achievable
   policy), and the blocks each policy wrote (in real use each is an fsynced write of ~2.7 MB). The simulation skips
   fsync and sets each used block's mtime from a logical clock (questions come seconds apart in real use, hundreds
   per second here, where files touched within one kernel tick would share an mtime; `--real-mtimes` keeps the
   kernel's). Blocks are all the same size (`--policy-block-bytes`), so the budget is a block count.

    python bench/kv/kv_space.py                    # everything; ~8.5 min on 2 cores at load 8
    python bench/kv/kv_space.py --sizes 1000,10000  # without the 45,000-file tier (its set-up alone took ~2.5 min)
    python bench/kv/kv_space.py --quick            # small sizes, one seed; under ~20 s
    python bench/kv/kv_space.py --sizes 1000,10000 --reps 9 --skip-policy
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np

from episodic_cli.store.kv_tier import Admission, BlockType, KVSpace, Tier, TierConfig
from episodic_cli.store.kv_tier.block_file import block_file_bytes

REAL_BLOCK_BYTES = 12_244 * 220           # bundled model, q8_0: bytes per token x tokens per event
TIER_CONFIG = TierConfig(model_name="bench", model_sha256="00" * 32, llama_cpp_version="bench", type_k="q8_0",
                         type_v="q8_0", flash_attn=True, n_layer=30, n_head_kv=3, head_dim=64, block_kind="q8_0")
TOKENS_PER_BLOCK = 220


# -- helpers ---------------------------------------------------------------------------------------------------------

def block_key(index: int, namespace: int = 0) -> bytes:
    """A distinct 16-byte key per (namespace, index)."""
    return namespace.to_bytes(8, "little") + index.to_bytes(8, "little")


def offer(tier: Tier, key: bytes, payload: bytes, on_use: bool) -> Admission:
    return tier.offer(key, BlockType.Q8_0, TOKENS_PER_BLOCK, payload, None, on_use=on_use)


@contextlib.contextmanager
def fsync_skipped() -> Iterator[None]:
    """Set-up only: fill a tier without an fsync per file (tens of thousands of fsyncs would take minutes), then flush
    everything once so the timed operations do not pay for the set-up's writeback."""
    with mock.patch("os.fsync", lambda fd: None):
        yield
    os.sync()


def timed(operation: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = operation()
    return time.perf_counter() - start, result


@dataclass
class Timing:
    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def cell(self) -> str:
        return f"{fmt_seconds(self.median)} ({fmt_seconds(min(self.samples))}-{fmt_seconds(max(self.samples))})"


def fmt_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def expect(got: Admission, wanted: Admission, what: str) -> None:
    if got is not wanted:
        raise SystemExit(f"{what}: expected {wanted.value}, got {got.value} (the benchmark's assumptions are wrong)")


# -- 1. eviction cost ------------------------------------------------------------------------------------------------

@dataclass
class TierCosts:
    n_blocks: int
    payload_bytes: int
    setup_s: float
    admit_with_room: Timing
    defer_first_use: Timing
    admit_with_eviction: Timing
    used_bytes_fresh: Timing
    gc_all_live: Timing
    gc_ten_dead: Timing


def measure_tier(root: Path, n_blocks: int, payload_bytes: int, reps: int) -> TierCosts:
    kv_dir = root / f"tier-{n_blocks}-{payload_bytes}"
    payload = os.urandom(payload_bytes)   # one random payload for every block: ext4 does not look at the bytes
    file_bytes = block_file_bytes(payload_bytes, 0)
    roomy = KVSpace(kv_dir, budget_bytes=1 << 62)
    tier = roomy.tier(TIER_CONFIG)

    start = time.perf_counter()
    with fsync_skipped():
        for i in range(n_blocks):
            expect(offer(tier, block_key(i), payload, on_use=False), Admission.WRITTEN, "set-up")
    setup_s = time.perf_counter() - start

    # (a) a tier with room: each timed offer writes one new block (the tier grows by `reps` blocks)
    room = [timed(lambda i=i: offer(tier, block_key(i, 1), payload, on_use=True)) for i in range(reps)]
    for _, result in room:
        expect(result, Admission.WRITTEN, "admit with room")

    # (b) the budget exactly full: the first use is deferred, the second evicts the least recently used block
    full_space = KVSpace(kv_dir, budget_bytes=(n_blocks + reps) * file_bytes)
    full_tier = full_space.tier(TIER_CONFIG)
    full_space.used_bytes()  # count once, outside the timings
    defer, evict = [], []
    for i in range(reps):
        seconds, result = timed(lambda i=i: offer(full_tier, block_key(i, 2), payload, on_use=True))
        expect(result, Admission.DEFERRED, "first use, full budget")
        defer.append(seconds)
        seconds, result = timed(lambda i=i: offer(full_tier, block_key(i, 2), payload, on_use=True))
        expect(result, Admission.WRITTEN, "second use, full budget")
        evict.append(seconds)
    if full_space.used_bytes() > full_space.budget:
        raise SystemExit("the files exceed the budget after eviction")

    used_fresh = []
    for _ in range(reps):
        seconds, used = timed(lambda: KVSpace(kv_dir, budget_bytes=1 << 62).used_bytes())
        used_fresh.append(seconds)
    if used != (n_blocks + reps) * file_bytes:
        raise SystemExit(f"used_bytes() says {used}, the files hold {(n_blocks + reps) * file_bytes}")

    live = {f.key for f in roomy.block_files()}
    gc_live = [timed(lambda: roomy.collect_garbage(live))[0] for _ in range(reps)]
    gc_dead = []
    for r in range(reps):
        for i in range(10):
            offer(tier, block_key(r * 10 + i, 3), payload, on_use=False)
        seconds, (removed, _) = timed(lambda: roomy.collect_garbage(live))
        if removed != 10:
            raise SystemExit(f"collect_garbage removed {removed} blocks, 10 were dead")
        gc_dead.append(seconds)

    shutil.rmtree(kv_dir)
    return TierCosts(n_blocks, payload_bytes, setup_s, Timing([s for s, _ in room]), Timing(defer), Timing(evict),
                     Timing(used_fresh), Timing(gc_live), Timing(gc_dead))


def print_eviction_tables(results: list[TierCosts]) -> None:
    print("| block files | block size | set-up (no fsync) | admit, room | first use, full (deferred) "
          "| second use, full (evict + write) | evict / room | fresh `used_bytes()` | `collect_garbage`, all live "
          "| `collect_garbage`, 10 dead |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        ratio = r.admit_with_eviction.median / r.admit_with_room.median
        print(f"| {r.n_blocks:,} | {fmt_bytes(r.payload_bytes)} | {r.setup_s:.1f} s | {r.admit_with_room.cell()} "
              f"| {r.defer_first_use.cell()} | {r.admit_with_eviction.cell()} | {ratio:.1f}x "
              f"| {r.used_bytes_fresh.cell()} | {r.gc_all_live.cell()} | {r.gc_ten_dead.cell()} |")
    scaled = [r for r in results if r.payload_bytes == results[0].payload_bytes]
    if len(scaled) > 1:
        base = scaled[0]
        print()
        print(f"Growth with the file count (median / median at {base.n_blocks:,} files, same block size):")
        print()
        print("| block files | files ratio | admit, room | deferred | evict + write | fresh `used_bytes()` "
              "| `collect_garbage`, all live |")
        print("|---|---|---|---|---|---|---|")
        for r in scaled:
            def grow(attr: str) -> str:
                return f"{getattr(r, attr).median / getattr(base, attr).median:.1f}x"
            print(f"| {r.n_blocks:,} | {r.n_blocks / base.n_blocks:.0f}x | {grow('admit_with_room')} "
                  f"| {grow('defer_first_use')} | {grow('admit_with_eviction')} | {grow('used_bytes_fresh')} "
                  f"| {grow('gc_all_live')} |")


# -- 2. admission policy ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    n_events: int
    budget_blocks: int
    n_popular: int
    zipf_s: float
    n_questions: int
    per_question: int


def question_stream(w: Workload, one_off_share: float, seed: int) -> tuple[list[list[int]], np.ndarray]:
    """The retrieved events of each question, and the popular events by rank (most popular first)."""
    rng = np.random.default_rng(seed)
    events = rng.permutation(w.n_events)
    popular, one_off_pool = events[: w.n_popular], list(events[w.n_popular :])
    weights = 1.0 / np.arange(1, w.n_popular + 1) ** w.zipf_s
    weights /= weights.sum()
    n_one_off = round(one_off_share * w.n_questions)
    if n_one_off * w.per_question > len(one_off_pool):
        raise SystemExit("not enough events for that many one-off questions: raise --events or lower --questions")
    kinds = np.array([True] * n_one_off + [False] * (w.n_questions - n_one_off))
    rng.shuffle(kinds)
    stream = []
    for is_one_off in kinds:
        if is_one_off:
            stream.append([int(one_off_pool.pop()) for _ in range(w.per_question)])
        else:
            stream.append([int(e) for e in rng.choice(popular, size=w.per_question, replace=False, p=weights)])
    return stream, popular


@dataclass
class PolicyRun:
    hits: int = 0
    retrieved: int = 0
    popular_hits: int = 0
    popular_retrieved: int = 0
    late_hits: int = 0              # over the second half of the stream (after the warm-up)
    late_retrieved: int = 0
    blocks_written: int = 0
    distinct_mtimes: float = 1.0    # share of the tier's files whose mtime no other file shares

    @property
    def hit_rate(self) -> float:
        return self.hits / self.retrieved

    @property
    def popular_hit_rate(self) -> float:
        return self.popular_hits / max(1, self.popular_retrieved)

    @property
    def late_hit_rate(self) -> float:
        return self.late_hits / max(1, self.late_retrieved)


class LogicalClock:
    """Sets a block file's mtime (the tier's LRU clock) to a strictly increasing time after each use the tier records.
    In real use questions come seconds apart; this simulation runs hundreds per second, and the kernel stamps files
    touched within one timer tick with the same time, which would make the LRU order arbitrary among them."""

    def __init__(self, tier: Tier):
        self.tier = tier
        self.now_ns = 1_700_000_000 * 10**9

    def used(self, key: bytes) -> None:
        self.now_ns += 10**6
        os.utime(self.tier.path_of(key), ns=(self.now_ns, self.now_ns))


def run_policy(root: Path, w: Workload, stream: list[list[int]], popular: set[int], payload: bytes,
               admit_on_first_use: bool, real_mtimes: bool) -> PolicyRun:
    """One policy over one question stream. Block writes skip fsync (hit rates do not depend on it; the blocks
    written are reported instead)."""
    kv_dir = Path(tempfile.mkdtemp(dir=root))
    space = KVSpace(kv_dir, budget_bytes=w.budget_blocks * block_file_bytes(len(payload), 0))
    tier = space.tier(TIER_CONFIG)
    clock = LogicalClock(tier)
    record_use = (lambda key: None) if real_mtimes else clock.used
    run = PolicyRun()
    with fsync_skipped():
        for event in range(w.n_events):  # ingest: captures until the budget is full, never evicts
            if offer(tier, block_key(event), payload, on_use=False) is Admission.WRITTEN:
                record_use(block_key(event))
        for index, retrieved in enumerate(stream):
            late = index >= len(stream) // 2
            for event in retrieved:
                key = block_key(event)
                hit = tier.read(key) is not None
                run.retrieved += 1
                run.hits += hit
                run.late_retrieved += late
                run.late_hits += hit and late
                if event in popular:
                    run.popular_retrieved += 1
                    run.popular_hits += hit
                if hit:
                    tier.touch(key)
                    record_use(key)
                    continue
                result = offer(tier, key, payload, on_use=True)
                if admit_on_first_use and result is Admission.DEFERRED:
                    result = offer(tier, key, payload, on_use=True)
                if result in (Admission.WRITTEN, Admission.PRESENT):
                    record_use(key)
                run.blocks_written += result is Admission.WRITTEN
    mtimes = [f.mtime for f in space.block_files()]
    run.distinct_mtimes = sum(mtimes.count(m) == 1 for m in mtimes) / max(1, len(mtimes))
    if space.used_bytes() > space.budget:
        raise SystemExit("the files exceed the budget")
    shutil.rmtree(kv_dir)
    return run


def static_top_hit_rate(w: Workload, stream: list[list[int]], popular: np.ndarray) -> float:
    top = {int(e) for e in popular[: w.budget_blocks]}
    retrieved = [e for q in stream for e in q]
    return sum(e in top for e in retrieved) / len(retrieved)


def measure_policies(root: Path, w: Workload, shares: list[float], seeds: list[int], payload_bytes: int,
                     real_mtimes: bool) -> None:
    payload = os.urandom(payload_bytes)
    rows = []
    for share in shares:
        per_seed = []
        for seed in seeds:
            stream, popular = question_stream(w, share, seed)
            popular_set = {int(e) for e in popular}
            epi = run_policy(root, w, stream, popular_set, payload, False, real_mtimes)
            lru = run_policy(root, w, stream, popular_set, payload, True, real_mtimes)
            per_seed.append((epi, lru, static_top_hit_rate(w, stream, popular)))
        rows.append((share, per_seed))

    def spread(values: list[float]) -> str:
        text = f"{statistics.median(values):.3f}"
        return text if len(values) == 1 else f"{text} ({min(values):.3f}-{max(values):.3f})"

    def median_of(per_seed: list, policy: int, attr: str) -> float:
        return statistics.median(getattr(runs[policy], attr) for runs in per_seed)

    print("| one-off share | hit rate, epi (2nd use) | hit rate, LRU (1st use) | epi / LRU "
          "| second half, epi / LRU | working-set events, epi / LRU "
          f"| static top-{w.budget_blocks} | blocks written, epi / LRU |")
    print("|---|---|---|---|---|---|---|---|")
    for share, per_seed in rows:
        epi_rates = [epi.hit_rate for epi, _, _ in per_seed]
        lru_rates = [lru.hit_rate for _, lru, _ in per_seed]
        ratio = statistics.median(epi_rates) / max(1e-9, statistics.median(lru_rates))
        print(f"| {share:.0%} | {spread(epi_rates)} | {spread(lru_rates)} | {ratio:.2f}x "
              f"| {median_of(per_seed, 0, 'late_hit_rate'):.3f} / {median_of(per_seed, 1, 'late_hit_rate'):.3f} "
              f"| {median_of(per_seed, 0, 'popular_hit_rate'):.3f} / {median_of(per_seed, 1, 'popular_hit_rate'):.3f} "
              f"| {statistics.median(static for _, _, static in per_seed):.3f} "
              f"| {median_of(per_seed, 0, 'blocks_written'):.0f} / {median_of(per_seed, 1, 'blocks_written'):.0f} |")
    if real_mtimes:
        worst = min(run.distinct_mtimes for _, per_seed in rows for runs in per_seed for run in runs[:2])
        print(f"\n(Kernel mtimes: files with an mtime no other file shares, lowest over runs: {worst:.1%}.)")


# -- main ------------------------------------------------------------------------------------------------------------

def parse_list(text: str, kind: Callable[[str], float]) -> list:
    return [kind(x) for x in text.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="1,000 files, 10 real-size blocks, 5 repetitions; 1,000 events, budget 150, working set 200, "
                         "100 questions, one seed (under ~20 s)")
    ap.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a new one under /tmp)")
    ap.add_argument("--sizes", default="1000,10000,45000", help="tier sizes in block files (comma-separated)")
    ap.add_argument("--block-bytes", type=int, default=64 << 10, help="payload bytes per block for the tier sizes")
    ap.add_argument("--real-blocks", type=int, default=300,
                    help=f"one more tier of this many {fmt_bytes(REAL_BLOCK_BYTES)} blocks (0: none)")
    ap.add_argument("--reps", type=int, default=15, help="repetitions of each timed operation")
    ap.add_argument("--skip-eviction", action="store_true")
    ap.add_argument("--skip-policy", action="store_true")
    ap.add_argument("--events", type=int, default=2000, help="archive events in the policy simulation")
    ap.add_argument("--budget-blocks", type=int, default=300, help="blocks the budget holds")
    ap.add_argument("--popular", type=int, default=400, help="events of the recurring working set")
    ap.add_argument("--zipf", type=float, default=1.0, help="popularity exponent s (weight 1/rank^s)")
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--per-question", type=int, default=6, help="events each question retrieves")
    ap.add_argument("--shares", default="0,0.25,0.5,0.75", help="one-off question shares")
    ap.add_argument("--seeds", type=int, default=3, help="question streams per share (median and range)")
    ap.add_argument("--policy-block-bytes", type=int, default=16 << 10,
                    help="payload bytes per block in the simulation (hit rates do not depend on it)")
    ap.add_argument("--policy-dir", type=Path, default=Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None,
                    help="where the simulation's tiers live (default: /dev/shm when writable, a RAM filesystem: hit "
                         "rates do not depend on the disk, and it keeps the run short)")
    ap.add_argument("--real-mtimes", action="store_true",
                    help="leave the kernel's mtimes as the LRU clock instead of a strictly increasing logical one")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.reps, args.real_blocks = "1000", 5, 10
        args.events, args.budget_blocks, args.popular, args.questions, args.seeds = 1000, 150, 200, 100, 1

    root = Path(tempfile.mkdtemp(prefix="epi-kv-space-", dir=args.dir))
    try:
        load = os.getloadavg()
        print(f"# KV space benchmark ({os.cpu_count()} cores, load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, "
              f"scratch {root}, {fmt_bytes(shutil.disk_usage(root).free)} free)")
        if not args.skip_eviction:
            print("\n## Eviction cost (median (min-max) over", args.reps, "repetitions)\n", flush=True)
            results = [measure_tier(root, n, args.block_bytes, args.reps) for n in parse_list(args.sizes, int)]
            if args.real_blocks:
                results.append(measure_tier(root, args.real_blocks, REAL_BLOCK_BYTES, args.reps))
            print_eviction_tables(results)
        if not args.skip_policy:
            w = Workload(args.events, args.budget_blocks, args.popular, args.zipf, args.questions, args.per_question)
            print(f"\n## Admission policy ({w.n_events:,} events, budget {w.budget_blocks} blocks, working set "
                  f"{w.n_popular} events, Zipf s={w.zipf_s}, {w.n_questions} questions x {w.per_question} events, "
                  f"{args.seeds} seed(s))\n", flush=True)
            policy_root = Path(tempfile.mkdtemp(prefix="epi-kv-policy-", dir=args.policy_dir or root))
            print(f"(simulation files under {policy_root})\n")
            try:
                measure_policies(policy_root, w, parse_list(args.shares, float), list(range(args.seeds)),
                                 args.policy_block_bytes, args.real_mtimes)
            finally:
                shutil.rmtree(policy_root, ignore_errors=True)
        print(f"\nLoad after the run: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
