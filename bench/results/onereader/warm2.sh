#!/bin/bash
# Two readers as the default did it: SmolLM2's cuts, Qwen's blocks prepared by `epi warm` (document-order runs).
. /work/venv/bin/activate
cd /work/main
L=/work/logs/onereader
while pgrep -f "tag onereader-cuts-unseen" > /dev/null; do sleep 10; done
echo "== cuts done $(date +%T)"
mkdir -p /work/stores/tworeader-warm
for s in code-truststore code-pluggy sections-book sections-manual; do
  [ -d /work/stores/tworeader-warm/$s ] || cp -a /work/stores/tworeader/$s /work/stores/tworeader-warm/$s
  rm -rf /work/stores/tworeader-warm/$s/kv/Qwen*
  epi warm --model qwen-1.5b --store /work/stores/tworeader-warm/$s --json > $L/warm-$s.json 2>&1
  echo "== warmed $s $(date +%T)"
done
python bench/answers/heldout.py --stores /work/stores/tworeader-warm --only code-truststore code-pluggy sections-book sections-manual --model qwen-1.5b --modes kv --whole --tag tworeader-warm-unseen --out $L > $L/ans-two-warm.log 2>&1
echo "== two-reader warm answers $(date +%T)"
