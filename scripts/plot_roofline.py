#!/usr/bin/env python3
"""Plot how close each row of the speed table comes to the machine's limit (issue 15, item 2).

Usage: scripts/plot_roofline.py DIR [OUT.png]   (DIR = the --out folder of scripts/bench_table.sh)

For every row the benchmark printed a roofline for — pp512, tg128, decode at depth, N agents on one
shared document — the bar is the measured tok/s as a percentage of the row's roof tok/s (the roof comes
from the bytes the step reads, measured, and the arithmetic it does, against the probe's read bandwidth,
int8 and f32 peaks taken in the same run). llama.cpp's best is drawn against the roof of chorus's row
with the same KV format (f16; pp/tg: the same row): it does the same arithmetic, and its bytes read are
not measured by us, so its bar is an approximation (its Q4_0 weights are within 1 % of the Q4_1 file's
bytes per step). The labels give the tok/s. Default output: DIR/roofline.png.
"""
from __future__ import annotations

import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import read_optional as load  # noqa: E402  (the speed table's reader of the JSON files)


def rows_for(d):
    """{threads: [(label, chorus tok/s, chorus roof tok/s, bound, peer tok/s or None, peer roof tok/s)]}"""
    out = {}
    pptg = load(os.path.join(d, "pptg.json"))
    if pptg:
        for t, c in pptg.get("chorus", {}).items():
            peer = pptg.get("llama_cpp", {}).get("threads", {}).get(t, {})
            for k in ("pp", "tg"):
                roof = pptg.get("roofline", {}).get(t, {}).get(k)
                if roof:
                    label = f"pp{pptg['pp_tokens']}" if k == "pp" else f"tg{pptg['tg_tokens']}"
                    out.setdefault(t, []).append((label, c[k], roof["roof_tok_s"], roof["bound"], peer.get(k),
                                                  roof["roof_tok_s"]))
    for path in sorted(glob.glob(os.path.join(d, "depth-t*.json"))):
        j = load(path)
        if not j:
            continue
        t = str(j["threads"])
        for row in j.get("rows", []):
            peer = row.get("llama_cpp", {})
            best = max(peer.values()) if peer else None
            f16_roof = row.get("chorus", {}).get("f16/f16", {}).get("roofline", {}).get("roof_tok_s")
            for kv, c in row.get("chorus", {}).items():
                roof = c.get("roofline")
                if roof:
                    out.setdefault(t, []).append((f"depth {row['depth']}, {kv}", c["tg"], roof["roof_tok_s"],
                                                  roof["bound"], best if kv == "f16/f16" else None, f16_roof))
    for path in sorted(glob.glob(os.path.join(d, "agents-t*.json"))):
        j = load(path)
        if not j:
            continue
        t = str(j["threads"])
        pa = (load(os.path.join(d, f"agents-peer-t{t}.json")) or {}).get("agents", {})
        for n, r in sorted(j.get("rows", {}).items(), key=lambda x: int(x[0])):
            f16_roof = r.get("chorus", {}).get("f16/f16", {}).get("roofline", {}).get("roof_tok_s")
            for kv, c in r.get("chorus", {}).items():
                roof = c.get("roofline")
                if roof:
                    p = pa.get(n, {}).get("decode_tokens_per_s")
                    out.setdefault(t, []).append((f"{n} agent(s), 4K doc, {kv}", c["decode_tokens_per_s"],
                                                  roof["roof_tok_s"], roof["bound"],
                                                  p if kv == "f16/f16" else None, f16_roof))
    return out


def main() -> None:
    if len(sys.argv) not in (2, 3) or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: plot_roofline.py DIR [OUT.png] (DIR = the --out folder of scripts/bench_table.sh)")
    d = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(d, "roofline.png")
    data = rows_for(d)
    if not data:
        sys.exit(f"plot_roofline.py: no roofline in {d}/*.json (run scripts/bench_table.sh first)")
    threads = sorted(data, key=int)
    height = max(len(v) for v in data.values())
    fig, axes = plt.subplots(1, len(threads), figsize=(7 * len(threads), 0.55 * height + 1.5), squeeze=False)
    for ax, t in zip(axes[0], threads):
        rows = data[t][::-1]
        y = range(len(rows))
        chorus = [100 * c / roof for _, c, roof, _, _, _ in rows]
        ax.barh([i + 0.2 for i in y], chorus, height=0.4, color="#2b6cb0", label="chorus")
        peer = [(i, 100 * p / proof) for i, (_, _, _, _, p, proof) in enumerate(rows) if p and proof]
        if peer:
            ax.barh([i - 0.2 for i, _ in peer], [v for _, v in peer], height=0.4, color="#dd6b20",
                    label="llama.cpp best (vs chorus's f16 roof)")
        for i, (label, c, roof, bound, p, proof) in enumerate(rows):
            ax.text(100 * c / roof + 1, i + 0.2, f"{c:.1f} of {roof:.0f} tok/s ({bound})", va="center", fontsize=7)
            if p and proof:
                ax.text(100 * p / proof + 1, i - 0.2, f"{p:.1f}", va="center", fontsize=7)
        ax.set_yticks(list(y))
        ax.set_yticklabels([r[0] for r in rows], fontsize=8)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of the roof (measured bytes and ops vs the probe's limits)")
        ax.set_title(f"{t} thread(s)")
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"How close each row comes to the machine's limit ({os.path.basename(os.path.normpath(d))})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
