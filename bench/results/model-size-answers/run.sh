#!/bin/sh
# Issue 55 point 6: Qwen2.5-Coder-0.5B-Instruct (--model qwen-0.5b) on the four unseen lookup sets and the five
# whole-question sets, at the defaults. Run from the repository root: sh bench/results/model-size-answers/run.sh
# NICE=19 to run beside another benchmark. Stores under /work/heldout-stores (outside the repo);
# documents of the whole sets from `sh bench/heldout/whole/fetch_docs.sh /work/heldout-docs`.
set -u
OUT=bench/results/model-size-answers
N="nice -n ${NICE:-0}"
STOP_AFTER=${STOP_AFTER:-2340}   # no new step starts after this time (HHMM)
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a $OUT/run.log; }
late() { [ "$(date +%H%M)" -ge "$STOP_AFTER" ] && { log "past $STOP_AFTER: not starting $1"; return 0; }; return 1; }

# 1. Lookups: the four sets not looked at, one store per set read by the 0.5B itself (one reader: its blocks kept at
#    ingest), kv mode, the retrieved events read whole from their blocks, second look on (the defaults).
log "lookup: ingest + 46 questions"
/usr/bin/time -f "lookup wall %e s, peak RSS %M KB" $N python3 bench/answers/heldout.py --model qwen-0.5b --modes kv \
    --only code-truststore code-pluggy sections-book sections-manual \
    --stores /work/heldout-stores/lookup-q05 --out $OUT --tag q05-unseen >> $OUT/lookup.log 2>&1
log "lookup done: $(tail -2 $OUT/lookup.log | tr '\n' ' ')"

# 2. Whole-question sets, smallest first; per set: ingest (blocks and map of the 0.5B), the defaults (`after`),
#    then every question read as a lookup with follow-ups glued (`before`), answers cut at ~200 tokens.
for SET in whole-code-dotenv whole-code-tenacity whole-manual-bzip2 whole-book-alice whole-book-brackenholme; do
    late "$SET" && break
    DOCS=$(python3 -c "import json;print(' '.join(json.load(open('bench/heldout/whole/$SET.json'))['documents']))")
    if [ ! -e /work/heldout-stores/whole-q05/$SET/store.sqlite3 ]; then
        log "$SET: ingest"
        /usr/bin/time -f "$SET ingest wall %e s, peak RSS %M KB" $N epi ingest $DOCS \
            --store /work/heldout-stores/whole-q05/$SET --answer-model qwen-0.5b >> $OUT/ingest-$SET.log 2>&1
        log "$SET: $(tail -1 $OUT/ingest-$SET.log)"
    fi
    late "$SET after" && break
    log "$SET: defaults"
    /usr/bin/time -f "$SET after wall %e s" $N python3 $OUT/run_whole.py --sets bench/heldout/whole --only $SET \
        --stores /work/heldout-stores/whole-q05 --model qwen-0.5b --max-tokens 200 --tag q05-after-$SET \
        >> $OUT/whole.log 2>&1
    log "$SET: $(tail -1 $OUT/whole.log)"
    late "$SET before" && break
    log "$SET: read as lookups"
    /usr/bin/time -f "$SET before wall %e s" $N python3 $OUT/run_whole.py --sets bench/heldout/whole --only $SET \
        --stores /work/heldout-stores/whole-q05 --model qwen-0.5b --max-tokens 200 --read lookup \
        --followups concat --tag q05-before-$SET >> $OUT/whole.log 2>&1
    log "$SET: $(tail -1 $OUT/whole.log)"
done
log "all done"
