#!/usr/bin/env bash
# PolyKV paper reproduction on SmolLM2-135M: writes docs/results/polykv.md.
# Usage: scripts/polykv_repro.sh [THREADS] [JSON_IN]   (JSON_IN: reuse a saved `chorus eval polykv --json`)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-2}
model=$(scripts/fetch_model.sh)
cmd="build/bin/chorus eval polykv -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f ../shared/data/wikitext-2/test.txt -t $threads -n 32 --json"
if [ -n "${2:-}" ]; then json=$(cat "$2"); else echo "$cmd" >&2; json=$($cmd); fi
mkdir -p docs/results
python3 - "$json" "$cmd" > docs/results/polykv.md <<'PY'
import json, sys
r = json.loads(sys.argv[1]); cmd = sys.argv[2]
print("# PolyKV reproduction — SmolLM2-135M-Instruct Q4_1, WikiText-2 test\n")
print("```\n" + cmd + "\n```\n")
print("Protocol (the paper's): a document of D tokens cut from WikiText-2 test; its first 70 % is "
      "prefilled once into a shared pool, compressed with the shared K/V formats and frozen; "
      "perplexity of the remaining 30 % is scored given the pool (base: the same with f16 KV). Then N "
      "agents (one question each, the pool inside the chat template's user turn) answer greedily, "
      f"{r['max_tokens']} tokens at most, all decoding in one batch per step, each with its own KV "
      f"({r['private_kv']}, f16 window of the newest <32 tokens). **KV bytes are measured** (peak over "
      "the run: pool blocks with scales/norms, windows, block tables, every agent's own KV) and "
      "compared with **fp16** copies of the pool plus each agent's own tokens for every agent (the "
      "paper compared against fp32). Answer agreement: token-level F1 of each agent's answer against "
      "the same agent with f16 KV, and how many answers are identical.\n")
print("polykv-paper = the paper's scheme exactly: K int8 with one absmax scale per layer, V TurboQuant-MSE "
      "3-bit (tq3), no f16 sink block, agents' own KV in the same formats. The other rows keep the first "
      "32-token block f16 and give agents q8/q8 own blocks.\n")
for d in r["documents"]:
    print(f"## Document of {d['doc_tokens']} tokens (pool {d['pool_tokens']}), base PPL {d['base_ppl']:.4f}\n")
    print("| shared K / V | N | KV held (MiB) | fp16 copies (MiB) | reduction | ΔPPL | answer F1 | identical | mean answer tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in d["configs"]:
        for a in c["agents"]:
            print(f"| {c['config']} | {a['n']} | {a['kv_bytes']/2**20:.2f} | {a['fp16_copies_bytes']/2**20:.2f} | "
                  f"{a['reduction_pct']:.2f} % | {c['ppl_delta_pct']:+.2f} % | {a['answer_f1']:.3f} | "
                  f"{a['answers_identical']}/{a['n']} | {a.get('mean_answer_tokens', 0):.1f} |")
    print()
PY
cat docs/results/polykv.md | head -5
