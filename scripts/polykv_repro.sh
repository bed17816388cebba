#!/usr/bin/env bash
# PolyKV paper reproduction on SmolLM2-135M: writes docs/results/polykv.md.
# Usage: scripts/polykv_repro.sh [THREADS] [JSON_IN]   (JSON_IN: reuse a saved `chorus eval polykv --json`)
# The committed page's own run is docs/results/polykv.json: `scripts/polykv_repro.sh 2 docs/results/polykv.json`
# writes polykv.md again, byte for byte.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${1:-2}
model=$(scripts/fetch_model.sh)
cmd="build/bin/chorus eval polykv -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f ../shared/data/wikitext-2/test.txt -t $threads -n 32 --configs polykv-paper/tq3,q8/tq3,tq4/tq3,tq4/tq2 --json"
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
      f"({r['private_kv']} blocks; window of the newest <32 tokens: {r.get('window', 'f16')} — 'auto' = q8 rows "
      "for compressed contexts, f16 rows for the f16 base). **KV bytes are measured** (peak over "
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
d = max(r["documents"], key=lambda d: d["doc_tokens"])
print(f"## Where the bytes go (document of {d['doc_tokens']} tokens)\n")
print("Per-agent private KV = (KV held at the largest N − KV held at N = 1) / (N − 1), measured; the "
      "shared part = KV held at N = 1 minus one agent. Goal of the issue: ≥ 97.7 % reduction against "
      "fp16 at 15 agents with ΔPPL ≤ +1 %.\n")
print("| shared K / V | shared (MiB) | private per agent (MiB) | reduction at max N | ΔPPL | goal |")
print("|---|---|---|---|---|---|")
for c in d["configs"]:
    ag = {a["n"]: a for a in c["agents"]}
    lo, hi = min(ag), max(ag)
    per = (ag[hi]["kv_bytes"] - ag[lo]["kv_bytes"]) / max(1, hi - lo) / 2**20
    shared = ag[lo]["kv_bytes"] / 2**20 - lo * per
    ok = ag[hi]["reduction_pct"] >= 97.7 and c["ppl_delta_pct"] <= 1.0
    print(f"| {c['config']} | {shared:.2f} | {per:.3f} | {ag[hi]['reduction_pct']:.2f} % | "
          f"{c['ppl_delta_pct']:+.2f} % | {'met' if ok else 'not met'} |")
print()
print("An agent's own KV is its prompt (the question and the chat frame, ~20 tokens) and its answer "
      "(≤ 32 tokens): one sealed block in the private formats (q8/q8) plus the native window of the "
      "newest < 32 tokens, allocated to what it holds (8-token granule) and measured at the peak, when "
      "every agent's window is nearly full at once (they decode in lockstep). The fp16 baseline counts "
      "only ~54 own tokens per agent, so the window caps the agents' part of the reduction: fp16 rows "
      "cost ~23 KB per token (30 layers × 2 × 192 × 2 bytes), q8 rows (one fp16 scale + 64 int8 per KV "
      "head) ~11.9 KB. Since 2026-11-30 the engine's window is q8 for compressed contexts "
      "(`EngineOptions::kv_window = \"auto\"`); `--kv-window f16` gives the old rows.\n")
print("Choice of the default (shared K/V; agents' own blocks q8/q8; q8 window): tq4/tq3. With the q8 "
      "window it reaches the goal at 15 agents / 5K tokens (table above). Measured before the q8 window "
      "(f16 rows, same protocol, `polykv-f16window.json`): tq4/tq3 97.53 % (ΔPPL −0.25 %), tq4/tq2 "
      "97.79 % (+0.78 %), q8/tq3 96.83 %, polykv-paper/tq3 96.86 % — only tq4/tq2 met it, at a higher "
      "PPL cost on the shorter documents. Compressing the agents' own blocks further does not move the "
      "peak much (private tq4/tq3, f16 window: 28.79 MiB either way) and raises ΔPPL (+1.69 %): the "
      "scored continuation's own recent context is then compressed too. ΔPPL on the 600-token document "
      "scores ~180 tokens: its noise is about ±1 % (the f16 base itself moved 0.3 % when the kernels' "
      "summation order changed), so read the 600 and 1.9K rows as coarse.\n")
PY
cat docs/results/polykv.md | head -5
