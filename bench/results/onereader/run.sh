#!/bin/bash
# One reader (issue 36 item 1): the 4 unseen lookup sets cut by Qwen 1.5B against cut by SmolLM2 (reembedded copies).
. /work/venv/bin/activate
cd /work/main
L=/work/logs/onereader
UNSEEN="code-truststore code-pluggy sections-book sections-manual"
echo "== start $(date +%T)"
mkdir -p /work/stores/tworeader
for s in $UNSEEN; do
  [ -d /work/stores/tworeader/$s ] || cp -a /work/stores/heldout/$s /work/stores/tworeader/$s
  epi reembed --store /work/stores/tworeader/$s --json > $L/reembed-$s.json 2>&1
done
echo "== reembedded $(date +%T)"
python bench/answers/heldout.py --retrieval --stores /work/stores/tworeader --only $UNSEEN --out $L/ret-two > $L/ret-two.log 2>&1
echo "== two-reader retrieval $(date +%T)"
EPI_MODEL=qwen-1.5b python bench/answers/heldout.py --retrieval --stores /work/stores/onereader --only $UNSEEN --out $L/ret-one > $L/ret-one.log 2>&1
echo "== one-reader ingest+retrieval $(date +%T)"
EPI_MODEL=qwen-1.5b python bench/answers/heldout.py --stores /work/stores/onereader --only $UNSEEN --modes kv --whole --tag onereader-unseen --out $L > $L/ans-one.log 2>&1
echo "== one-reader answers $(date +%T)"
python bench/answers/heldout.py --stores /work/stores/tworeader --only $UNSEEN --model qwen-1.5b --modes kv --whole --tag tworeader-unseen --out $L > $L/ans-two.log 2>&1
echo "== two-reader answers $(date +%T)"
SEEN="pdf-spec book code pdf-manual epub-rustbook html-valgrind"
for s in $SEEN; do
  [ -d /work/stores/tworeader/$s ] || cp -a /work/stores/heldout/$s /work/stores/tworeader/$s
  epi reembed --store /work/stores/tworeader/$s --json > $L/reembed-$s.json 2>&1
done
python bench/answers/heldout.py --retrieval --stores /work/stores/tworeader --only $SEEN --out $L/ret-two-seen > $L/ret-two-seen.log 2>&1
echo "== two-reader seen retrieval $(date +%T)"
for s in $SEEN; do
  EPI_MODEL=qwen-1.5b python bench/answers/heldout.py --retrieval --stores /work/stores/onereader --only $s --out $L/ret-one-$s > $L/ret-one-$s.log 2>&1
  echo "== one-reader $s $(date +%T)"
done
echo "== done $(date +%T)"
