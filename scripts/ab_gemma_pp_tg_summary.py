#!/usr/bin/env python3
"""Medians (min-max) per thread count and test of scripts/ab_gemma_pp_tg.sh's JSON lines: A, B, llama.cpp (L)."""
import json
import statistics as st
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
for t in sorted({r["t"] for r in rows}):
    for k in ("pp", "tg"):
        med, out = {}, []
        for who in ("A", "B", "L"):
            v = [r[k] for r in rows if r["t"] == t and r["who"] == who]
            if v:
                med[who] = st.median(v)
                out.append(f"{who} {med[who]:.1f} ({min(v):.1f}-{max(v):.1f})")
        ratio = f"  B/A {med['B'] / med['A']:.3f}" if "A" in med and "B" in med else ""
        if "L" in med:
            ratio += "".join(f"  {w}/L {med[w] / med['L']:.3f}" for w in ("A", "B") if w in med)
        print(f"t={t} {k}: " + " | ".join(out) + ratio)
loads = [r["load"] for r in rows]
print(f"load average {min(loads):.1f}-{max(loads):.1f}")
for t in sorted({r["t"] for r in rows}):
    p = [r["int8"] / 1e9 for r in rows if r["t"] == t and "int8" in r]
    b = [r["read_bw"] / 1e9 for r in rows if r["t"] == t and "read_bw" in r]
    if p:
        print(f"t={t} probe: int8 {min(p):.0f}-{max(p):.0f} G ops/s, read {min(b):.1f}-{max(b):.1f} GB/s")
