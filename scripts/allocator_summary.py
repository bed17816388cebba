#!/usr/bin/env python3
"""Summary of issue 19's allocator runs (docs/results/allocator.md): CoMix rows against the uniform
baselines of their family at equal measured bytes, per corpus, with a paired test over chunks.

    python3 scripts/allocator_summary.py DIR [DIR ...]

DIR holds `chorus eval kld --json` outputs named CORPUS_*.json (one uniform run with --configs, and
one run per policy row). Configs are merged per corpus by name; the f16 base of every run must agree
(same chunks, same base PPL) or the script stops. For each policy row and each uniform row of its
family whose measured bytes are within [0.97, 1.12]× of the policy's (the policy never holds more than
1 % above it), it prints the mean-KLD and PPL difference and a two-sided Wilcoxon signed-rank test
over the chunks (per-chunk mean KLD; per-chunk NLL), exact for n <= 25, normal approximation with tie
correction above. scipy is not needed (and not installed here): the test is implemented below.
"""
import itertools
import json
import math
import sys
from collections import defaultdict
from pathlib import Path


def wilcoxon(x, y):
    """Two-sided Wilcoxon signed-rank p-value of paired samples x, y (zero differences dropped)."""
    d = [a - b for a, b in zip(x, y) if a != b]
    n = len(d)
    if n == 0:
        return 1.0, 0.0
    order = sorted(range(n), key=lambda i: abs(d[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:  # average ranks over ties of |d|
        j = i
        while j + 1 < n and abs(d[order[j + 1]]) == abs(d[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    w_plus = sum(r for r, v in zip(ranks, d) if v > 0)
    if n <= 25 and all(r == int(r) for r in ranks):
        # exact: number of subsets of {1..n} with rank sum s
        total = n * (n + 1) // 2
        counts = [1] + [0] * total
        for r in range(1, n + 1):
            for s in range(total, r - 1, -1):
                counts[s] += counts[s - r]
        w = min(w_plus, total - w_plus)
        p = 2 * sum(counts[: int(w) + 1]) / 2 ** n
        return min(1.0, p), w_plus
    mean = n * (n + 1) / 4
    ties = defaultdict(int)
    for r in ranks:
        ties[r] += 1
    var = n * (n + 1) * (2 * n + 1) / 24 - sum(t ** 3 - t for t in ties.values()) / 48
    z = (w_plus - mean) / math.sqrt(var) if var > 0 else 0.0
    return min(1.0, math.erfc(abs(z) / math.sqrt(2))), w_plus


def family(name):
    if name.startswith(("comix-", "cocktail-")) and not name.startswith("cocktail-paper"):
        return name.split("-")[1].split(":")[0]
    parts = name.split("/")
    for fam in ("kivi", "tq"):
        if any(p.startswith(fam) for p in parts):
            return fam
    return None


def load(dirs):
    corpora = defaultdict(dict)  # corpus -> name -> config
    base = {}
    for d in dirs:
        for f in sorted(Path(d).glob("*.json")):
            corpus = f.stem.split("_")[0]
            j = json.loads(f.read_text())
            key = (j["chunks"], j["ctx"], round(j["base_ppl"], 6))
            if corpus in base and base[corpus] != key:
                sys.exit(f"{f}: base run differs from the corpus' first ({key} vs {base[corpus]})")
            base[corpus] = key
            for c in j["configs"]:
                name = c["k"] if c["k"] == c["v"] and ("comix" in c["k"] or "cocktail" in c["k"]) else f'{c["k"]}/{c["v"]}'
                c["base_chunk_nll"] = j["base_chunk_nll"]
                corpora[corpus][name] = c
    return corpora, base


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    corpora, base = load(sys.argv[1:])
    wins = defaultdict(lambda: [0, 0])
    for corpus in sorted(corpora):
        cfgs = corpora[corpus]
        chunks, ctx, ppl = base[corpus]
        print(f"\n## {corpus}: {chunks} chunks of {ctx} tokens, f16 PPL {ppl:.4f}\n")
        print(f"{'config':34s} {'bits':>5s} {'peak KiB':>9s} {'meanKLD':>8s} {'dPPL%':>7s}")
        for name, c in sorted(cfgs.items(), key=lambda kv: (family(kv[0]) or "", kv[1]["bits_per_element"])):
            print(f"{name:34s} {c['bits_per_element']:5.2f} {c.get('kv_peak_bytes', c['kv_bytes']) / 1024:9.1f} "
                  f"{c['kld_mean']:8.5f} {c['ppl_delta_pct']:+7.3f}")
        print(f"\n{'policy':34s} {'vs uniform':14s} {'bytes':>6s} {'dKLD':>9s} {'KLD%':>6s} {'p(KLD)':>8s} "
              f"{'dPPL pts':>8s} {'p(NLL)':>8s}  chunks better")
        for name, c in cfgs.items():
            if "comix" not in name and "cocktail" not in name:
                continue
            fam = family(name)
            pb = c.get("kv_peak_bytes", c["kv_bytes"])
            for un, u in cfgs.items():
                if "comix" in un or "cocktail" in un or family(un) != fam:
                    continue
                ub = u.get("kv_peak_bytes", u["kv_bytes"])
                ratio = pb / ub
                if not (0.97 <= ub / pb <= 1.12) or ratio > 1.01:
                    continue
                p_kld, _ = wilcoxon(c["chunk_kld"], u["chunk_kld"])
                p_nll, _ = wilcoxon(c["chunk_nll"], u["chunk_nll"])
                better = sum(a < b for a, b in zip(c["chunk_kld"], u["chunk_kld"]))
                dk = c["kld_mean"] - u["kld_mean"]
                print(f"{name:34s} {un:14s} {ratio:6.3f} {dk:+9.5f} {100 * dk / u['kld_mean']:+6.1f} {p_kld:8.4f} "
                      f"{c['ppl_delta_pct'] - u['ppl_delta_pct']:+8.3f} {p_nll:8.4f}  {better}/{len(c['chunk_kld'])}")
                w = wins[(name.split(":")[0] + ":" + ":".join(name.split(":")[1:]), un)]
                w[0] += dk < 0 and c["ppl_delta_pct"] <= u["ppl_delta_pct"]
                w[1] += 1
    print("\n## policy vs uniform: corpora where the policy has lower mean KLD and no higher PPL\n")
    for (p, u), (n_win, n) in sorted(wins.items()):
        print(f"{p:34s} vs {u:14s} {n_win}/{n}")


if __name__ == "__main__":
    main()
