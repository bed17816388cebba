#!/usr/bin/env python3
"""perf profiles -> one table of kernel groups (the last 25 % of samples: the decode phase)."""
import re, subprocess, sys, os
GROUPS = [("key scores", r"ScoreBlock|ScoreKiviKeys|ScoreCols|ScoreTq|ScoreF16Rows"),
          ("value sums", r"AccumulateRows|AccumulateBlock|AccumulateKivi|AccumulateTq|AccumulateF16Rows"),
          ("softmax fold", r"SoftmaxFold|LogSumExp|expf"),
          ("Q4_1 weight matmuls (incl. packing)", r"Int8Groups<32, 8|Int8Groups<16|PackQ4|PackGeneric|PackedInt8Path"),
          ("Q8_0 output matmul (incl. packing)", r"Int8Groups<32, 1|PackQ8"),
          ("activation quantization", r"QuantizeActs"),
          ("block bookkeeping (AddBlocks, Seal, Hadamard)", r"AddBlocks|Seal|Hadamard|ExportPart|MergeState"),
          ("kernel / scheduler", r"^\[k\]")]
def profile(f):
    out = subprocess.run(['perf', 'report', '-i', f, '--sort', 'symbol', '--no-children', '--time', '75%-100%',
                          '--stdio'], capture_output=True, text=True).stdout
    acc = {g: 0.0 for g, _ in GROUPS}; acc["other"] = 0.0
    for line in out.splitlines():
        m = re.match(r'\s+([\d.]+)%\s+(\[.\])\s+(.*)', line)
        if not m: continue
        pct, kind, sym = float(m.group(1)), m.group(2), m.group(3)
        for g, rx in GROUPS:
            if re.search(rx, sym) or (rx == r"^\[k\]" and kind == "[k]"):
                acc[g] += pct; break
        else:
            acc["other"] += pct
    return acc
files = sys.argv[1:]
res = [profile(f) for f in files]
print("| kernel group | " + " | ".join(os.path.basename(f).replace('.data', '') for f in files) + " |")
print("|---" * (len(files) + 1) + "|")
for g in [g for g, _ in GROUPS] + ["other"]:
    print(f"| {g} | " + " | ".join(f"{r[g]:.1f} %" for r in res) + " |")
