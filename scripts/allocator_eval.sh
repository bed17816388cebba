#!/usr/bin/env bash
# Issue 19's allocator evaluation (docs/results/allocator.md): for each corpus, one `chorus eval kld`
# run with every uniform baseline, then one run per policy row (eval kld runs one policy per call; the
# f16 base is recomputed and must agree). Outputs: OUT/CORPUS_uniform.json, OUT/CORPUS_<row>.json;
# summarise with `python3 scripts/results.py allocator OUT`.
#
#   scripts/allocator_eval.sh OUT CORPUS=FILE[,CORPUS=FILE...] ROW[,ROW...] [CHUNKS] [CTX] [THREADS]
#
# ROW: "uniform" or FAMILY:AVG[:tTIERS][:kMIN][:cal|:m] with FAMILY tq|kivi, e.g. tq:3, kivi:3:k4:cal,
# tq:4:t348 (tiers 3,4,8); :m ranks by the measured table in $SENSITIVITY_KIVI / $SENSITIVITY_TQ
# (written by `chorus eval sensitivity -o FILE --comix-family FAMILY`). Corpora: `python3 scripts/make_corpora.py DIR` (code, docs, chat) and
# WikiText-2 at ../shared/data/wikitext-2/test.txt.
set -euo pipefail
out=$1 corpora=$2 rows=$3 chunks=${4:-10} ctx=${5:-512} threads=${6:-2}
bin=${CHORUS_BIN:-build/bin/chorus}
model=${CHORUS_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
uniform=${UNIFORM_CONFIGS:-kivi2/kivi2,kivi3/kivi3,kivi4/kivi4,kivi4/kivi2,q8/kivi3,tq2/tq2,tq3/tq3,tq4/tq4,tq4/tq2,q8/tq3}
mkdir -p "$out"
IFS=, read -ra cs <<<"$corpora"
IFS=, read -ra rs <<<"$rows"
for c in "${cs[@]}"; do
  name=${c%%=*} file=${c#*=}
  for r in "${rs[@]}"; do
    dest="$out/${name}_${r//[:,]/-}.json"
    [[ -s $dest ]] && continue  # resumable
    args=(eval kld -m "$model" -f "$file" -c "$ctx" --chunks "$chunks" -t "$threads" --json)
    if [[ $r == uniform ]]; then
      args+=(--configs "$uniform")
    else
      # A row is FAMILY:AVG[:OPTS], the spec comix-FAMILY:AVG[:OPTS] (KvPolicy's grammar).
      args+=(--policy "comix-$r")
      if [[ $r == *:m || $r == *:m:* ]]; then
        fam=${r%%:*} var=SENSITIVITY_${fam^^}
        args+=(--comix-sensitivity "${!var:?":m needs $var=FILE (chorus eval sensitivity)"}")
      fi
    fi
    echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): ${args[*]}" | tee -a "$out/commands.txt" >&2
    start=$(date +%s)
    nice -n 5 "$bin" "${args[@]}" >"$dest.tmp"
    mv "$dest.tmp" "$dest"
    echo "  $(($(date +%s) - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/commands.txt" >&2
  done
done
