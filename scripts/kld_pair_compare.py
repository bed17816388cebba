#!/usr/bin/env python3
"""Compares two `chorus eval kld --json` runs of the same configs on the same chunks, config by config:
mean KLD (and its relative change), PPL delta, top-1 agreement, and how many chunks have a higher KLD in A.

    python3 scripts/kld_pair_compare.py A.json B.json

e.g. A = CHORUS_KV_INT8=1 (the integer attention kernels), B = CHORUS_KV_INT8=0 (the float path):
docs/results/int8-attention-2026-12-04/.
"""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            d = json.load(f)
        d["configs"], d["base_ppl"]
        return d
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"kld_pair_compare: {path} is not the JSON of `chorus eval kld --json` ({e})")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if a["base_ppl"] != b["base_ppl"]:
        sys.exit(f"kld_pair_compare: the f16 bases differ ({a['base_ppl']} vs {b['base_ppl']}): not the same chunks")
    print(f"f16 base PPL {a['base_ppl']:.4f}, {a['chunks']} chunks")
    for ca, cb in zip(a["configs"], b["configs"]):
        if (ca["k"], ca["v"]) != (cb["k"], cb["v"]):
            sys.exit(f"kld_pair_compare: configs differ: {ca['k']}/{ca['v']} vs {cb['k']}/{cb['v']}")
        higher = sum(x > y for x, y in zip(ca["chunk_kld"], cb["chunk_kld"]))
        print(f'{ca["k"]}/{ca["v"]}: mean KLD A {ca["kld_mean"]:.5f} B {cb["kld_mean"]:.5f} '
              f'({100 * (ca["kld_mean"] / cb["kld_mean"] - 1):+.1f} %), dPPL {ca["ppl_delta_pct"]:+.3f} % vs '
              f'{cb["ppl_delta_pct"]:+.3f} %, top-1 {ca["top1"]:.4f} vs {cb["top1"]:.4f}, '
              f'chunks with a higher KLD in A: {higher}/{len(ca["chunk_kld"])}')


if __name__ == "__main__":
    main()
