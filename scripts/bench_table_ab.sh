#!/usr/bin/env bash
# Before/after speed of two chorus binaries on bench_table.sh's chorus rows, interleaved so that a
# loaded or drifting machine hits both alike: per round, pp512/tg128, decode at depth 0 and 4096
# (f16/f16, tq4/tq3), and 1 and 15 agents on one 4096-token shared document (tq4/tq3, f16/f16), each
# row group run by A then B (odd rounds) or B then A (even rounds), --reps 1, --no-peer. The peer is
# the same binary on both sides, so it is not rerun. Each run's JSON goes to OUT/<A|B>-<group>-r<N>.json;
# `python3 scripts/results.py ab OUT` prints every row's median, min–max and B/A ratio.
#
# Usage: scripts/bench_table_ab.sh A_BIN B_BIN [-m MODEL] [-t THREADS] [--rounds N] [--out DIR] [--doc-file FILE]
#   A_BIN, B_BIN  the two chorus binaries (e.g. a build of the old commit and build/bin/chorus)
#   -m          GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   -t          threads (default 2)
#   --rounds    interleaved rounds (default 3; about 6 minutes per round on a 2-core machine)
#   --out       output folder (default docs/results/raw/table-ab-<date>)
#   --doc-file  the text the shared document is cut from (default ../shared/data/wikitext-2/test.txt)
#   --nice N    run the benches at this niceness (root only for N < 0: other work on the machine then
#               yields its cores to them; default 0)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
case "$1" in -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
a_bin=$1 b_bin=$2; shift 2
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
threads=2 rounds=3 niceness=0
out="docs/results/raw/table-ab-$(date -u +%F)"
doc=../shared/data/wikitext-2/test.txt
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --doc-file) doc=$2; shift 2 ;;
    --nice) niceness=$2; shift 2 ;;
    *) echo "bench_table_ab.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for b in "$a_bin" "$b_bin"; do [ -x "$b" ] || { echo "bench_table_ab.sh: $b is not an executable" >&2; exit 1; }; done
[ -f "$model" ] || { echo "bench_table_ab.sh: no model file $model (scripts/fetch_model.sh)" >&2; exit 1; }
[ -f "$doc" ] || { echo "bench_table_ab.sh: no document text $doc (see --help: --doc-file)" >&2; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_table_ab.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 2; }
mkdir -p "$out"
{ echo "A $a_bin"; echo "B $b_bin"; echo "model $model threads $threads rounds $rounds nice $niceness"; } > "$out/setup.txt"

run() {  # run WHO GROUP ROUND: one row group of one binary, its JSON to OUT
  local who=$1 group=$2 r=$3 bin=$a_bin
  [ "$who" = B ] && bin=$b_bin
  local args=(bench -m "$model" --no-peer -t "$threads" --reps 1 --json)
  case "$group" in
    pptg) ;;
    depth) args+=(--depths 0,4096 --kv f16/f16,tq4/tq3) ;;
    agents) args+=(--agents 1,15 --kv tq4/tq3,f16/f16 --doc-file "$doc") ;;
  esac
  echo "bench_table_ab.sh: $(date -u +%T) round $r $who $group (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  nice -n "$niceness" "$bin" "${args[@]}" > "$out/$who-$group-r$r.json" 2> "$out/$who-$group-r$r.log"
}

for r in $(seq 1 "$rounds"); do
  order="A B"; [ $((r % 2)) -eq 0 ] && order="B A"
  for group in pptg depth agents; do
    for who in $order; do run "$who" "$group" "$r"; done
  done
done
python3 scripts/results.py ab "$out" | tee "$out/table.md"
