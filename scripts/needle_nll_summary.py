#!/usr/bin/env python3
"""Answer likelihood summary of `chorus eval needle --json` runs (several seeds): per config the mean
teacher-forced NLL of the gold answer (nats, summed over its tokens), mean P(answer) = mean exp(-NLL),
exact-answer accuracy and measured bytes over f16's on the same cases (cases joined by seed and case
index); then paired comparisons on answer NLL (per-case difference A - B: mean, cases lower / higher,
exact two-sided sign test, exact two-sided Wilcoxon signed-rank test — zeros dropped, midranks for ties,
the exact permutation distribution of the signs; no scipy needed). Primary: all cases; secondary: the
cases f16 answers exactly. --reproduce OLD.json ...: per config, how many outputs equal an older run's.

A run given as RUN.json:SUFFIX has SUFFIX appended to its config names (e.g. runs with --kv-window f16:
'kivi4' becomes 'kivi4@w16'). Pairs: every cocktail config vs every non-cocktail one; every other vs f16.

Usage: python3 scripts/needle_nll_summary.py RUN.json[:SUFFIX] ... [--reproduce OLD.json ...]
"""
import argparse, json, math, os, sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_tests import sign_p, wilcoxon_p  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument('runs', nargs='+')
ap.add_argument('--reproduce', nargs='*', default=[])
args = ap.parse_args()


def load(files):
    data = defaultdict(dict)
    for f in files:
        f, _, suffix = f.partition(':')
        if os.path.getsize(f) == 0: continue
        d = json.load(open(f))
        for c in d['configs']:
            for i, r in enumerate(c['cases']):
                data[c['config'] + suffix][(d['seed'], i)] = r
    return data


data = load(args.runs)
f16 = data.get('f16', {})


def bytes_ratio(n, keys):
    ks = [k for k in keys if k in f16]
    b = sum(data[n][k]['bytes'] for k in ks); bb = sum(f16[k]['bytes'] for k in ks)
    return b / bb if bb else float('nan')


order = ['f16', 'kivi4', 'kivi4@w16', 'kivi2', 'cocktail:0.1:0.1', 'cocktail:0.1:0.1@w16', 'cocktail:0.15:0.1',
         'cocktail:0.1:0.05']
names = [n for n in order if n in data] + sorted(n for n in data if n not in order)
subsets = [('all cases', lambda k: True)]
if f16: subsets.append(('cases f16 answers exactly', lambda k: k in f16 and f16[k]['correct']))
for title, keep in subsets:
    print(f'### {title}\n')
    print('| config | cases | exact answer | mean answer NLL (nats) | median answer NLL | mean P(answer) | bytes / f16 (measured) |')
    print('|---|---|---|---|---|---|---|')
    for n in names:
        ks = sorted(k for k in data[n] if keep(k))
        if not ks: continue
        nll = sorted(data[n][k]['answer_nll'] for k in ks)
        med = (nll[(len(nll) - 1) // 2] + nll[len(nll) // 2]) / 2
        corr = sum(data[n][k]['correct'] for k in ks)
        pa = sum(math.exp(-data[n][k]['answer_nll']) for k in ks) / len(ks)
        print(f"| {n} | {len(ks)} | {corr}/{len(ks)} | {sum(nll) / len(ks):.3f} | {med:.3f} | {pa:.3f} | "
              f"{100 * bytes_ratio(n, ks):.1f} % |")
    print()
    print('| A vs B | paired cases | bytes/f16 A vs B | mean NLL A - B (nats) | median A - B | A lower / higher / equal | sign test p | Wilcoxon p (W+) |')
    print('|---|---|---|---|---|---|---|---|')
    pairs = [(a, b) for a in names if a.startswith('cocktail') for b in names if not b.startswith('cocktail')]
    pairs += [(a, 'f16') for a in names if not a.startswith('cocktail') and a != 'f16' and 'f16' in data]
    for a, b in pairs:
        ks = sorted(k for k in set(data[a]) & set(data[b]) if keep(k))
        if not ks: continue
        d = [data[a][k]['answer_nll'] - data[b][k]['answer_nll'] for k in ks]
        lo = sum(x < 0 for x in d); hi = sum(x > 0 for x in d); eq = len(d) - lo - hi
        wp, wplus = wilcoxon_p(d)
        sd = sorted(d); med = (sd[(len(sd) - 1) // 2] + sd[len(sd) // 2]) / 2
        fp = lambda x: f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"
        print(f"| {a} vs {b} | {len(ks)} | {100 * bytes_ratio(a, ks):.1f} % vs {100 * bytes_ratio(b, ks):.1f} % | "
              f"{sum(d) / len(d):+.3f} | {med:+.3f} | {lo} / {hi} / {eq} | {fp(sign_p(lo, hi))} | {fp(wp)} ({wplus:g}) |")
    print()

print('per case answer NLL: seed/case answer | ' + ' '.join(names))
for k in sorted(set().union(*[set(v) for v in data.values()])):
    any_r = next(data[n][k] for n in names if k in data[n])
    cells = []
    for n in names:
        r = data[n].get(k)
        cells.append('-' if r is None else f"{r['answer_nll']:.3f}{'' if r['correct'] else '*'}")
    print(f"{k[0]}/{k[1]} {any_r['answer']} | " + ' '.join(cells))
print('(* = exact answer missed)')

if args.reproduce:
    old = load(args.reproduce)
    print('\nreproduction of older outputs (same seed/case, output text equal):')
    for n in names:
        ks = sorted(set(data[n]) & set(old.get(n.split('@')[0], {})))
        if not ks: continue
        o = old[n.split('@')[0]]
        diff = [f"{k[0]}/{k[1]}: {o[k]['output']!r} -> {data[n][k]['output']!r}" for k in ks
                if o[k]['output'] != data[n][k]['output']]
        print(f"{n}: {len(ks) - len(diff)}/{len(ks)} equal" + (' — ' + '; '.join(diff) if diff else ''))
