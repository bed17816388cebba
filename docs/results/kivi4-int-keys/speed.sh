#!/bin/bash
# 15 agents on one document, kivi4/tq3, 1 thread: CHORUS_KV_INT8=1 and =0 alternated, 3 rounds, per target.
cd /work/wt-kivi-int
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
head -c 16000 examples/du_fu.txt > /tmp/kivi-res/doc16k.txt
for tgt in auto avx2; do
  for rep in 1 2 3; do
    for int8 in 1 0; do
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      out=$(CHORUS_KV_INT8=$int8 build-dev/bin/chorus agents -m $M --doc /tmp/kivi-res/doc16k.txt --questions /tmp/kivi-res/q15.txt \
            --policy kivi4/tq3 -n 32 -t 1 --json --quiet --cpu-target $tgt 2>/dev/null)
      echo "$tgt int8=$int8 rep=$rep load=[$load] $(echo "$out" | python3 -c '
import json,sys
t=sys.stdin.read(); j=json.loads(t[t.index("{"):])
keys=[k for k in j if "per_s" in k or k.endswith("_s") or "kernel" in k or "tokens" in k]
print({k:j[k] for k in keys})')"
    done
  done
done
