#!/usr/bin/env python3
"""Summary of `chorus eval needle --json` outputs (several seeds/invocations): per config accuracy,
agreement with f16 and measured bytes over f16 on the same cases (joined by seed and case index, so a
run without f16 is compared with the f16 run of the same seed), paired comparisons with a two-sided
exact sign test, per-case answers, and the precision of the asked fact's blocks in Cocktail maps
(positions from scripts/needle_fact_blocks.py).

Usage: python3 scripts/needle_summary.py [--positions POS.json] RUN.json ...
"""
import argparse, json, sys, math, os
from collections import defaultdict
ap = argparse.ArgumentParser(); ap.add_argument('--positions'); ap.add_argument('runs', nargs='+')
args = ap.parse_args(); files = args.runs
# per (config) -> {(seed, case): rec}
data = defaultdict(dict); meta = {}
for f in files:
    if os.path.getsize(f) == 0: continue
    d = json.load(open(f)); seed = d['seed']
    for c in d['configs']:
        for i, r in enumerate(c['cases']):
            data[c['config']][(seed, i)] = r
        meta.setdefault(c['config'], []).append(os.path.basename(f))
f16 = data.get('f16', {})
def sign_p(a, b):
    n = a + b
    if n == 0: return 1.0
    k = min(a, b)
    p = sum(math.comb(n, i) for i in range(0, k + 1)) / 2**n
    return min(1.0, 2 * p)
order = ['f16','kivi4','kivi2','cocktail','cocktail:0.4:0.2','cocktail:0.1:0.1']
names = order + sorted(k for k in data if k not in order)
print('| config | cases | exact answer | agree with f16 | bytes / f16 (measured) | bits/element | search s/1K | prefill s/1K | decode tok/s |')
print('|---|---|---|---|---|---|---|---|---|')
for n in names:
    if n not in data: continue
    recs = data[n]; keys = sorted(recs)
    corr = sum(recs[k]['correct'] for k in keys)
    agree = sum(recs[k]['output'] == f16[k]['output'] for k in keys if k in f16)
    nagree = sum(1 for k in keys if k in f16)
    b = sum(recs[k]['bytes'] for k in keys if k in f16); bb = sum(f16[k]['bytes'] for k in keys if k in f16)
    tok = sum(recs[k]['tokens'] for k in keys)
    s = sum(recs[k]['search_seconds'] for k in keys); p = sum(recs[k]['prefill_seconds'] for k in keys)
    dec = sum(recs[k]['decode_tokens_per_s'] for k in keys) / len(keys)
    print(f"| {n} | {len(keys)} | {corr}/{len(keys)} | {agree}/{nagree} | {100*b/bb:.1f} % | {16*b/bb:.2f} | {1000*s/tok:.3f} | {1000*p/tok:.2f} | {dec:.1f} |")
def paired(a, b):
    ks = sorted(set(data[a]) & set(data[b]))
    only_a = [k for k in ks if data[a][k]['correct'] and not data[b][k]['correct']]
    only_b = [k for k in ks if data[b][k]['correct'] and not data[a][k]['correct']]
    ca = sum(data[a][k]['correct'] for k in ks); cb = sum(data[b][k]['correct'] for k in ks)
    print(f"{a} vs {b}: {len(ks)} paired cases, {ca} vs {cb} correct; only {a}: {len(only_a)} {only_a}; only {b}: {len(only_b)} {only_b}; sign test p = {sign_p(len(only_a), len(only_b)):.3f}")
print()
for a in names:
    for b in ['f16', 'kivi4']:
        if a != b and a in data and b in data and a.startswith('cocktail'): paired(a, b)
if 'kivi4' in data and 'f16' in data: paired('kivi4', 'f16')
if 'kivi2' in data and 'f16' in data: paired('kivi2', 'f16')
print()
# per case
keys = sorted(set().union(*[set(v) for v in data.values()]))
print('per case: seed case tokens depth answer | ' + ' '.join(n for n in names if n in data))
for k in keys:
    any_r = next(data[n][k] for n in names if n in data and k in data[n])
    row = []
    for n in names:
        if n not in data: continue
        r = data[n].get(k)
        row.append('-' if r is None else ('OK' if r['correct'] else (''.join(ch for ch in r['output'] if ch.isdigit())[:5] or 'x')))
    print(k[0], k[1], any_r['tokens'], f"{any_r['depth']:.2f}", any_r['answer'], '|', ' '.join(row))
print()
# asked fact's blocks in Cocktail maps (exact token positions from scripts/needle_fact_blocks.py)
fp = json.load(open(args.positions)) if args.positions else None
print("asked fact's block precision (sentence start block .. code block): config: case:chars(+ ok/- miss)")
for n in names:
    if fp is None or not n.startswith('cocktail') or n not in data: continue
    out = []; tally = defaultdict(lambda: [0, 0])
    for k in sorted(data[n]):
        r = data[n][k]; m = r['map']
        if not m: continue
        b = fp[f"{k[0]}/{k[1]}"]['blocks']
        chars = ''.join(m[x] for x in sorted(set(b)))
        out.append(f"{k[0]}/{k[1]}:{chars}{'+' if r['correct'] else '-'}")
        cls = 'F' if set(chars) <= {'F','S'} else ('2' if '2' in chars else '4')
        tally[cls][0] += r['correct']; tally[cls][1] += 1
    cnt = defaultdict(int)
    for k in data[n]:
        for ch in data[n][k]['map']: cnt[ch] += 1
    print(n, ' '.join(out))
    print('   fact all-F:', tally['F'], ' some INT4 (no INT2):', tally['4'], ' some INT2:', tally['2'], ' (correct, cases)  block counts', dict(cnt))
