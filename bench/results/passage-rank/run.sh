#!/bin/bash
# How bench/results/passage-rank/ was made (2026-12-01, issue 36). Stores: one per set, read by the answer model
# (the default ingest); fresh sets' stores are those of the named sets (bench/heldout/named/fetch_docs.sh).
. /work/venv/bin/activate
S=/work/stores/s54 L=/work/logs/s54
ALL="code epub-rustbook code-pluggy code-truststore sections-book sections-manual book pdf-manual pdf-spec html-valgrind"
UNSEEN="code-truststore code-pluggy sections-book sections-manual"
SEEN="book code epub-rustbook pdf-manual pdf-spec"
for pr in off on; do n=base; [ $pr = on ] && n=pass
  for s in $ALL; do python bench/answers/heldout.py --retrieval --passage-ranking $pr --stores $S --only $s --out $L/ret-$n-$s; done
  for s in lookup-h11 lookup-gzip lookup-ed; do
    python bench/answers/heldout.py --retrieval --passage-ranking $pr --sets bench/heldout/fresh --stores $S --only $s --out $L/ret-$n-$s
  done
  python bench/answers/heldout.py --sets bench/heldout/fresh --stores $S --modes kv --whole --passage-ranking $pr --tag s54-fresh-$pr --out $L/ans-fresh-$pr
  python bench/answers/heldout.py --stores $S --only $UNSEEN --modes kv --whole --passage-ranking $pr --tag s54-unseen-$pr --out $L/ans-unseen-$pr
  # cold: copies of the unseen stores with the answer model's tier removed, 10 s of cold reading at 60 tokens/s
  D=/work/stores/s54-cold-$pr; rm -rf $D; mkdir -p $D
  for s in $UNSEEN; do cp -a $S/$s $D/$s; rm -rf $D/$s/kv/Qwen2-5-Coder-1-5B-Instruct-GGUF-q8_0-*; done
  python bench/answers/heldout.py --stores $D --only $UNSEEN --modes kv --whole --cold-seconds 10 --cold-rate 60 --passage-ranking $pr --tag s54-cold-$pr --out $L/ans-cold-$pr
done
# the recap variant (commit ca2fd85, reverted in e0eb13d), passage ranking on
python bench/answers/heldout.py --sets bench/heldout/fresh --stores $S --modes kv --whole --passage-ranking on --recap 2 --tag s54-fresh-recap2 --out $L/ans-fresh-recap2
for rc in 0 2; do python bench/answers/heldout.py --stores $S --only $SEEN --modes kv --whole --passage-ranking on --recap $rc --tag s54-seen-recap$rc --out $L/ans-seen-recap$rc; done
python bench/answers/heldout.py --stores $S --only $UNSEEN --modes kv --whole --passage-ranking on --recap 2 --tag s54-unseen-recap2 --out $L/ans-unseen-recap2
# side by side: python bench/retrieval/compare_retrieval.py BEFORE.json AFTER.json (the per-set files merged into one each)
