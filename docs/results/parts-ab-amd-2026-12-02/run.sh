#!/usr/bin/env bash
# Interleaved A/B: pre = 5295823 (before the attention parts), new = main db9245d (attention parts, before the gemmaspeed merge); SmolLM2 Q4_1.
cd /work/main
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
O=/work/notes/s27/ab
for rep in 1 2 3; do
  for side in pre new; do
    bin=/work/notes/s27/ab/chorus-db9245d; [ $side = pre ] && bin=/work/wt/pre/build/bin/chorus
    f=$O/depth-$side-$rep.txt
    echo "# $side rep $rep $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $f
    $bin bench -m $M --depths 4096 --kv tq4/tq3 -t 2 --tg 64 --reps 1 --no-peer >> $f 2>&1
  done
done
for rep in 1 2; do
  for side in pre new; do
    bin=/work/notes/s27/ab/chorus-db9245d; [ $side = pre ] && bin=/work/wt/pre/build/bin/chorus
    f=$O/agents15-$side-$rep.txt
    echo "# $side rep $rep $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" > $f
    $bin bench -m $M --agents 15 --kv tq4/tq3,f16/f16 -t 2 --tg 64 --reps 1 --no-peer >> $f 2>&1
  done
done
echo done
