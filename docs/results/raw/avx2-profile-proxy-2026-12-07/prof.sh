#!/bin/bash
# issue 44 must-show 1 (proxy): kernel-by-kernel profiles of the AVX2 paths (--cpu-target avx2) on the AVX-512 Xeon
cd /work/main
B=/work/m44/chorus-prof; M=models/SmolLM2-135M-Instruct.Q4_1.gguf; D=/work/m44
for kv in kivi4/tq3 tq4/tq3 f16/f16; do
  n=${kv//\//-}
  echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg): perf record -F 499 -o $D/agents15-$n.data -- $B bench -m $M --agents 15 --doc-tokens 4096 --kv $kv --no-peer -t 1 --tg 64 --reps 1 --cpu-target avx2" >> $D/commands.txt
  perf record -F 499 -o $D/agents15-$n.data -- $B bench -m $M --agents 15 --doc-tokens 4096 --kv $kv --no-peer -t 1 --tg 64 --reps 1 --cpu-target avx2 > $D/agents15-$n.txt 2>&1
  echo "$(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg): perf record -F 499 -o $D/depth4k-$n.data -- $B bench -m $M --depths 4096 --kv $kv --no-peer -t 1 --tg 128 --reps 1 --cpu-target avx2" >> $D/commands.txt
  perf record -F 499 -o $D/depth4k-$n.data -- $B bench -m $M --depths 4096 --kv $kv --no-peer -t 1 --tg 128 --reps 1 --cpu-target avx2 > $D/depth4k-$n.txt 2>&1
done
echo done >> $D/commands.txt
