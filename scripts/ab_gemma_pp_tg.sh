#!/usr/bin/env bash
# Interleaved A/B of two chorus binaries beside llama.cpp, for loaded machines: per rep and thread
# count, `A bench`, `B bench` (pp/tg, --reps 1, --no-peer, each with its own warm-up and machine
# probe), then llama-bench on llama-quantize's Q4_0 conversion with flash attention off and on (the
# better of the two per test). One JSON line per measurement appended to OUT; summarize with
# scripts/results.py ab-pp-tg OUT.
# usage: scripts/ab_gemma_pp_tg.sh A_BIN B_BIN REPS "THREADS" OUT [PP TG]   (B_BIN '-': A alone beside llama.cpp)
# env: MODEL (default models/gemma-3-270m-q4_k_m.gguf), PEER_MODEL (the Q4_0 conversion), LLAMA_BENCH (one
# llama-bench or several, ':'-separated: e.g. the native build and the noamx one where native crashes in pp)
set -u
A=$1; Bn=$2; REPS=$3; THREADS=$4; OUT=$5; PP=${6:-512}; TG=${7:-128}
M=${MODEL:-models/gemma-3-270m-q4_k_m.gguf}
Q=${PEER_MODEL:-${CHORUS_PEER_DIR:-.cache/peer}/models/gemma-3-270m-q4_k_m.requant-Q4_0.gguf}
for f in "$A" "$M" "$Q"; do [ -e "$f" ] || { echo "missing: $f" >&2; exit 1; }; done
# The peer's llama-bench as it is (never built from here: scripts/build_peer.sh builds it).
LB=${LLAMA_BENCH:-$(ls -d "${CHORUS_PEER_DIR:-.cache/peer}"/build-*-native/bin/llama-bench 2>/dev/null | head -1)}
[ -n "$LB" ] || { echo "no llama-bench: build it with scripts/build_peer.sh or set LLAMA_BENCH" >&2; exit 1; }
IFS=: read -r -a lbs <<< "$LB"
for lb in "${lbs[@]}"; do [ -x "$lb" ] || { echo "not an executable llama-bench: $lb" >&2; exit 1; }; done
for r in $(seq 1 "$REPS"); do
  for t in $THREADS; do
    for who in A B; do
      bin=$A; [ "$who" = B ] && bin=$Bn
      [ "$bin" = - ] && continue  # B_BIN '-': chorus A beside llama.cpp only
      "$bin" bench -m "$M" --no-peer -t "$t" --pp "$PP" --tg "$TG" --reps 1 --json 2>/dev/null |
        python3 -c "
import json, sys
d = json.load(sys.stdin); c = d['chorus']['$t']; m = d['machine']['$t']
print(json.dumps(dict(who='$who', bin='$bin', t=$t, rep=$r, pp=c['pp'], tg=c['tg'], load=d['load_average_before'],
                      read_bw=m['read_bytes_per_s'], int8=m['int8_ops_per_s'])))" >> "$OUT"
    done
    # Each llama-bench (LLAMA_BENCH may list several builds, ':'-separated), pp and tg in separate runs
    # (a build that crashes in one test still reports the other); FA off and on, the better of the two.
    for lb in "${lbs[@]}"; do
      for test in pp tg; do
        if [ $test = pp ]; then args=(-p "$PP" -n 0); else args=(-p 0 -n "$TG"); fi
        "$lb" -m "$Q" -t "$t" "${args[@]}" -r 1 -fa 0,1 -o jsonl 2>/dev/null | python3 -c "
import json, os, sys
fa = {}
for line in sys.stdin:
    d = json.loads(line)
    fa[d['flash_attn']] = d['avg_ts']
if fa:
    print(json.dumps(dict(who='L', peer='$lb', t=$t, rep=$r, $test=max(fa.values()), ${test}_fa=fa,
                          load=os.getloadavg()[0])))
else:
    print('llama-bench $lb gave no $test result (t=$t rep $r)', file=sys.stderr)" >> "$OUT"
      done
    done
  done
done
