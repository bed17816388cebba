#!/usr/bin/env bash
# The table of docs/results/cpu-targets.md: chorus capped to each kernel path this CPU runs
# (--cpu-target) beside llama.cpp's own llama-bench (scripts/build_peer.sh, AVX2-only variant by
# default), pp512 and tg128 on SmolLM2-135M Q4_1 and on Q4_0 / Q8_0 copies requantized with the
# peer's llama-quantize, at 1 and 2 threads. Repetitions are interleaved (chorus, peer, chorus,
# ...), each one a separate process with its own warm-up; the summary gives medians, min-max and
# ratios. Raw JSON lines go to OUT.jsonl, the summary to OUT.md.
#
# Usage: scripts/cpu_targets_bench.sh [--reps N] [--threads "1 2"] [--variant avx2|native]
#                                     [--targets "avx2 scalar"] [--models "A.gguf B.gguf"] [--out PREFIX]
#   The scalar path is measured at pp128 / tg32 (it is ~10x slower; the rate is per token).
#   --models: these GGUFs instead of the SmolLM2 set (e.g. models/gemma-3-270m-q4_k_m.gguf).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
reps=3
threads="1 2"
variant=avx2
targets="avx2 scalar"
out="docs/results/cpu-targets-$(date +%Y-%m-%d)"
user_models=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    --variant) variant="$2"; shift ;;
    --targets) targets="$2"; shift ;;
    --out) out="$2"; shift ;;
    --models) user_models="$2"; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu_targets_bench.sh: unknown option: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
bin=$(scripts/build_peer.sh --variant "$variant" --print-dir)
chorus=build/bin/chorus
[ -x "$chorus" ] || { echo "cpu_targets_bench.sh: build chorus first (ninja -C build chorus)" >&2; exit 1; }
if [ -n "$user_models" ]; then
  read -r -a models <<< "$user_models"
  for m in "${models[@]}"; do [ -f "$m" ] || { echo "cpu_targets_bench.sh: $m missing" >&2; exit 1; }; done
else
  src=models/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$src" ] || { echo "cpu_targets_bench.sh: $src missing (scripts/fetch_model.sh)" >&2; exit 1; }
  mkdir -p .cache/models
  models=("$src")
  for q in Q4_0 Q8_0; do
    m=.cache/models/SmolLM2-135M-Instruct.$q.gguf
    # Requantized from Q4_1 (no f16 source here): the weights differ, the shapes and types are real.
    [ -f "$m" ] || "$bin/llama-quantize" --allow-requantize "$src" "$m" "$q" >/dev/null 2>&1
    models+=("$m")
  done
fi
raw="$out.jsonl"
: > "$raw"
{
  echo "# $(date -u +%FT%TZ) $(uname -m) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "# chorus $(git rev-parse --short HEAD)$(git diff --quiet || echo +dirty); peer $bin"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >> "$out.log"
for rep in $(seq 1 "$reps"); do
  for m in "${models[@]}"; do
    for t in $threads; do
      for target in $targets; do
        pp=512 tg=128
        [ "$target" = scalar ] && { [ "$rep" -gt 1 ] && continue; pp=128; tg=32; }
        j=$("$chorus" bench -m "$m" -t "$t" --pp "$pp" --tg "$tg" --reps 1 --no-peer --json --cpu-target "$target" 2>/dev/null)
        echo "{\"who\":\"chorus\",\"target\":\"$target\",\"model\":\"$m\",\"threads\":$t,\"rep\":$rep,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"result\":$j}" >> "$raw"
      done
      j=$("$bin/llama-bench" -m "$m" -t "$t" -p 512 -n 128 -r 1 -o json 2>/dev/null | tr -d '\n')
      echo "{\"who\":\"llama.cpp\",\"target\":\"$variant\",\"model\":\"$m\",\"threads\":$t,\"rep\":$rep,\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",\"result\":$j}" >> "$raw"
      echo "rep $rep $(basename "$m") -t $t done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out.log"
python3 scripts/results.py cpu-targets "$raw" > "$out.md"
cat "$out.log" "$out.md"
