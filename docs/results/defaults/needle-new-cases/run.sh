#!/bin/bash
# issue 45 must-show 1: needle exact answers, default (kivi4/tq3) vs f16, on a case set generated after
# the default was frozen: new seeds 61-63, corpora cut at 57a576e, WikiText-2 test.
cd /work/main
D=/work/m45/needle
for b in "a 1800 2200 61" "b 3000 3600 62" "c 4400 5000 63"; do
  set -- $b
  python3 scripts/make_needle_cases.py $D/band-$1.jsonl --corpus wiki=/work/shared/data/wikitext-2/test.txt \
    --corpus chat=/work/corpora-new/chat.txt --corpus code=/work/corpora-new/code.txt --corpus docs=/work/corpora-new/docs.txt \
    --needle 3 --read 2 --questions 4 --min-tokens $2 --max-tokens $3 --seed $4 > $D/band-$1.gen.log 2>&1
done
for b in a b c; do
  s=$(date +%s)
  echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg): build-dev/bin/chorus eval needle -m models/SmolLM2-135M-Instruct.Q4_1.gguf --cases-file $D/band-$b.jsonl --configs f16,kivi4/tq3,q8/q8 -t 1 --json" >> $D/commands.txt
  build-dev/bin/chorus eval needle -m models/SmolLM2-135M-Instruct.Q4_1.gguf --cases-file $D/band-$b.jsonl --configs f16,kivi4/tq3,q8/q8 -t 1 --json > $D/band-$b.json 2> $D/band-$b.log
  echo "  rc $? $(( $(date +%s) - s )) s" >> $D/commands.txt
done
