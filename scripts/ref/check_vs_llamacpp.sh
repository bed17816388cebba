#!/usr/bin/env bash
# chorus vs llama.cpp on the full distributions (needs llama-cpp-python: scripts/setup.sh --with-peer).
#
# Usage: scripts/ref/check_vs_llamacpp.sh [-m MODEL] [-n 1024] [-t 2] [--chorus build/bin/chorus]
#                                         [--max-kl 4e-3] [--min-top1 0.96] [--ppl-chunks N] [-c 512] [--keep DIR]
#                                         [--split 512]
#   1. chorus eval logits  → OURS  (n × n_vocab f32) for the first n tokens of WikiText-2 test
#   2. scripts/ref/llama_logits.py --full-out → REF (the same, from llama.cpp; goldens go to the
#      temp dir, the committed ones are not touched)
#   3. token ids must be identical (the tokenizer), then scripts/ref/compare_logits.py:
#      KL(llama.cpp || chorus) mean/p99/max, top-1 agreement; fails if mean KL > 4e-3 or
#      top-1 < 0.96 (the thresholds of tests/e2e/llamacpp_logits_test.cc: the activation-rounding
#      noise floor, docs/results/foundation.md).
#   4. with --ppl-chunks N: chorus eval ppl vs scripts/ref/llama_ppl.py on the first N chunks of -c.
#   --split P: KL and top-1 of positions [0, P) and [P, n) also reported apart (Gemma 3: 512, its window).
#   -m: another model (default SmolLM2, scripts/fetch_model.sh); its own noise floor sets --max-kl /
#   --min-top1 (Gemma 3: docs/results/gemma3.md).
# Exit status 0 only if every check passes. Temp files are removed unless --keep DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

n=1024
threads=2
model=""
max_kl=4e-3
min_top1=0.96
ctx=512
chorus=build/bin/chorus
ppl_chunks=0
keep=""
split=0
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    -m) model=$2; shift 2 ;;
    -c) ctx=$2; shift 2 ;;
    --max-kl) max_kl=$2; shift 2 ;;
    --min-top1) min_top1=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --chorus) chorus=$2; shift 2 ;;
    --ppl-chunks) ppl_chunks=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --split) split=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check_vs_llamacpp.sh: unknown option: $1 (try --help)" >&2; exit 2 ;;
  esac
done

[ -n "$model" ] || model=$(scripts/fetch_model.sh)
data=$(cd .. && pwd)/shared/data/wikitext-2/test.txt
[ -x "$chorus" ] || { echo "no $chorus: build first (scripts/setup.sh)" >&2; exit 2; }
python3 -c 'import llama_cpp' 2>/dev/null || { echo "llama-cpp-python missing: scripts/setup.sh --with-peer" >&2; exit 2; }

if [ -n "$keep" ]; then tmp=$keep; mkdir -p "$tmp"; else tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; fi

echo "==> chorus eval logits (n=$n, $threads threads)"
"$chorus" eval logits -m "$model" -f "$data" -n "$n" -t "$threads" -o "$tmp/ours.f32" --json > "$tmp/ours.json"
echo "==> llama.cpp logits (n=$n, $threads threads)"
python3 scripts/ref/llama_logits.py -m "$model" --data "$data" -n "$n" -t "$threads" \
  --out-dir "$tmp" --name ref --full-out "$tmp/ref.npy" > /dev/null

echo "==> token ids"
python3 - "$tmp/ours.json" "$tmp/ref.json" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))["tokens"]
ref = json.load(open(sys.argv[2]))["tokens"]
bad = [i for i, (a, b) in enumerate(zip(ours, ref)) if a != b]
if len(ours) != len(ref) or bad:
    i = bad[0] if bad else min(len(ours), len(ref))
    print(f"token mismatch at {i}: chorus {ours[i:i+8]} vs llama.cpp {ref[i:i+8]}")
    sys.exit(1)
print(f"identical ({len(ref)} tokens)")
PY

failed=()
echo "==> KL(llama.cpp || chorus), top-1"
python3 scripts/ref/compare_logits.py "$tmp/ref.npy" "$tmp/ours.f32" --golden "$tmp/ref.json" --split "$split" \
  --max-kl-mean "$max_kl" --min-top1 "$min_top1" || failed+=("logits")

if [ "$ppl_chunks" -gt 0 ]; then
  echo "==> perplexity, first $ppl_chunks chunks of $ctx"
  ours_ppl=$("$chorus" eval ppl -m "$model" -f "$data" -c "$ctx" -t "$threads" --chunks "$ppl_chunks" --json 2>/dev/null)
  ref_ppl=$(python3 scripts/ref/llama_ppl.py -m "$model" -f "$data" -c "$ctx" -t "$threads" --chunks "$ppl_chunks" --json 2>/dev/null)
  python3 - "$ours_ppl" "$ref_ppl" <<'PY' || failed+=("ppl")
import json, sys
o, r = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rel = abs(o["ppl"] - r["ppl"]) / r["ppl"]
print(json.dumps({"chorus_ppl": o["ppl"], "llama_cpp_ppl": r["ppl"], "rel_diff": rel,
                  "chorus_scored": o.get("scored_tokens"), "llama_cpp_scored": r["n_tokens_scored"]}))
sys.exit(0 if rel < 0.005 and o.get("scored_tokens", r["n_tokens_scored"]) == r["n_tokens_scored"] else 1)
PY
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "==> FAILED: ${failed[*]}"
  exit 1
fi
echo "==> all checks passed"
