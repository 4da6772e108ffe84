#!/bin/sh
# Same day, same code, same grader: the default 1.5B on one whole set (python-dotenv), both ways, to check the
# 2026-11-27 figures the table quotes for it. Run after run.sh, from the repository root.
OUT=bench/results/model-size-answers
SET=whole-code-dotenv
DOCS=$(python3 -c "import json;print(' '.join(json.load(open('bench/heldout/whole/$SET.json'))['documents']))")
/usr/bin/time -f "1.5b $SET ingest wall %e s, peak RSS %M KB" epi ingest $DOCS \
    --store /work/heldout-stores/whole-q15/$SET --answer-model qwen-1.5b > $OUT/ingest-q15-$SET.log 2>&1
/usr/bin/time -f "1.5b $SET after wall %e s" python3 $OUT/run_whole.py --sets bench/heldout/whole --only $SET \
    --stores /work/heldout-stores/whole-q15 --model qwen-1.5b --max-tokens 200 --tag q15-after-$SET >> $OUT/whole-q15.log 2>&1
/usr/bin/time -f "1.5b $SET before wall %e s" python3 $OUT/run_whole.py --sets bench/heldout/whole --only $SET \
    --stores /work/heldout-stores/whole-q15 --model qwen-1.5b --max-tokens 200 --read lookup --followups concat \
    --tag q15-before-$SET >> $OUT/whole-q15.log 2>&1
