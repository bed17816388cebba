#!/usr/bin/env python3
"""llama.cpp at its best for N agents over one shared document: aggregate decode tokens/s from its
own llama-batched-bench, over the settings that change its speed, and which of them won.

Per agent count N, llama-batched-bench prefills the document (-npp DOC random tokens) once into
sequence 0, copies it to the other N-1 sequences (-pps, llama_memory_seq_cp) and decodes -ntg TG
steps of one N-token batch each; its S_TG = N * TG / decode seconds is the aggregate rate.
Variants (one llama-batched-bench process each, all agent counts in it):
  weights           the original file, plus a Q4_0 conversion made by llama-quantize (the type
                    llama.cpp repacks on x86; cached under .cache/peer/models/, see llama_best.py)
  flash attention   on and off
  unified KV        on (-kvu: one buffer, the copy shares the document's cells) and off (one stream
                    per sequence: the document is copied N times)
  KV cache type     f16, q8_0, q4_0 (-ctk/-ctv; a quantized V cache needs flash attention, so the
                    quantized types run with it on only)
Repetitions are interleaved: rep 1 of every variant, then rep 2, ...; per N the variant with the
highest median S_TG wins and every variant's median, min and max are kept.

Usage: scripts/ref/llama_agents_best.py -m MODEL [--doc-tokens 4096] [--agents 1,4,8,15] [--tg 128]
           [--threads 2] [--reps 3] [--weights original,q4_0] [--fa on,off] [--kvu on,off]
           [--kv f16,q8_0,q4_0] [--bin-dir DIR] [--json]
--json prints one JSON object: {"agents": {"15": {"decode_tokens_per_s": best median, "settings": "...",
"spread": [min, max], "prefill_seconds": the winner's median}}, "prefill_best": {"seconds": the fastest
median prefill of any variant and agent count, "settings"}, "variants": [...], "command": ...}
(src/eval/agents_bench.cc reads "agents"/N/"decode_tokens_per_s", "settings" and "prefill_seconds").
Progress goes to stderr. The first run on a machine measures the whole grid and stores each agent
count's winner (scripts/ref/peer_winners.py); later runs with the same grid measure only the
winners. --regrid (or CHORUS_PEER_REGRID=1) measures the whole grid again.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_best import convert, crash_hint, peer_bin_dir  # noqa: E402
from peer_winners import Winners, regrid_requested  # noqa: E402


def variant_cmd(bin_dir: str, model: str, a, agents: list[int], fa: str, kvu: str, kv: str) -> list[str]:
    n = max(agents)
    # Cells the largest N needs (llama-batched-bench skips a case that does not fit): the shared
    # document once (unified) or per stream (not unified), plus every agent's TG tokens.
    need = (a.doc_tokens if kvu == "on" else n * a.doc_tokens) + n * a.tg
    ctx = (need + 256 * n + 255) // 256 * 256
    return [os.path.join(bin_dir, "llama-batched-bench"), "-m", model, "-c", str(ctx), "-b", "2048", "-ub", "512",
            "-npp", str(a.doc_tokens), "-ntg", str(a.tg), "-npl", ",".join(map(str, agents)), "-pps",
            "-kvu" if kvu == "on" else "-no-kvu", "-fa", fa, "-ctk", kv, "-ctv", kv, "-t", str(a.threads),
            "--output-format", "jsonl"]


def run_variant(cmd: list[str]) -> dict[int, dict]:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-batched-bench failed ({r.returncode}){crash_hint(r.returncode)}: {r.stderr[-1500:]}")
    rows = {}
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            rows[int(j["pl"])] = j
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--agents", default="1,4,8,15")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--weights", default="original,q4_0")
    ap.add_argument("--fa", default="on,off")
    ap.add_argument("--kvu", default="on,off")
    ap.add_argument("--kv", default="f16,q8_0,q4_0")
    ap.add_argument("--bin-dir")
    ap.add_argument("--regrid", action="store_true", help="measure the whole grid even where winners are stored")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit(f"llama_agents_best.py: no such model file: {a.model}")
    agents = [int(x) for x in a.agents.split(",") if x]
    if not agents or min(agents) < 1 or a.doc_tokens < 1 or a.tg < 1 or a.reps < 1:
        sys.exit("llama_agents_best.py: --agents, --doc-tokens, --tg and --reps must be >= 1")
    bin_dir = peer_bin_dir(a.bin_dir)
    if not os.path.exists(os.path.join(bin_dir, "llama-batched-bench")):
        sys.exit(f"llama_agents_best.py: no llama-batched-bench in {bin_dir} (scripts/build_peer.sh builds it)")
    winners = Winners("llama_agents_best.py", bin_dir, a.model)
    row_key = lambda n: (f"agents {n} doc {a.doc_tokens} tg {a.tg} threads {a.threads} "  # noqa: E731
                         f"grid weights {a.weights} fa {a.fa} kvu {a.kvu} KV {a.kv}")
    stored = {n: winners.get(row_key(n)) for n in agents}
    stored["prefill"] = winners.get(row_key("prefill"))  # the document's fastest prefill, also a winner
    cached = all(stored.values()) and not regrid_requested(a.regrid)
    grid = [(w, fa, kvu, kv) for w in a.weights.split(",") for fa in a.fa.split(",") for kvu in a.kvu.split(",")
            for kv in a.kv.split(",") if kv == "f16" or fa == "on"]  # llama.cpp: a quantized V cache needs FA
    if cached:  # only the stored winners (one variant per distinct winner)
        won = {tuple(v["settings"][k] for k in ("weights", "fa", "kvu", "kv")) for v in stored.values()}
        grid = [g for g in grid if g in won]
    variants = []
    for w, fa, kvu, kv in grid:
        path = a.model if w == "original" else convert(bin_dir, a.model, w)
        variants.append({"settings": f"weights {w}, flash-attn {fa}, unified KV {kvu}, KV {kv}",
                         "stored": {"weights": w, "fa": fa, "kvu": kvu, "kv": kv},
                         "cmd": variant_cmd(bin_dir, path, a, agents, fa, kvu, kv), "runs": []})
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    load_before = list(os.getloadavg())
    for rep in range(a.reps):
        for v in variants:
            log(f"llama_agents_best.py: rep {rep + 1}/{a.reps}: {v['settings']}")
            try:
                v["runs"].append(run_variant(v["cmd"]))
            except RuntimeError as e:
                v["error"] = str(e)
                log(f"  {e}")
    out = {"agents": {}, "variants": [], "doc_tokens": a.doc_tokens, "tg": a.tg, "threads": a.threads,
           "reps": a.reps, "loadavg_before": load_before, "loadavg_after": list(os.getloadavg()),
           "tool": "llama-batched-bench (-pps)", "command": " ".join(sys.argv),
           "grid": (f"stored winners (measured {min(v['date'] for v in stored.values())}; --regrid measures the grid "
                    "again)") if cached else "full"}
    for v in variants:
        rec = {"settings": v["settings"], "command": " ".join(v["cmd"]), "agents": {}}
        if "error" in v:
            rec["error"] = v["error"]
        for n in agents:
            tg = [r[n]["speed_tg"] for r in v["runs"] if n in r]
            pp = [r[n]["t_pp"] for r in v["runs"] if n in r]
            if len(tg) < len(v["runs"]) or not tg:
                continue  # a failed or skipped rep: the variant does not compete for this N
            s = {"median": statistics.median(tg), "min": min(tg), "max": max(tg), "samples": tg,
                 "prefill_seconds": statistics.median(pp)}
            rec["agents"][str(n)] = s
            best = out["agents"].get(str(n))
            if best is None or s["median"] > best["decode_tokens_per_s"]:
                out["agents"][str(n)] = {"decode_tokens_per_s": s["median"], "settings": v["settings"],
                                         "spread": [s["min"], s["max"]], "prefill_seconds": s["prefill_seconds"]}
                if not cached:
                    winners.put(row_key(n), v["stored"], s["median"])
        out["variants"].append(rec)

    # The document's prefill at the peer's best: the fastest median over every variant and agent count
    # (each -npp run prefills the document once), not the decode winner's.
    pre = [(s["prefill_seconds"], rec["settings"]) for rec in out["variants"] for s in rec["agents"].values()]
    if pre:
        best_pre = min(pre)
        out["prefill_best"] = {"seconds": best_pre[0], "settings": best_pre[1]}
        if not cached:
            won = next(v for v in variants if v["settings"] == best_pre[1])
            winners.put(row_key("prefill"), won["stored"], best_pre[0])
            winners.save()
    if a.json:
        print(json.dumps(out))
        return
    print(f"{'agents':>6} {'median t/s':>11} {'min':>9} {'max':>9}  settings")
    for n in agents:
        for rec in sorted(out["variants"], key=lambda r: -r["agents"].get(str(n), {}).get("median", 0)):
            s = rec["agents"].get(str(n))
            if s is None:
                print(f"{n:>6} {'n/a':>11} {'':>9} {'':>9}   {rec['settings']} ({rec.get('error', 'skipped')[:80]})")
                continue
            mark = "*" if out["agents"][str(n)]["settings"] == rec["settings"] else " "
            print(f"{n:>6} {s['median']:>11.1f} {s['min']:>9.1f} {s['max']:>9.1f} {mark} {rec['settings']}")
    print("* = the best for its agent count: chorus bench --agents compares against it")


if __name__ == "__main__":
    main()
