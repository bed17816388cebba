#!/usr/bin/env python3
"""Speed peer: llama.cpp prompt processing (ppN) and generation (tgN) tokens/s, llama-bench style.

For each thread count (default 1 and 2), with a fresh context per test (n_ctx = depth + pp or
depth + tg, f16 KV unless --kv-type, flash-attn auto unless --flash-attn):
  ppN: one llama_decode of an N-token batch of random token ids (n_batch = n_ubatch = N by
       default), only the last token requests logits, from a cleared KV cache (after --depth
       untimed context tokens). Timed: llama_decode + llama_synchronize.
  tgN: N llama_decode calls of one token each (random ids, like llama-bench), each followed by
       llama_synchronize, after --depth untimed context tokens (depth 0 = llama-bench's tg128:
       the first decode is at position 0). Timed: the sum of the N decode+synchronize calls
       (the Python-side batch fill between them is excluded).
One warm-up run of each test first (a full ppN, a 1-token tg, like llama-bench), then --reps
timed runs; tokens/s = N / seconds per run. Reported: median (the headline number), best,
mean and every sample.

Usage: scripts/ref/llama_bench.py [-m MODEL] [--threads 1,2] [--pp 512] [--tg 128] [--reps 3]
                                  [--depth 0] [--kv-type f16|q8_0|q4_0] [--flash-attn auto|on|off]
                                  [--n-batch N] [--n-ubatch N] [--seed 1] [--json]
                                  [--wait-idle SECONDS] [--idle-threshold 0.9]
--wait-idle: on a shared machine, wait before each timed rep until the CPUs are idle (the idle
fraction seen is kept in detail.*.cpu_idle_before_rep; a value below the threshold = timed out).
--json prints one JSON object on stdout:
  {"threads": {"1": {"pp512": tok/s, "tg128": tok/s, "pp": (same as pp512), "tg": (same as tg128)},
               "2": {...}}, "llama_cpp_version": ..., "kv_type": ..., "depth": ...,
   "detail": {...samples...}, ...}   (tools/cmd_bench.cc reads the "pp"/"tg" aliases)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llamaref as R  # noqa: E402


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def prefill(m: R.Model, rng, n: int) -> None:
    """Fill the KV cache with n random tokens (untimed), n_batch at a time."""
    pos = 0
    while pos < n:
        k = min(m.n_batch, n - pos)
        m.decode(rng.integers(0, m.n_vocab, k), pos, False)
        pos += k
    m.synchronize()


def run_pp(m: R.Model, rng, n_prompt: int, depth: int) -> tuple[float, float]:
    """(wall, process CPU) seconds for one n_prompt-token decode after `depth` tokens of context."""
    m.clear()
    if depth:
        prefill(m, rng, depth)
    toks = rng.integers(0, m.n_vocab, n_prompt)
    want = np.zeros(n_prompt, dtype=bool)
    want[-1] = True
    if n_prompt <= m.n_batch:
        m.fill(toks, depth, want)
        t0, c0 = time.perf_counter(), time.process_time()
        m.run()
        m.synchronize()
        return time.perf_counter() - t0, time.process_time() - c0
    # prompt larger than n_batch: several decodes, like llama-bench's test_prompt
    total, cpu, pos = 0.0, 0.0, 0
    while pos < n_prompt:
        k = min(m.n_batch, n_prompt - pos)
        m.fill(toks[pos:pos + k], depth + pos, want[pos:pos + k])
        t0, c0 = time.perf_counter(), time.process_time()
        m.run()
        total += time.perf_counter() - t0
        cpu += time.process_time() - c0
        pos += k
    t0, c0 = time.perf_counter(), time.process_time()
    m.synchronize()
    return total + time.perf_counter() - t0, cpu + time.process_time() - c0


def run_tg(m: R.Model, rng, n_gen: int, depth: int) -> tuple[float, float]:
    """(wall, process CPU) seconds for n_gen single-token decodes after `depth` tokens of context."""
    m.clear()
    if depth:
        prefill(m, rng, depth)
    toks = rng.integers(0, m.n_vocab, n_gen)
    total = cpu = 0.0
    for i in range(n_gen):
        m.fill(toks[i:i + 1], depth + i, True)
        t0, c0 = time.perf_counter(), time.process_time()
        m.run()
        m.synchronize()
        total += time.perf_counter() - t0
        cpu += time.process_time() - c0
    return total, cpu


def summarize(n_tok: int, secs: list[float], cpus: list[float]) -> dict:
    ts = [n_tok / s for s in secs]
    return {"tps_median": statistics.median(ts), "tps_best": max(ts), "tps_mean": statistics.fmean(ts),
            "tps_stdev": statistics.stdev(ts) if len(ts) > 1 else 0.0,
            "samples_tps": [round(x, 2) for x in ts], "samples_s": [round(s, 5) for s in secs],
            # tokens per CPU-second of this process (all its threads). Diagnostic: ≈ tps at 1 thread
            # when the process was never descheduled; it does not see contention for caches or
            # hyper-thread siblings, so it is no substitute for a quiet machine.
            "tokens_per_cpu_s_median": statistics.median(n_tok / max(c, 1e-9) for c in cpus),
            "samples_cpu_s": [round(c, 5) for c in cpus]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=R.DEFAULT_MODEL)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--pp", type=int, default=512, help="prompt tokens (default 512; 0 = skip)")
    ap.add_argument("--tg", type=int, default=128, help="generated tokens (default 128; 0 = skip)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--depth", type=int, default=0, help="tokens of context before each test")
    ap.add_argument("--kv-type", choices=sorted(R.KV_TYPES), default="f16")
    ap.add_argument("--flash-attn", choices=sorted(R.FLASH_ATTN), default="auto",
                    help="auto (default; 'on' is forced for a quantized KV cache), on, off")
    ap.add_argument("--n-batch", type=int, help="default: the pp size (512)")
    ap.add_argument("--n-ubatch", type=int, help="default: n_batch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="before each rep, wait up to SECONDS for the CPUs to be --idle-threshold "
                         "idle (for shared machines; default 0 = no wait)")
    ap.add_argument("--idle-threshold", type=float, default=0.9,
                    help="idle fraction of all CPUs that counts as quiet (default 0.9)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    a = ap.parse_args()

    threads = [int(x) for x in a.threads.split(",") if x]
    fa = a.flash_attn
    if a.kv_type != "f16" and fa == "auto":
        fa = "on"  # a quantized V cache needs flash attention
    n_batch = a.n_batch or max(a.pp, 1)
    n_ubatch = a.n_ubatch or n_batch
    ver = R.versions()
    info = {
        "command": "scripts/ref/llama_bench.py " + " ".join(sys.argv[1:]),
        "model": os.path.basename(a.model),
        "cpu": cpu_name(), "n_cpus": os.cpu_count(),
        "llama_cpp_version": ver.get("llama_cpp_python"), "libllama": ver.get("libllama"),
        "system_info": ver.get("system_info"),
        "kv_type": a.kv_type, "flash_attn": fa, "depth": a.depth, "reps": a.reps,
        "n_batch": n_batch, "n_ubatch": n_ubatch, "seed": a.seed,
        "stat": "median of reps (tokens/s)",
        "loadavg_before": os.getloadavg()[0], "wait_idle_s": a.wait_idle,
        "idle_threshold": a.idle_threshold,
    }
    print("# " + info["command"], file=sys.stderr)
    print(f"# llama-cpp-python {info['llama_cpp_version']} (libllama {info['libllama']}), "
          f"cpu: {info['cpu']} x{info['n_cpus']}", file=sys.stderr)
    print(f"# {info['system_info']}", file=sys.stderr)
    print(f"# model {info['model']}, kv {a.kv_type}, flash_attn {fa}, n_batch {n_batch}, "
          f"n_ubatch {n_ubatch}, depth {a.depth}, reps {a.reps} (+1 warm-up)", file=sys.stderr)
    print(f"{'threads':>7} | {'test':>12} | {'t/s median':>10} | {'best':>9} | samples", file=sys.stderr)

    result = {"threads": {}, "detail": {}}
    rng = np.random.default_rng(a.seed)
    for nt in threads:
        result["threads"][str(nt)] = {}
        result["detail"][str(nt)] = {}
        tests = []
        if a.pp > 0:
            tests.append((f"pp{a.pp}", a.pp, run_pp, a.pp))
        if a.tg > 0:
            tests.append((f"tg{a.tg}", a.tg, run_tg, 1))
        for name, n_tok, fn, warm_n in tests:
            m = R.Model(a.model, n_ctx=a.depth + n_tok, n_batch=n_batch, n_ubatch=n_ubatch, n_threads=nt,
                        kv_type=a.kv_type, flash_attn=fa, verbose=a.verbose)
            fn(m, rng, warm_n, 0)  # warm-up, as llama-bench: a full pp / a 1-token tg
            secs, cpus, idles = [], [], []
            for _ in range(a.reps):
                idles.append(R.wait_idle(a.wait_idle, a.idle_threshold))
                wall, cpu = fn(m, rng, n_tok, a.depth)
                secs.append(wall)
                cpus.append(cpu)
            m.close()
            s = summarize(n_tok, secs, cpus)
            if a.wait_idle > 0:
                s["cpu_idle_before_rep"] = [round(x, 3) for x in idles]
            result["threads"][str(nt)][name] = round(s["tps_median"], 2)
            result["threads"][str(nt)][name[:2]] = round(s["tps_median"], 2)  # "pp"/"tg" alias
            result["detail"][str(nt)][name] = s
            label = name + (f" @ d{a.depth}" if a.depth else "")
            print(f"{nt:>7} | {label:>12} | {s['tps_median']:>10.2f} | {s['tps_best']:>9.2f} | "
                  f"{s['samples_tps']}", file=sys.stderr)
    info["loadavg_after"] = os.getloadavg()[0]
    if max(info["loadavg_before"], info["loadavg_after"]) > 0.5 + max(threads):
        print(f"# WARNING: load average {info['loadavg_before']:.1f} -> {info['loadavg_after']:.1f}: "
              f"other work shared the CPUs; the numbers are low", file=sys.stderr)
    result.update(info)
    if a.json:
        print(json.dumps(result))
    else:
        for nt, d in result["threads"].items():
            print(f"threads={nt} " + " ".join(f"{k}={v:.2f} t/s" for k, v in d.items() if len(k) > 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
