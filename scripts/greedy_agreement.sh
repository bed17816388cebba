#!/usr/bin/env bash
# Greedy agreement with f16 KV (issue 45, must-show 5): 15 agents ask 15 questions about one
# shared 4K-token document (examples/gpl-2.txt, examples/gpl2_questions.txt) with `chorus agents`
# once per KV policy, and the answers are compared with the f16/f16 answers: how many are
# identical, and their mean common prefix in characters. q8/q8 is the engine's own noise floor
# (8-bit keys and values already flip near-tied greedy tokens).
#
# Usage: scripts/greedy_agreement.sh [-m MODEL] [-n TOKENS] [-t THREADS] [--out DIR] [POLICY...]
#   POLICY   `chorus agents --policy` values (default: q8/q8 chorus tq4/tq3 kivi4/tq4)
#   --out    where each policy's JSON goes (default build/greedy-agreement)
#   env CHORUS_BIN: the binary (default build/bin/chorus)
# Prints one line per policy; about 20 s per policy for SmolLM2-135M at 1 thread.
set -euo pipefail
cd "$(dirname "$0")/.."
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
tokens=48 threads=1 out=build/greedy-agreement
policies=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    -n) tokens=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "greedy_agreement.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) policies+=("$1"); shift ;;
  esac
done
[ ${#policies[@]} -gt 0 ] || policies=(q8/q8 chorus tq4/tq3 kivi4/tq4)
bin=${CHORUS_BIN:-build/bin/chorus}
[ -x "$bin" ] || { echo "greedy_agreement.sh: $bin is not built (cmake --build build)" >&2; exit 1; }
[ -f "$model" ] || { echo "greedy_agreement.sh: no model file $model (scripts/fetch_model.sh)" >&2; exit 1; }
mkdir -p "$out"
run() {  # run POLICY: its answers to $out/NAME.json
  local name=${1//\//-}
  "$bin" agents -m "$model" --doc examples/gpl-2.txt --questions examples/gpl2_questions.txt --policy "$1" \
    -n "$tokens" -t "$threads" --quiet --json > "$out/$name.json"
}
run f16/f16
for p in "${policies[@]}"; do run "$p"; done
python3 - "$out" "${policies[@]}" <<'PY'
import json, sys
out, policies = sys.argv[1], sys.argv[2:]
load = lambda p: json.load(open(f"{out}/{p.replace('/', '-')}.json"))
base = load("f16/f16")
def common(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
    return n
print(f"{base['cpu']}; {len(base['agents'])} questions, {base['doc_tokens']} document tokens")
print(f"{'policy':28s} {'identical':>9s} {'common chars':>12s} {'shared bytes / f16':>18s}")
for p in policies:
    r = load(p)
    pairs = list(zip(base["agents"], r["agents"]))
    same = sum(a["answer"] == b["answer"] for a, b in pairs)
    mean = sum(common(a["answer"], b["answer"]) for a, b in pairs) / len(pairs)
    print(f"{p + ' (' + r['policy_spec'] + ')':28s} {same:6d}/{len(pairs):<2d} {mean:12.1f} "
          f"{100 * r['shared_bytes'] / base['shared_bytes']:17.1f}%")
PY
