"""Which per-layer scoring finds the block that holds a question's gold excerpt? (issue 13; docs/layered.md)

For each held-out question (sets named on the command line; `needle-N` for a generated passkey haystack of N tokens,
whose store bench/kv/layered.py builds), the layered answerer assembles its pool and runs its probe; the probe's
queries are then scored against the pool's blocks in several ways, each layer keeps the best blocks within
LAYER_BUDGET tokens, and the share of layers whose choice holds the gold block is printed per variant:
- retrieval: the hybrid retrieval's own ranking (the same for every layer);
- rep-*: the stored representative keys (4 per block and layer) against the mean query of all question-part tokens
  (all), of the question's own tokens (q), or the last token (last); mean or max over the keys;
- full-*: every key of every block (read back from the cache, rotation undone): the head-summed max dot product,
  or the attention mass a softmax over the whole pool gives each block (mean query, or per question token summed).

    python bench/kv/layer_selection.py pdf-spec needle-16000
"""
import sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "answers"))
import numpy as np
from heldout import load_sets, resolve, stale_questions
from eval import covers
from pathlib import Path
import generators as gen
from episodic_cli.engine.budgets import LAYER_BUDGET
from episodic_cli.engine.workspace import Workspace
from episodic_cli.engine.paths import cache_dir
from episodic_cli.engine.answer.text_mode import Answer
from episodic_cli.engine.kv.keeper import read_cells
from episodic_cli.engine.kv.keys import unrotated_keys
from episodic_cli.engine.retrieval.retrieve import relevance_order
from episodic_cli import native

BUDGET = LAYER_BUDGET
sets = [s for s in load_sets(Path(__file__).resolve().parents[1] / "heldout") if s["set"] in sys.argv[1:]]
needles = [int(a[7:]) for a in sys.argv[1:] if a.startswith("needle-")]
jobs = [(s["set"], s["questions"]) for s in sets]
for n in needles:
    gs = gen.needle_document(n, [0.1, 0.3, 0.5, 0.7, 0.9], seed=11, nith=False)
    jobs.append((f"needle-{n}", [{"qid": q.qid, "question": q.question, "gold_text": q.gold_text} for q in gs.questions]))

def greedy(scores, sizes):
    return native.select_blocks(scores.astype(np.float32), sizes.astype(np.int32), BUDGET)

results = {}
for name, questions in jobs:
    ws = Workspace(store=str(cache_dir() / "heldout" / name))
    st = ws.store_for_reading()
    stale = set(stale_questions(st, questions))
    ans = ws.answerer("kv", st, layered=True)
    rec = {}
    orig = ans.select
    def spy(queries, positions, pool):
        rec["q"], rec["pos"], rec["pool"] = queries.copy(), positions.copy(), list(pool)
        return orig(queries, positions, pool)
    ans.select = spy
    for q in questions:
        if q["qid"] in stale: continue
        got = relevance_order(ws.retrieve(st, q["question"], 12, 1, pool=True))
        a = Answer()
        for _ in ans.stream(q["question"], got, None, time.perf_counter(), a, max_tokens=1): pass
        pool = rec["pool"]
        by_id = {r.event.id: r for r in got}
        gold = np.array([covers([by_id[e].event.text], q["gold_text"]) > 0 for _, e, _, _ in pool])
        if not gold.any(): continue
        sizes = np.array([p1 - p0 for _, _, p0, p1 in pool])
        # retrieval's own order: the best hits (highest score) first
        rank = np.array([-(by_id[e].score if by_id[e].score is not None else -1e9) for _, e, _, _ in pool])
        n_layer = rec["q"].shape[0]
        qu = unrotated_keys(rec["q"], rec["pos"], ans.rope)  # [L, T, H*d]
        H = qu.shape[2] // ans.rope.head_dim
        qtoks = ws.model.tokenize(q["question"])
        T = qu.shape[1]
        variants = {}
        variants["retrieval"] = np.tile(-rank, (n_layer, 1))
        def rep_scores(mq, reduce="mean"):
            out = np.zeros((n_layer, len(pool)))
            for b, (key, *_rest) in enumerate(pool):
                k = ans._rep_keys[key].astype(np.float32)  # [L, R, Hkv*d]
                kk = k.reshape(n_layer, k.shape[1], -1, ans.rope.head_dim)  # L R G d
                G = kk.shape[2]; qq = mq.reshape(n_layer, G, H // G, -1).sum(2)  # L G d
                dots = np.einsum("lgd,lrgd->lr", qq, kk)
                out[:, b] = dots.mean(1) if reduce == "mean" else dots.max(1)
            return out
        variants["rep-mean-all"] = rep_scores(qu.mean(1))
        variants["rep-max-all"] = rep_scores(qu.mean(1), "max")
        # tokens of the question inside the tail: the tail is "...Question: <q><|im_end|>\n<|im_start|>assistant\n"
        qs = slice(max(0, T - len(qtoks) - 6), T - 5)
        variants["rep-mean-q"] = rep_scores(qu[:, qs].mean(1))
        variants["rep-mean-last"] = rep_scores(qu[:, -1])
        # all keys of each block (unrotated), per head max of q.k, summed over heads; and attention mass
        allk = []
        for key, e, p0, p1 in pool:
            blk = read_cells(ans.session, p0, p1)
            allk.append(unrotated_keys(blk.k, blk.positions, ans.rope))  # L n Hkv*d
        def full(mq, how):
            out = np.zeros((n_layer, len(pool)))
            G = allk[0].shape[2] // ans.rope.head_dim
            qq = mq.reshape(n_layer, G, H // G, -1)  # L G h d
            logits = [np.einsum("lghd,lngd->lghn", qq, k.reshape(n_layer, k.shape[1], G, -1)) / 8.0 for k in allk]
            if how == "max":
                for b, lg in enumerate(logits): out[:, b] = lg.max(-1).sum((1, 2))
            else:  # softmax over every pool cell per head, mass per block
                cat = np.concatenate(logits, -1); m = cat.max(-1, keepdims=True)
                p = np.exp(cat - m); p /= p.sum(-1, keepdims=True)
                edges = np.cumsum([0] + [lg.shape[-1] for lg in logits])
                for b in range(len(pool)): out[:, b] = p[..., edges[b]:edges[b + 1]].sum((1, 2, 3))
            return out
        variants["full-max-q"] = full(qu[:, qs].mean(1), "max")
        variants["full-mass-q"] = full(qu[:, qs].mean(1), "mass")
        variants["full-mass-all"] = full(qu.mean(1), "mass")
        # per-token attention mass summed over question tokens
        out = np.zeros((n_layer, len(pool)))
        for t in range(qs.start, qs.stop):
            out += full(qu[:, t], "mass")
        variants["full-mass-pertoken"] = out
        for v, sc in variants.items():
            vis = greedy(sc, sizes)
            share = vis[:, gold].any(1).mean()
            rec.setdefault("rows", []).append((q["qid"], v, share))
        print(name, q["qid"], " ".join(f"{v}={vis_share:.2f}" for (qid, v, vis_share) in rec["rows"][-len(variants):]), flush=True)
    results[name] = rec.get("rows", [])
    st.close(); ws.close()
allrows = [r for rows in results.values() for r in rows]
for v in dict.fromkeys(r[1] for r in allrows):
    xs = [r[2] for r in allrows if r[1] == v]
    print(f"{v:20s} mean share {np.mean(xs):.2f}  all-layers {np.mean([x == 1 for x in xs]):.2f} n={len(xs)}")
