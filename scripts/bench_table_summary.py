#!/usr/bin/env python3
"""The markdown speed table from scripts/bench_table.sh's raw outputs (one folder of JSON files).

Usage: scripts/bench_table_summary.py DIR

Rows: pp512, tg128, decode at depth 0 / 4096 (f16 and tq4/tq3 KV), 1 and 15 agents decoding over one
4096-token shared document (aggregate tok/s), the document's prefill — per thread count, chorus beside
llama.cpp's best (its winning settings named), the ratio, and chorus's % of the roofline where the
benchmark printed one. Only what the files hold is printed; a missing file or peer is "n/a".
"""
from __future__ import annotations

import glob
import json
import os
import sys


def load(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def fmt(x, digits=1):
    return "n/a" if not x else f"{x:,.{digits}f}"


def ratio(a, b):
    return "n/a" if not a or not b else f"{a / b:.2f}×"


def spread(s, digits=1):
    return "" if not s or not s[0] else f" ({s[0]:,.{digits}f}–{s[1]:,.{digits}f})"


def main() -> None:
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: bench_table_summary.py DIR (the --out folder of scripts/bench_table.sh)")
    d = sys.argv[1]
    rows = []  # (threads, workload, chorus, peer, settings, ratio, roof%)
    machine = load(os.path.join(d, "machine.json"))
    pptg = load(os.path.join(d, "pptg.json"))
    if pptg:
        for t, c in sorted(pptg.get("chorus", {}).items()):
            peer = pptg.get("llama_cpp", {}).get("threads", {}).get(t, {})
            roof = pptg.get("roofline", {}).get(t, {})
            for k, name in (("pp", f"pp{pptg['pp_tokens']}"), ("tg", f"tg{pptg['tg_tokens']}")):
                rows.append((t, name, f"{fmt(c[k])}{spread(c.get(k + '_spread'))}",
                             f"{fmt(peer.get(k))}{spread(peer.get(k + '_spread'))}", peer.get(k + "_settings", ""),
                             ratio(c[k], peer.get(k)), roof.get(k, {}).get("percent_of_roof")))
    for path in sorted(glob.glob(os.path.join(d, "depth-t*.json"))):
        j = load(path)
        if not j:
            continue
        t = str(j["threads"])
        for row in j.get("rows", []):
            peer = row.get("llama_cpp", {})
            best_kv = max(peer, key=peer.get) if peer else None
            for kv, c in row.get("chorus", {}).items():
                rows.append((t, f"decode at depth {row['depth']}, KV {kv}", fmt(c["tg"]),
                             fmt(peer.get(best_kv)) if best_kv else "n/a",
                             f"KV {best_kv}: {row.get('llama_cpp_settings', {}).get(best_kv, '')}" if best_kv else "",
                             ratio(c["tg"], peer.get(best_kv)) if best_kv else "n/a",
                             c.get("roofline", {}).get("percent_of_roof")))
    for path in sorted(glob.glob(os.path.join(d, "agents-t*.json"))):
        j = load(path)
        if not j:
            continue
        t, doc = str(j["threads"]), j.get("doc_tokens", "?")
        peer = load(os.path.join(d, f"agents-peer-t{t}.json")) or {}
        pa = peer.get("agents", {})
        for n, r in sorted(j.get("rows", {}).items(), key=lambda x: int(x[0])):
            p = pa.get(n, {})
            for kv, c in r.get("chorus", {}).items():
                rows.append((t, f"{n} agent(s), {doc}-token shared document, KV {kv}",
                             f"{fmt(c['decode_tokens_per_s'])}{spread(c.get('spread'))}",
                             f"{fmt(p.get('decode_tokens_per_s'))}{spread(p.get('spread'))}", p.get("settings", ""),
                             ratio(c["decode_tokens_per_s"], p.get("decode_tokens_per_s")),
                             c.get("roofline", {}).get("percent_of_roof")))
        # The peer's fastest prefill: the best median of any variant and agent count (each prefills the
        # document once); before 2026-12-05 the table took the first agent count's decode winner's.
        first = pa.get(min(pa, key=int)) if pa else {}
        pre = [(s["prefill_seconds"], rec["settings"]) for rec in peer.get("variants", [])
               for s in rec.get("agents", {}).values() if "prefill_seconds" in s]
        best = ({"seconds": min(pre)[0], "settings": min(pre)[1]} if pre else
                {"seconds": first.get("prefill_seconds"), "settings": first.get("settings", "")})
        for kv, c in j.get("chorus", {}).items():
            pre, pp = c.get("prefill_seconds"), best.get("seconds")
            rows.append((t, f"{doc}-token document prefill (seconds: lower is better), KV {kv}",
                         f"{fmt(pre, 2)}{spread(c.get('prefill_spread'), 2)}", fmt(pp, 2),
                         best.get("settings", ""), ratio(pp, pre), None))
    print(f"Raw outputs: {d}/ (JSON per row group; the human tables and load averages in the .log files)\n")
    if machine and machine.get("cpu"):
        print(f"CPU: {machine['cpu']}\n")
    if machine:
        print("| threads | read GB/s | f32 GFLOP/s | int8 GOP/s | AMX int8 GOP/s |\n|---|---|---|---|---|")
        for m in machine.get("machine", []):
            amx = m.get("amx_int8_ops_per_s", 0)
            print(f"| {m['threads']} | {m['read_bytes_per_s'] * 1e-9:.1f} | {m['f32_flops_per_s'] * 1e-9:.1f} "
                  f"| {m['int8_ops_per_s'] * 1e-9:.1f} | {f'{amx * 1e-9:.1f}' if amx else 'none'} |")
        print()
    print("| threads | workload | chorus tok/s (spread) | llama.cpp best (spread) | peer settings | ratio | chorus % of roof |")
    print("|---|---|---|---|---|---|---|")
    for t, w, c, p, s, r, roof in sorted(rows, key=lambda x: int(x[0])):
        print(f"| {t} | {w} | {c} | {p} | {s} | {r} | {'' if roof is None else f'{roof:.0f} %'} |")


if __name__ == "__main__":
    main()
