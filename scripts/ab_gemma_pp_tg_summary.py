#!/usr/bin/env python3
"""Medians (min-max) per thread count and test of scripts/ab_gemma_pp_tg.sh's JSON lines: A, B, llama.cpp (L)."""
import json
import os
import statistics as st
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
# Several llama.cpp builds (LLAMA_BENCH a:b): each as L:<build dir>, and L = the best build per rep and test.


def build_name(path):  # .cache/peer/build-0.3.36-native/bin/llama-bench -> build-0.3.36-native
    return os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(path))))


peers = sorted({r["peer"] for r in rows if r["who"] == "L" and "peer" in r})
if len(peers) > 1:
    best = {}
    for r in rows:
        if r["who"] != "L":
            continue
        for k in ("pp", "tg"):
            if k in r:
                key = (r["t"], r["rep"], k)
                best[key] = max(best.get(key, 0), r[k])
        r["who"] = "L:" + build_name(r["peer"])
    rows += [{"who": "L", "t": t, "rep": rep, k: v} for (t, rep, k), v in best.items()]  # derived: no load
whos = ["A", "B"] + ["L:" + build_name(p) for p in peers if len(peers) > 1] + ["L"]
for t in sorted({r["t"] for r in rows}):
    for k in ("pp", "tg"):
        med, out = {}, []
        for who in whos:
            v = [r[k] for r in rows if r["t"] == t and r["who"] == who and k in r]
            if v:
                med[who] = st.median(v)
                out.append(f"{who} {med[who]:.1f} ({min(v):.1f}-{max(v):.1f})")
        ratio = f"  B/A {med['B'] / med['A']:.3f}" if "A" in med and "B" in med else ""
        if "L" in med:
            ratio += "".join(f"  {w}/L {med[w] / med['L']:.3f}" for w in ("A", "B") if w in med)
        print(f"t={t} {k}: " + " | ".join(out) + ratio)
loads = [r["load"] for r in rows if "load" in r]
print(f"load average {min(loads):.1f}-{max(loads):.1f}")
for t in sorted({r["t"] for r in rows}):
    p = [r["int8"] / 1e9 for r in rows if r["t"] == t and "int8" in r]
    b = [r["read_bw"] / 1e9 for r in rows if r["t"] == t and "read_bw" in r]
    if p:
        print(f"t={t} probe: int8 {min(p):.0f}-{max(p):.0f} G ops/s, read {min(b):.1f}-{max(b):.1f} GB/s")
