#!/usr/bin/env python3
"""Summary of `chorus eval needle --json --cases-file ...` runs for issue 19 item 2 (Cocktail with
power): per config exact answers, the gold answer's teacher-forced NLL and measured bytes; per kind of
case; paired tests of every mixed-precision config (cocktail-*, comix-*, cocktail-paper*) against the
uniform baselines (kivi4, tq4/tq3 by default) on answer NLL (exact two-sided Wilcoxon signed-rank)
and exact answers (exact sign test on the discordant cases); and the issue's two goals, checked.

Cases are joined across runs by (kind, answer, context tokens, depth), so configs may come from
different runs of the same cases file. Bytes = Σ measured context bytes over the cases / Σ f16's.

Usage: python3 scripts/needle_allocator_summary.py RUN.json ... [--baselines kivi4,tq4/tq3]
"""
import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_tests import sign_p, wilcoxon_p  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("runs", nargs="+")
ap.add_argument("--baselines", default="kivi4,tq4/tq3")
args = ap.parse_args()

data = defaultdict(dict)  # config -> key -> case
for f in args.runs:
    if not os.path.isfile(f): sys.exit(f"no such run file: {f}")
    if os.path.getsize(f) == 0: continue
    try:
        configs = json.load(open(f))["configs"]
    except (ValueError, KeyError, TypeError) as e:
        sys.exit(f"{f}: not the JSON of `chorus eval needle --json` ({type(e).__name__}: {e})")
    for c in configs:
        for r in c["cases"]:
            data[c["config"]][(r.get("kind", ""), r["answer"], r["tokens"], r["depth"])] = r
if "f16" not in data: sys.exit("no f16 config in the runs: bytes and the goals are relative to it")
f16 = data["f16"]
keys = sorted(set.intersection(*(set(v) for v in data.values())))
if not keys: sys.exit("no case is in every config")
uniform = [n for n in data if not n.startswith(("cocktail", "comix"))]
names = sorted(uniform, key=lambda n: (n != "f16", n)) + sorted(n for n in data if n not in uniform)
base = [b for b in args.baselines.split(",") if b in data]


def ratio(n, ks):
    return sum(data[n][k]["bytes"] for k in ks) / sum(f16[k]["bytes"] for k in ks)


def acc(n, ks):
    return sum(data[n][k]["correct"] for k in ks)


toks = [f16[k]["tokens"] for k in keys]
kinds = sorted({k[0] for k in keys})
print(f"{len(keys)} cases in every config ({', '.join(f'{sum(k[0] == kd for k in keys)} {kd}' for kd in kinds)}); "
      f"context tokens {min(toks)}-{max(toks)} (mean {statistics.mean(toks):.0f})\n")
print("| config | exact answer | % of f16's | mean answer NLL | median | bytes / f16 (measured) |")
print("|---|---|---|---|---|---|")
a16 = acc("f16", keys)
for n in names:
    nll = [data[n][k]["answer_nll"] for k in keys]
    a = acc(n, keys)
    print(f"| {n} | {a}/{len(keys)} ({100 * a / len(keys):.1f} %) | {100 * a / a16:.1f} % | {statistics.mean(nll):.3f} | "
          f"{statistics.median(nll):.3f} | {100 * ratio(n, keys):.1f} % |")

groups = sorted({k[0].split(":")[0] for k in keys})
multi = [kd for kd in kinds if sum(k2.split(":")[0] == kd.split(":")[0] for k2 in kinds) > 1]  # kinds of a group
for g in groups + multi:
    ks = [k for k in keys if k[0] == g or k[0].split(":")[0] == g]
    print(f"\n#### {g} ({len(ks)} cases)\n")
    print("| config | exact answer | mean answer NLL | bytes / f16 |")
    print("|---|---|---|---|")
    for n in names:
        print(f"| {n} | {acc(n, ks)}/{len(ks)} | {statistics.mean(data[n][k]['answer_nll'] for k in ks):.3f} | "
              f"{100 * ratio(n, ks):.1f} % |")


def pair(a, b, ks):
    d = [data[a][k]["answer_nll"] - data[b][k]["answer_nll"] for k in ks]
    p, _ = wilcoxon_p(d)
    lo, hi = sum(x < 0 for x in d), sum(x > 0 for x in d)
    only_a = sum(data[a][k]["correct"] and not data[b][k]["correct"] for k in ks)
    only_b = sum(data[b][k]["correct"] and not data[a][k]["correct"] for k in ks)
    return dict(mean=statistics.mean(d), median=statistics.median(d), lo=lo, hi=hi, p=p, only_a=only_a, only_b=only_b,
                sp=sign_p(only_a, only_b), ra=ratio(a, ks), rb=ratio(b, ks), acc_a=acc(a, ks), acc_b=acc(b, ks))


def print_pair(a, b, r, flag=""):
    print(f"| {a} vs {b} | {100 * r['ra']:.1f} % vs {100 * r['rb']:.1f} %{flag} | {r['mean']:+.3f} | {r['median']:+.3f} | "
          f"{r['lo']} / {r['hi']} | {r['p']:.2g} | {r['acc_a']} vs {r['acc_b']} | {r['only_a']} / {r['only_b']} | {r['sp']:.2g} |")


mixed = [n for n in names if n not in uniform]
print("\n### Paired: mixed precision vs the uniform baselines (answer NLL A − B; exact answers)\n")
print("| A vs B | bytes/f16 A vs B | mean Δ NLL | median | A lower / higher | Wilcoxon p | exact A vs B | only A / only B | sign p |")
print("|---|---|---|---|---|---|---|---|---|")
results = {}
for a in mixed:
    for b in base + (["f16"] if a != "f16" else []):
        r = results[(a, b)] = pair(a, b, keys)
        print_pair(a, b, r, "" if r["ra"] <= r["rb"] + 1e-9 else " (A more bytes)")

# Item 3: one context made for all of a document's questions (`--shared-questions`, "X@shared") against the
# same config made per question (X), and against the baselines (in the table above).
shared = [(n, n[: -len("@shared")]) for n in names if n.endswith("@shared") and n[: -len("@shared")] in data]
if shared:
    print("\n### Shared contexts: one context for all of a document's questions vs one per question\n")
    print("| A vs B | bytes/f16 A vs B | mean Δ NLL | median | A lower / higher | Wilcoxon p | exact A vs B | only A / only B | sign p |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a, b in shared:
        print_pair(a, b, pair(a, b, keys))

print("\n### Goals of issue 19, item 2 (set for SmolLM2-135M; checked here on the model of these runs)\n")
if "kivi4" in data:
    rk = ratio("kivi4", keys)
    for a in mixed:
        r = results[(a, "kivi4")]
        if r["ra"] > rk + 1e-9:
            print(f"- {a}: {100 * r['ra']:.1f} % of f16's bytes > kivi4's {100 * rk:.1f} %: not eligible for goal 1")
            continue
        met = r["mean"] < 0 and r["lo"] > r["hi"] and r["p"] < 0.01 and r["acc_a"] >= r["acc_b"]
        print(f"- goal 1 (≤ kivi4's bytes: lower gold NLL than kivi4 at p < 0.01 and ≥ its exact answers) — {a}: "
              f"{'MET' if met else 'not met'} (Δ NLL {r['mean']:+.3f}, {r['lo']}/{r['hi']}, p {r['p']:.2g}; exact "
              f"{r['acc_a']} vs {r['acc_b']})")
for n in names:
    rn = ratio(n, keys)
    if n == "f16" or rn > 0.25 + 1e-9: continue
    a = acc(n, keys)
    print(f"- goal 2 (≤ 25 % of f16's bytes: ≥ 90 % of f16's exact answers) — {n} at {100 * rn:.1f} %: "
          f"{'MET' if a >= 0.9 * a16 else 'not met'} ({a} vs f16 {a16} = {100 * a / a16:.1f} %)")
