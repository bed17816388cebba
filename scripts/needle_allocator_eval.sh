#!/usr/bin/env bash
# Issue 19 item 2 (Cocktail with power): one `chorus eval needle --json --cases-file` run per config,
# one after another (one thread each, at nice 10), each config's JSON in OUT/, then the summary.
#
#   scripts/needle_allocator_eval.sh OUT CASES.jsonl "CONFIG CONFIG ..." [EXTRA eval needle flags...]
#
# e.g. CONFIGS="f16 kivi4 tq4/tq3 cocktail-paper cocktail-kivi:4:t348:k4" — see
# docs/results/allocator.md ("Cocktail with power") for the cases and the configs measured. A config
# whose JSON already exists in OUT is skipped (rerun after an interruption). Binary: $CHORUS (default
# build/bin/chorus), model: $MODEL.
set -euo pipefail
out=$1 cases=$2 configs=$3
shift 3
chorus=${CHORUS:-build/bin/chorus}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$out"
for c in $configs; do
  f="$out/$(echo "$c" | tr '/:' '_-').json"
  [ -s "$f" ] && { echo "skip $c ($f exists)"; continue; }
  echo "# $(date -u +%FT%TZ) $c: load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/commands.txt"
  echo "nice -n 10 $chorus eval needle -m $model --cases-file $cases --configs $c -t 1 --json $* > $f" >> "$out/commands.txt"
  start=$(date +%s)
  nice -n 10 "$chorus" eval needle -m "$model" --cases-file "$cases" --configs "$c" -t 1 --json "$@" > "$f.tmp" 2> "$f.log"
  mv "$f.tmp" "$f"
  echo "#   done in $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/commands.txt"
done
python3 "$(dirname "$0")/results.py" needle-allocator "$out"/*.json > "$out/summary.txt"
cat "$out/summary.txt"
