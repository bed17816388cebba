#!/usr/bin/env bash
# The whole speed table of issue 15, chorus beside llama.cpp at its best, on this machine:
#   the machine probe, pp512 / tg128, decode at depth 0 and 4096, 1 and 15 agents on one 4096-token
#   shared document (with the document's prefill), at each thread count.
# Every row runs both sides in the same invocation; raw outputs (the human table on .log, one JSON
# object on .json) go to OUT, and scripts/results.py speed-table OUT prints the markdown table
# (OUT/table.md); scripts/plot_roofline.py OUT draws each row's % of the roofline (OUT/roofline.png).
#
# Usage: scripts/bench_table.sh [-m MODEL] [-t 1,2] [--out DIR] [--reps 3] [--doc-file FILE] [--agents-peer-grid G]
#   -m        GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   -t        thread counts (default 1,2)
#   --out     output folder (default docs/results/table-<date>)
#   --reps    repetitions on both sides (default 3; medians and spread are printed)
#   --doc-file  the text the shared document is cut from (default ../shared/data/wikitext-2/test.txt;
#             a user's clone has none: put WikiText-2's test.txt there or pass any long text)
#   --agents-peer-grid  llama.cpp's batched-decode settings tried: 'winners' (default: Q4_0 weights, flash
#             attention on and off, unified KV, f16 KV — the settings that won every earlier run here) or
#             'full' (original and Q4_0 weights x FA on/off x unified KV on/off x f16/q8_0 KV: 16 variants,
#             about 2 minutes per variant and repetition — hours at 3 repetitions)
# Needs: build/bin/chorus (cmake --build build) and llama.cpp's tools (scripts/build_peer.sh).
# The peer's grids (weights, flash attention, KV settings) are measured on a machine's first run and
# each row's winner is stored (.cache/peer/winners.json, scripts/ref/peer_winners.py); later runs
# measure only the winners. CHORUS_PEER_REGRID=1 measures the grids again. The first run takes about
# 35 minutes per thread count on a 2-core machine (the peer's 4K-context runs dominate).
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
threads=1,2
out="docs/results/table-$(date -u +%F)"
reps=3
doc=../shared/data/wikitext-2/test.txt
peer_grid=winners
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --doc-file) doc=$2; shift 2 ;;
    --agents-peer-grid) peer_grid=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_table.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$peer_grid" in
  winners) grid=(--weights q4_0 --fa on,off --kvu on --kv f16) ;;
  full) grid=(--weights original,q4_0 --fa on,off --kvu on,off --kv f16,q8_0) ;;
  *) echo "bench_table.sh: --agents-peer-grid must be 'winners' or 'full', got '$peer_grid'" >&2; exit 2 ;;
esac
bin=build/bin/chorus
[ -x "$bin" ] || { echo "bench_table.sh: $bin is not built (cmake --build build)" >&2; exit 1; }
[ -f "$model" ] || { echo "bench_table.sh: no model file $model (scripts/fetch_model.sh)" >&2; exit 1; }
[ -f "$doc" ] || { echo "bench_table.sh: no document text $doc (see --help: --doc-file)" >&2; exit 1; }
peer_dir=$(scripts/build_peer.sh --print-dir 2>/dev/null || true)
[ -x "$peer_dir/llama-bench" ] || { echo "bench_table.sh: llama.cpp's tools are not built (scripts/build_peer.sh)" >&2; exit 1; }
mkdir -p "$out"

step() {  # step NAME COMMAND...: one row group, JSON on stdout, the human table and progress on stderr
  local name=$1; shift
  echo "bench_table.sh: $(date -u +%T) $name: $*" >&2
  { echo "# $(date -u) load: $(cut -d' ' -f1-3 /proc/loadavg)"; echo "\$ $*"; } > "$out/$name.log"
  "$@" > "$out/$name.json" 2>> "$out/$name.log"
  echo "# done $(date -u) load: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/$name.log"
}

step machine "$bin" bench --machine -t "$threads" --json
step pptg "$bin" bench -m "$model" -t "$threads" --reps "$reps" --json
for t in ${threads//,/ }; do
  step "depth-t$t" "$bin" bench -m "$model" --depths 0,4096 --kv f16/f16,tq4/tq3 --peer-kv f16,q8_0 -t "$t" \
    --reps "$reps" --json
  step "agents-t$t" "$bin" bench -m "$model" --agents 1,15 --kv tq4/tq3,f16/f16 --doc-file "$doc" --no-peer \
    -t "$t" --reps "$reps" --json
  # llama.cpp's batched decode at its best over the grid chosen by --agents-peer-grid.
  step "agents-peer-t$t" python3 scripts/ref/llama_agents_best.py -m "$model" --agents 1,15 --threads "$t" \
    --reps "$reps" "${grid[@]}" --json
done
python3 scripts/results.py speed-table "$out" | tee "$out/table.md"
python3 scripts/plot_roofline.py "$out" "$out/roofline.png" || echo "bench_table.sh: no plot (matplotlib missing?)" >&2
