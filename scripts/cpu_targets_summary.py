#!/usr/bin/env python3
"""Summary of scripts/cpu_targets_bench.sh's JSON lines: per model, threads and kernel path the
median tokens/s of pp and tg with min-max, beside llama-bench's, and chorus / llama.cpp ratios."""
import json
import os
import statistics
import sys
from collections import defaultdict


def main(path):
    rates = defaultdict(list)  # (model, threads, who, target, test) -> [tok/s]
    loads = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            key = (os.path.basename(r["model"]), r["threads"], r["who"], r["target"])
            loads.append(float(r["load"]))
            if r["who"] == "chorus":
                c = r["result"]["chorus"][str(r["threads"])]
                rates[key + ("pp",)].append(c["pp"])
                rates[key + ("tg",)].append(c["tg"])
                rates[key + ("path",)] = r["result"].get("kernel_path", "?")
            else:
                for t in r["result"]:
                    test = "pp" if t["n_prompt"] > 0 else "tg"
                    rates[key + (test,)].append(t["avg_ts"])
    def fmt(v):
        if not v:
            return "-"
        return f"{statistics.median(v):.1f} ({min(v):.0f}-{max(v):.0f}, n={len(v)})"
    print(f"load average while measuring: {min(loads):.1f}-{max(loads):.1f}\n")
    print("| model | threads | path | pp tok/s | tg tok/s | pp vs llama.cpp | tg vs llama.cpp |")
    print("|---|---|---|---|---|---|---|")
    rows = sorted({k[:4] for k in rates})
    for model, threads, who, target in rows:
        pp, tg = rates[(model, threads, who, target, "pp")], rates[(model, threads, who, target, "tg")]
        peer = [k for k in rows if k[0] == model and k[1] == threads and k[2] == "llama.cpp"]
        ratio = ["-", "-"]
        if who == "chorus" and peer:
            for i, test in enumerate(("pp", "tg")):
                p = rates[peer[0] + (test,)]
                mine = rates[(model, threads, who, target, test)]
                if p and mine:
                    ratio[i] = f"{statistics.median(mine) / statistics.median(p):.2f}x"
        path = rates.get((model, threads, who, target, "path"), f"llama.cpp {target}")
        print(f"| {model} | {threads} | {path} | {fmt(pp)} | {fmt(tg)} | {ratio[0]} | {ratio[1]} |")


if __name__ == "__main__":
    main(sys.argv[1])
