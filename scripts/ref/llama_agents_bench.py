#!/usr/bin/env python3
"""Speed peer: llama.cpp multi-agent decoding over one shared document (aggregate tokens/s).

The best llama.cpp offers for "N agents read one document, then each generates": for each agent
count N (a fresh context per N):
  context: n_seq_max = N, kv_unified = true (one KV buffer for all sequences), n_ctx = doc + N*tg
           (llama.cpp rounds it up to a multiple of 256), n_batch = n_ubatch = 512, f16 KV unless
           --kv-type (a quantized V cache forces flash attention on; otherwise --flash-attn, auto).
  prefill: the document (--doc-tokens random token ids, seeded) ONCE into sequence 0, 512 tokens
           per llama_decode, no logits. Timed (decode calls + a final llama_synchronize).
  share:   llama_memory_seq_cp(mem, 0, i, -1, -1) for i = 1..N-1 (with the unified cache this adds
           seq id i to the document's cells: no copy, no extra memory). Timed separately.
  decode:  --tg steps; each step is ONE llama_decode of N tokens (token of agent i: a random id,
           seq_id i, position doc + step, logits requested for every token). Timed: the sum over
           steps of llama_decode + llama_synchronize (the Python-side batch fill is excluded).
  aggregate decode tokens/s = N * tg / decode seconds.
One untimed warm-up first (a 32-token prefill + one N-token step), then --reps runs (the KV cache
cleared before each); the median run is reported.
Checks on every run: after the copy every sequence ends at position doc-1; at step 0 all agents
get the SAME token, so their logits rows must match row 0 (they only can if the copy shared the
document) -- the largest |difference| is reported as check_logits_max_abs_diff; after the run
every sequence ends at doc+tg-1. The KV size is read from llama.cpp's own log
("llama_kv_cache: size = ... MiB (... cells ...)"), labelled kv_log; nothing is computed.

Usage: scripts/ref/llama_agents_bench.py [-m MODEL] [--doc-tokens 4096] [--agents 1,4,8,15]
           [--tg 128] [--threads 2] [--kv-type f16|q8_0|q4_0] [--flash-attn auto|on|off]
           [--reps 1] [--seed 1] [--wait-idle SECONDS] [--idle-threshold 0.9] [--json] [--verbose]
--wait-idle: on a shared machine, wait before each timed run until the CPUs are idle (the idle
fraction seen is kept as cpu_idle_before_run; below the threshold = the wait timed out). Also kept
per run: loadavg_1m_before_run, and decode_process_cpu_per_wall (this process's CPU seconds per
wall second while decoding: ~threads when it had the cores, lower when it shared them).
--json prints one JSON object on stdout:
  {"agents": {"1": {"decode_tokens_per_s": .., "prefill_seconds": .., ...}, "4": {...}, ...},
   "kv_type": .., "doc_tokens": .., "tg": .., "threads": .., "llama_cpp_version": ..,
   "loadavg_before": .., "loadavg_after": .., ...}
Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llamaref as R  # noqa: E402

N_BATCH = 512


def prefill(m: R.Model, toks) -> float:
    """Decode the document into sequence 0, N_BATCH tokens a call; returns seconds."""
    total, pos, n = 0.0, 0, len(toks)
    while pos < n:
        k = min(m.n_batch, n - pos)
        m.fill(toks[pos:pos + k], pos, False)
        t0 = time.perf_counter()
        m.run()
        total += time.perf_counter() - t0
        pos += k
    t0 = time.perf_counter()
    m.synchronize()
    return total + time.perf_counter() - t0


def share(m: R.Model, n_agents: int) -> tuple[float, str]:
    """Give sequences 1..n-1 sequence 0's cells; returns (seconds, API name)."""
    api = "none (1 agent)"
    t0 = time.perf_counter()
    for i in range(1, n_agents):
        api = m.seq_cp(0, i)
    return time.perf_counter() - t0, api


def decode_steps(m: R.Model, toks, pos0: int, check: bool) -> tuple[float, list[float], float | None]:
    """toks: (tg, N) token ids. One N-token llama_decode per step. Returns (seconds, per-step
    seconds, step-0 logits max |row i - row 0| if check)."""
    tg, n = toks.shape
    seqs = list(range(n))
    steps, diff = [], None
    for s in range(tg):
        m.fill_seqs(toks[s], [pos0 + s] * n, seqs, True)
        t0 = time.perf_counter()
        m.run()
        m.synchronize()
        steps.append(time.perf_counter() - t0)
        if check and s == 0:
            lg = m.logits(n)
            diff = float(np.max(np.abs(lg - lg[0]))) if n > 1 else 0.0
    return sum(steps), steps, diff


def run_once(m: R.Model, rng, doc: int, n_agents: int, tg: int, wait: float, threshold: float) -> dict:
    m.clear()
    idle = R.wait_idle(wait, threshold) if wait > 0 else None
    load = os.getloadavg()[0]
    doc_toks = rng.integers(0, m.n_vocab, doc)
    t_pre = prefill(m, doc_toks)
    t_cp, api = share(m, n_agents)
    bad = [i for i in range(n_agents) if m.seq_pos_max(i) != doc - 1]
    if bad:
        raise RuntimeError(f"after the copy, sequences {bad} do not end at position {doc - 1}")
    toks = rng.integers(0, m.n_vocab, (tg, n_agents))
    toks[0, :] = toks[0, 0]  # step 0: same token for every agent -> identical logits rows
    c0, w0 = time.process_time(), time.perf_counter()
    t_dec, steps, diff = decode_steps(m, toks, doc, check=True)
    cpu_per_wall = (time.process_time() - c0) / (time.perf_counter() - w0)
    bad = [i for i in range(n_agents) if m.seq_pos_max(i) != doc + tg - 1]
    if bad:
        raise RuntimeError(f"after decoding, sequences {bad} do not end at position {doc + tg - 1}")
    return {"prefill_s": t_pre, "copy_s": t_cp, "decode_s": t_dec, "steps_s": steps,
            "check_diff": diff, "seq_cp_api": api, "cpu_per_wall": cpu_per_wall,
            "cpu_idle_before": idle, "loadavg_before": load}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=R.DEFAULT_MODEL)
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--agents", default="1,4,8,15", help="comma-separated agent counts")
    ap.add_argument("--tg", type=int, default=128, help="new tokens per agent")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", choices=sorted(R.KV_TYPES), default="f16")
    ap.add_argument("--flash-attn", choices=sorted(R.FLASH_ATTN), default="auto",
                    help="auto (default; 'on' is forced for a quantized KV cache), on, off")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="before each timed run, wait up to SECONDS for the CPUs to be --idle-threshold "
                         "idle (for shared machines; default 0 = no wait)")
    ap.add_argument("--idle-threshold", type=float, default=0.9,
                    help="idle fraction of all CPUs that counts as quiet (default 0.9)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    a = ap.parse_args()

    agents = [int(x) for x in a.agents.split(",") if x]
    if not agents or min(agents) < 1 or max(agents) > N_BATCH:
        sys.exit(f"--agents: counts must be in 1..{N_BATCH}")
    if a.doc_tokens < 1 or a.tg < 1 or a.reps < 1:
        sys.exit("--doc-tokens, --tg and --reps must be >= 1")
    fa = a.flash_attn
    if a.kv_type != "f16":
        if fa == "off":
            sys.exit("a quantized V cache needs flash attention (--flash-attn on|auto)")
        fa = "on"
    ver = R.versions()
    info = {
        "command": "scripts/ref/llama_agents_bench.py " + " ".join(sys.argv[1:]),
        "model": os.path.basename(a.model),
        "llama_cpp_version": ver.get("llama_cpp_python"), "libllama": ver.get("libllama"),
        "system_info": ver.get("system_info"), "n_cpus": os.cpu_count(),
        "kv_type": a.kv_type, "flash_attn": fa, "doc_tokens": a.doc_tokens, "tg": a.tg,
        "threads": a.threads, "reps": a.reps, "wait_idle_s": a.wait_idle, "idle_threshold": a.idle_threshold, "seed": a.seed, "n_batch": N_BATCH, "n_ubatch": N_BATCH,
        "kv_unified": True, "stat": "median run of reps",
        "loadavg_before": list(os.getloadavg()),
    }
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    log("# " + info["command"])
    log(f"# llama-cpp-python {info['llama_cpp_version']} (libllama {info['libllama']}), "
        f"{info['n_cpus']} cpus, loadavg {info['loadavg_before'][0]:.2f}")
    log(f"# model {info['model']}, kv {a.kv_type}, flash_attn {fa}, doc {a.doc_tokens}, tg {a.tg}/agent, "
        f"threads {a.threads}, reps {a.reps} (+1 warm-up)")
    log(f"{'agents':>6} | {'n_ctx':>6} | {'KV MiB':>7} | {'prefill s':>9} | {'copy ms':>7} | "
        f"{'decode s':>8} | {'agg t/s':>8} | {'ms/step':>7} | logits check")

    result: dict = {"agents": {}}
    rng = np.random.default_rng(a.seed)
    seq_cp_api = None
    for n in agents:
        m = R.Model(a.model, n_ctx=a.doc_tokens + n * a.tg, n_batch=N_BATCH, n_ubatch=N_BATCH,
                    n_threads=a.threads, kv_type=a.kv_type, flash_attn=fa, verbose=a.verbose,
                    n_seq_max=n, kv_unified=True, capture_log=True)
        kv = R.parse_kv_log(m.log or "")
        # warm-up (untimed): a short prefill + one N-token step
        w = min(32, a.doc_tokens)
        prefill(m, rng.integers(0, m.n_vocab, w))
        share(m, n)
        decode_steps(m, rng.integers(0, m.n_vocab, (1, n)), w, check=False)
        runs = [run_once(m, rng, a.doc_tokens, n, a.tg, a.wait_idle, a.idle_threshold)
                for _ in range(a.reps)]
        settings = {"n_ctx": m.n_ctx, "n_seq_max": m.n_seq_max, "kv_unified": m.kv_unified}
        m.close()
        seq_cp_api = runs[0]["seq_cp_api"] if n > 1 else seq_cp_api
        tps = [n * a.tg / r["decode_s"] for r in runs]
        med = sorted(range(len(runs)), key=lambda i: tps[i])[len(runs) // 2]
        r = runs[med]
        steps_ms = [s * 1e3 for s in r["steps_s"]]
        d = {
            "decode_tokens_per_s": round(tps[med], 2),
            "prefill_seconds": round(r["prefill_s"], 4),
            "prefill_tokens_per_s": round(a.doc_tokens / r["prefill_s"], 2),
            "copy_seconds": round(r["copy_s"], 6),
            "decode_seconds": round(r["decode_s"], 4),
            "step_ms_median": round(statistics.median(steps_ms), 3),
            "step_ms_first": round(steps_ms[0], 3), "step_ms_last": round(steps_ms[-1], 3),
            "check_logits_max_abs_diff": r["check_diff"],
            "decode_process_cpu_per_wall": round(r["cpu_per_wall"], 3),
            "loadavg_1m_before_run": r["loadavg_before"],
            "cpu_idle_before_run": None if r["cpu_idle_before"] is None else round(r["cpu_idle_before"], 3),
            **settings,
            "kv_log": kv,
        }
        if a.reps > 1:
            d["samples_decode_tokens_per_s"] = [round(x, 2) for x in tps]
            d["samples_prefill_seconds"] = [round(x["prefill_s"], 4) for x in runs]
        result["agents"][str(n)] = d
        kvs = f"{kv['kv_size_mib']:.1f}" if "kv_size_mib" in kv else "?"
        log(f"{n:>6} | {m.n_ctx:>6} | {kvs:>7} | {d['prefill_seconds']:>9.3f} | {d['copy_seconds'] * 1e3:>7.3f} | "
            f"{d['decode_seconds']:>8.3f} | {d['decode_tokens_per_s']:>8.2f} | {d['step_ms_median']:>7.2f} | "
            f"max|row-row0| {r['check_diff']:.3g}  (cpu/wall {r['cpu_per_wall']:.2f}, load {r['loadavg_before']:.1f})")
    info["seq_cp_api"] = seq_cp_api
    info["kv_log_note"] = ("kv_log: values parsed from llama.cpp's own log lines at context creation "
                           "(llama_kv_cache: size = ..., buffer sizes); not computed here")
    info["loadavg_after"] = list(os.getloadavg())
    if max(info["loadavg_before"][0], info["loadavg_after"][0]) > 0.5 + a.threads:
        log(f"# WARNING: load average {info['loadavg_before'][0]:.2f} -> {info['loadavg_after'][0]:.2f}: "
            f"other work shared the CPUs; the numbers are low")
    result.update(info)
    if a.json:
        print(json.dumps(result))
    else:
        for n, d in result["agents"].items():
            print(f"agents={n} decode={d['decode_tokens_per_s']:.2f} t/s (aggregate) "
                  f"prefill={d['prefill_seconds']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
