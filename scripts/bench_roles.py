#!/usr/bin/env python3
"""One document, many roles (issue 40, must-show 3): a group chat on chorus serve beside llama-server, the
same client script (`openai`, streaming, greedy) in one run on 127.0.0.1.

N agents, each with its own system prompt, then the same document, then the chat so far. Every round the
N agents answer concurrently (each sees the messages of the rounds before), --tg tokens each. Reports per
server: wall time, aggregate generated tok/s, TTFT p50 of round 0 and of later rounds, prompt tokens
cached / reused, and the KV high water (chorus: /metrics chorus_kv_high_water_bytes, measured; llama-server:
the KV buffer it allocates). Sides run one after the other on an idle machine.

Usage: scripts/bench_roles.py [-m MODEL] [-t 2] [--roles 8] [--rounds 3] [--doc-words 3000] [--tg 24]
                              [--repair 0.05] [--json OUT] [--no-peer]
Sides (--sides): chorus --reuse segments and exact; llama-server (--parallel N -fa on, --peer-kv KV, prompt cache on)
with one unified KV (--kv-unified) or per-slot KV, each with and without --cache-reuse 256 (shifting cached
chunks, llama.cpp's own answer to reuse at another offset).
"""
import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from serve_harness import ChorusServer  # noqa: E402
from serve_roles_test import ROLES, messages  # noqa: E402
from bench_serve import LlamaServer  # noqa: E402

import openai  # noqa: E402


def turn(c, msgs, tg):
    t0 = time.time()
    ttft, text, usage = None, "", None
    for ch in c.chat.completions.create(model="m", messages=msgs, max_tokens=tg, temperature=0, stream=True,
                                        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
        if ch.choices and ch.choices[0].delta.content:
            ttft = ttft or time.time() - t0
            text += ch.choices[0].delta.content
        if ch.usage:
            usage = ch.usage
    d = usage.prompt_tokens_details if usage else None
    extra = (d.model_extra or {}) if d else {}
    return {"ttft": ttft or time.time() - t0, "text": text, "prompt": usage.prompt_tokens if usage else 0,
            "cached": (d.cached_tokens or 0) if d else 0, "reused": extra.get("reused_tokens", 0),
            "completion": usage.completion_tokens if usage else 0}


def chat(url, doc, n, rounds, tg):
    c = openai.OpenAI(base_url=url, api_key="-", max_retries=0, timeout=3600)
    roles = ROLES[:n]
    transcript, rows = [], []
    t0 = time.time()
    for r in range(rounds):
        with cf.ThreadPoolExecutor(n) as ex:
            outs = list(ex.map(lambda nr: turn(c, messages(nr[0], nr[1], doc, transcript + [
                ("moderator", f"{nr[0]}, your turn: one point about the document the others missed.")]), tg), roles))
        for (name, _), o in zip(roles, outs):
            rows.append({"round": r, "agent": name, **{k: v for k, v in o.items() if k != "text"}})
            transcript.append((name, o["text"].strip() or "(no comment)"))
    wall = time.time() - t0
    gen = sum(w["completion"] for w in rows)
    prompt = sum(w["prompt"] for w in rows)
    return {"wall_s": wall, "generated": gen, "tok_s": gen / wall, "prompt_tokens": prompt,
            "cached": sum(w["cached"] for w in rows), "reused": sum(w["reused"] for w in rows),
            "ttft_round0_p50": statistics.median(w["ttft"] for w in rows if w["round"] == 0),
            "ttft_later_p50": statistics.median(w["ttft"] for w in rows if w["round"] > 0) if rounds > 1 else None,
            "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--roles", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--doc-words", type=int, default=3000)
    ap.add_argument("--tg", type=int, default=24)
    ap.add_argument("--repair", type=float, default=None, help="chorus --repair (default: the server's)")
    ap.add_argument("--json")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--peer-kv", default="f16", help="llama-server KV type (f16 prefills fastest here; q8_0, q4_0)")
    ap.add_argument("--sides", default="chorus-segments,chorus-exact,llama,llama-cache-reuse,llama-split,"
                    "llama-split-cache-reuse", help="which sides to run (comma-separated)")
    a = ap.parse_args()
    doc = " ".join(open(os.path.join(ROOT, "examples", "du_fu.txt")).read().split()[:a.doc_words])
    binary = os.environ.get("CHORUS_BIN", os.path.join(ROOT, "build", "bin", "chorus"))
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
    results = {"model": os.path.basename(a.model), "threads": a.threads, "roles": a.roles, "rounds": a.rounds,
               "doc_words": a.doc_words, "tg": a.tg, "cpu": cpu, "sides": {}}

    def report(name, r, kv):
        r["kv_bytes"] = kv
        results["sides"][name] = r
        later = f"{r['ttft_later_p50']:.2f}" if r["ttft_later_p50"] is not None else "-"
        print(f"{name:28s} {r['wall_s']:7.1f} s  {r['tok_s']:6.2f} tok/s  TTFT p50 round 0 {r['ttft_round0_p50']:6.2f} s, "
              f"later {later} s  prompt {r['prompt_tokens']} = cached {r['cached']} + reused {r['reused']} + "
              f"computed {r['prompt_tokens'] - r['cached'] - r['reused']}  KV {kv / 2**20:.1f} MiB", flush=True)

    sides = a.sides.split(",")
    for reuse in [r for r in ["segments", "exact"] if f"chorus-{r}" in sides]:
        flags = ["-t", str(a.threads), "--kv-budget", "2G", "--reuse", reuse, "--max-running", str(a.roles)]
        if a.repair is not None:
            flags += ["--repair", str(a.repair)]
        with ChorusServer(binary, a.model, *flags) as srv:
            chat(srv.url, "warm-up", 1, 1, 4)
            r = chat(srv.url, doc, a.roles, a.rounds, a.tg)
            report(f"chorus --reuse {reuse}", r, srv.metrics()["chorus_kv_high_water_bytes"])
            results[f"chorus_{reuse}_cmd"] = " ".join(srv.cmd)
    if not a.no_peer:
        peer_dir = subprocess.run([os.path.join(ROOT, "scripts", "build_peer.sh"), "--print-dir"], capture_output=True,
                                  text=True, check=True).stdout.strip().splitlines()[-1]
        ctx = a.roles * (int(a.doc_words * 1.5) + a.rounds * a.roles * (a.tg + 40) + 512)
        peers = {"llama": ([], True), "llama-cache-reuse": (["--cache-reuse", "256"], True),
                 "llama-split": ([], False), "llama-split-cache-reuse": (["--cache-reuse", "256"], False)}
        for side, (extra, unified) in peers.items():
            if side not in sides:
                continue
            peer = LlamaServer(os.path.join(peer_dir, "llama-server"), a.model, a.threads, a.roles, ctx, a.peer_kv,
                               extra, unified)
            chat(peer.url, "warm-up", 1, 1, 4)
            r = chat(peer.url, doc, a.roles, a.rounds, a.tg)
            name = (f"llama-server {a.peer_kv}" + ("" if unified else " per-slot") +
                    (" --cache-reuse 256" if extra else ""))
            report(name, r, peer.kv_bytes())
            results[name.replace(" ", "_") + "_cmd"] = " ".join(peer.cmd)
            peer.stop()
        best = max(((v["tok_s"], k) for k, v in results["sides"].items() if k.startswith("llama")), default=None)
        if best and "chorus --reuse segments" in results["sides"]:
            ratio = results["sides"]["chorus --reuse segments"]["tok_s"] / best[0]
            results["ratio_vs_best_peer"] = ratio
            print(f"chorus --reuse segments / {best[1]}: {ratio:.2f}x aggregate tok/s ({cpu}, {a.threads} threads)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
