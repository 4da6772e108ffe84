#!/bin/bash
# How bench/results/second-look/ was made (2026-12-02, issue 36). Stores: one per set, read by the answer model (the
# default ingest: `bench/answers/heldout.py --retrieval --stores $S --only SET` ingests a missing one; sections-book is a copy
# of book's, the same documents); the fresh sets' documents come from bench/heldout/named/fetch_docs.sh.
. /work/venv/bin/activate
S=/work/stores/s55 L=/work/logs/s55
# the sets the second look was chosen on: the fresh ones and three seen ones
python bench/answers/heldout.py --sets bench/heldout/fresh --stores $S --modes kv --whole --second-look on --tag s55-fresh-look --out $L/ans-fresh
python bench/answers/heldout.py --stores $S --only book pdf-manual pdf-spec --modes kv --whole --second-look on --tag s55-seen-look --out $L/ans-seen
# shown on the four unseen sets (during the last ingests), then both again on an otherwise idle machine (look2)
python bench/answers/heldout.py --stores $S --only code-truststore code-pluggy sections-book sections-manual --modes kv --whole --second-look on --tag s55-unseen-look --out $L/ans-unseen
python bench/answers/heldout.py --stores $S --only code-truststore code-pluggy sections-book sections-manual --modes kv --whole --second-look on --tag s55-unseen-look2 --out $L/ans-unseen2
python bench/answers/heldout.py --sets bench/heldout/fresh --stores $S --modes kv --whole --second-look on --tag s55-fresh-look2 --out $L/ans-fresh2
# both ways from each run: python bench/answers/second_look_compare.py bench/results/second-look/heldout-s55-*.json
# cold: copies of the unseen stores with the answer model's tier removed, 10 s of cold reading at 60 tokens/s
D=/work/stores/s55-cold; rm -rf $D; mkdir -p $D
for s in code-truststore code-pluggy sections-book sections-manual; do cp -a $S/$s $D/$s; rm -rf $D/$s/kv/Qwen2-5-Coder-1-5B-Instruct-GGUF-q8_0-*; done
python bench/answers/heldout.py --stores $D --only code-truststore code-pluggy sections-book sections-manual --modes kv --whole --cold-seconds 10 --cold-rate 60 --second-look on --tag s55-cold-look --out $L/ans-cold
# after the review's fixes (abe2bec: several sentences judged one by one, the cap as the answer's own option):
# every choosing and unseen set again, at load ~3 (the CI rehearsal beside it); the same answers as before
python bench/answers/heldout.py --sets bench/heldout/fresh --stores $S --modes kv --whole --second-look on --tag s55-fresh-look3 --out $L/ans-fresh3
python bench/answers/heldout.py --stores $S --only book pdf-manual pdf-spec --modes kv --whole --second-look on --tag s55-seen-look3 --out $L/ans-seen3
python bench/answers/heldout.py --stores $S --only code-truststore code-pluggy sections-book sections-manual --modes kv --whole --second-look on --tag s55-unseen-look3 --out $L/ans-unseen3
# two more seen sets, read again and answered after everything above (stores as the others)
python bench/answers/heldout.py --stores $S --only code epub-rustbook --modes kv --whole --second-look on --tag s55-seen2-look --out $L/ans-seen2
# after the refactors d3fdbf9 and 74c21dc, at epi ask's default (no --second-look flag): the 46 answers identical
python bench/answers/heldout.py --stores $S --only code-truststore code-pluggy sections-book sections-manual --modes kv --whole --tag s55-unseen-look4 --out $L/ans-unseen4
