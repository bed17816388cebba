#!/usr/bin/env bash
# KV fidelity table: SmolLM2-135M on WikiText-2 test at context 2048, compressed KV vs f16 KV on
# the same positions; writes docs/results/kv-fidelity.md.
# Usage: scripts/kv_fidelity.sh [CHUNKS (default 16)] [THREADS (default 2)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
chunks=${1:-16}
threads=${2:-2}
model=$(scripts/fetch_model.sh)
configs=q8/q8,q8/tq3,q8/tq4,tq4/tq3,kivi4/kivi4,kivi2/kivi2,tq3/tq3,tq2/tq2,polykv-paper/tq3
cmd="build/bin/chorus eval kld -m $model -f ../shared/data/wikitext-2/test.txt -c 2048 --chunks $chunks -t $threads --configs $configs --json"
echo "$cmd" >&2
out=$($cmd)
cmd0="build/bin/chorus eval kld -m $model -f ../shared/data/wikitext-2/test.txt -c 2048 --chunks $chunks -t $threads --configs q8/tq3,q8/tq4,kivi4/kivi4 --kv-sink 0 --json"
echo "$cmd0" >&2
out0=$($cmd0)
mkdir -p docs/results
python3 - "$out" "$cmd" "$out0" "$cmd0" > docs/results/kv-fidelity.md <<'PY'
import json, sys, datetime
r = json.loads(sys.argv[1]); cmd = sys.argv[2]
r0 = json.loads(sys.argv[3]); cmd0 = sys.argv[4]
print("# KV fidelity — SmolLM2-135M-Instruct Q4_1, WikiText-2 test, context 2048\n")
print(f"Measured {datetime.date.today()} by `scripts/kv_fidelity.sh`:\n\n```\n{cmd}\n```\n")
print(f"{r['chunks']} chunks of {r['ctx']} tokens; the second half of each chunk is scored "
      f"({r['scored_tokens']} positions). Base = f16 KV, PPL {r['base_ppl']:.4f}. "
      "KLD = KL(base ‖ compressed) of next-token distributions on the same positions. "
      "Bits/element are measured: bytes the KV layer holds for one 2048-token chunk (blocks with "
      "their scales/norms, the fp16 native window of <32 tokens per layer, block tables) × 8 / "
      "(tokens × layers × kv_dim × 2). Sealing is decode-faithful: a token attends to every earlier "
      "complete 32-token block in its compressed form and to its own block's tokens in fp16.\n")
print("| K / V | PPL | ΔPPL | mean KLD | p99 KLD | top-1 | bits/element |")
print("|---|---|---|---|---|---|---|")
print(f"| f16 / f16 (base) | {r['base_ppl']:.4f} | — | — | — | — | 16.00 |")
for c in r["configs"]:
    print(f"| {c['k']} / {c['v']} | {c['ppl']:.4f} | {c['ppl_delta_pct']:+.2f} % | {c['kld_mean']:.5f} | "
          f"{c['kld_p99']:.5f} | {100*c['top1']:.2f} % | {c['bits_per_element']:.2f} |")
print(f"\nThe first 32-token block of each context stays f16 (`--kv-sink 1`, the default: attention "
      "sinks); its cost is included in bits/element. Without it (`--kv-sink 0`):\n\n```\n" + cmd0 + "\n```\n")
print("| K / V (no sink block) | PPL | ΔPPL | mean KLD | p99 KLD | top-1 | bits/element |")
print("|---|---|---|---|---|---|---|")
for c in r0["configs"]:
    print(f"| {c['k']} / {c['v']} | {c['ppl']:.4f} | {c['ppl_delta_pct']:+.2f} % | {c['kld_mean']:.5f} | "
          f"{c['kld_p99']:.5f} | {100*c['top1']:.2f} % | {c['bits_per_element']:.2f} |")
print(f"\n{r['seconds'] + r0['seconds']:.0f} s on {r['threads']} threads. Noise floor for comparison: two chorus "
      "paths that differ only by float summation order (1e-7) already differ by mean KLD ≈ 0.003 and top-1 ≈ 97 % "
      "(int8 activation rounding amplifies any perturbation; see docs/results/foundation.md).")
PY
cat docs/results/kv-fidelity.md
