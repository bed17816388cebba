#!/usr/bin/env python3
"""llama.cpp at its best on this machine: ppN / tgN tokens/s from its own llama-bench, over the
settings that change its speed, and which of them won.

Variants measured (all in one llama-bench run, interleaved by llama-bench itself):
  weights   the original file, plus Q4_0 and Q8_0 conversions made by llama-quantize
            (--allow-requantize; llama.cpp repacks these types for its fastest CPU kernels — a
            Q4_1 or K-quant file is not repacked on x86), cached under .cache/peer/models/
  flash attention   on and off
  KV cache type     --kv f16 (default; q8_0, q4_0: llama-bench's -ctk/-ctv)
for each thread count, after --depth untimed context tokens (llama-bench -d; decode at depth). Per (test, threads) the variant with the highest median wins; every
variant's median, min and max are kept. The binaries come from scripts/build_peer.sh (the
llama.cpp sources vendored in the llama-cpp-python sdist); this script does not build them.

Usage: scripts/ref/llama_best.py -m MODEL [--threads 1,2] [--pp 512] [--tg 128] [--reps 3]
                                 [--weights original,q4_0,q8_0] [--fa on,off] [--kv f16]
                                 [--depth 0] [--bin-dir DIR] [--json]
--pp 0 measures decode only (e.g. with --depth 4096).
The first run on a machine measures the whole grid and stores each (threads, test)'s winner
(scripts/ref/peer_winners.py); later runs with the same grid measure only the winners. --regrid
(or CHORUS_PEER_REGRID=1) measures the whole grid again.
--json prints one JSON object: {"threads": {"1": {"pp": best median, "tg": ..., "pp_settings":
"...", "tg_settings": "...", "pp_spread": [min, max], ...}}, "variants": [...], "tool": "..."}
(tools/cmd_bench.cc reads "pp"/"tg" and the settings).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_winners import Winners, regrid_requested  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def peer_bin_dir(explicit: str | None) -> str:
    if explicit:
        return explicit
    r = subprocess.run([os.path.join(ROOT, "scripts", "build_peer.sh"), "--print-dir"], capture_output=True,
                       text=True)
    d = r.stdout.strip()
    if r.returncode != 0 or not d or not os.path.exists(os.path.join(d, "llama-bench")):
        sys.exit("llama_best.py: llama.cpp's tools are not built: run scripts/build_peer.sh "
                 "(or pass --bin-dir with llama-bench and llama-quantize)")
    return d


def crash_hint(returncode: int) -> str:
    """What to do when a llama.cpp tool dies by a signal (returncode -N)."""
    if returncode >= 0:
        return ""
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = f" (killed by {name})"
    if returncode in (-signal.SIGSEGV, -signal.SIGILL) and os.environ.get("CHORUS_PEER_VARIANT", "native") == "native":
        hint += ("; on a Xeon with AMX llama.cpp's native build crashes in its AMX path: build it without AMX "
                 "(scripts/build_peer.sh --variant noamx) and run with CHORUS_PEER_VARIANT=noamx")
    return hint


def convert(bin_dir: str, model: str, qtype: str) -> str:
    """The model converted to qtype by llama-quantize, cached beside the peer build."""
    cache = os.path.join(os.environ.get("CHORUS_PEER_DIR", os.path.join(ROOT, ".cache", "peer")), "models")
    os.makedirs(cache, exist_ok=True)
    stem = os.path.splitext(os.path.basename(model))[0]
    out = os.path.join(cache, f"{stem}.requant-{qtype.upper()}.gguf")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(model):
        return out
    tmp = out + ".part"
    print(f"llama_best.py: llama-quantize {os.path.basename(model)} -> {qtype.upper()}", file=sys.stderr)
    r = subprocess.run([os.path.join(bin_dir, "llama-quantize"), "--allow-requantize", model, tmp, qtype.upper()],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"llama_best.py: llama-quantize to {qtype} failed:\n{r.stderr[-2000:]}")
    os.replace(tmp, out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--weights", default="original,q4_0,q8_0")
    ap.add_argument("--fa", default="on,off")
    ap.add_argument("--kv", default="f16", choices=["f16", "q8_0", "q4_0"])
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--bin-dir")
    ap.add_argument("--regrid", action="store_true", help="measure the whole grid even where winners are stored")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        sys.exit(f"llama_best.py: no such model file: {a.model}")
    bin_dir = peer_bin_dir(a.bin_dir)
    if a.kv != "f16" and a.fa != "on":
        # llama.cpp refuses a quantized V cache without flash attention (llama-bench then exits
        # non-zero for the whole run): measure the variants it accepts.
        print(f"llama_best.py: KV {a.kv} needs flash attention in llama.cpp: --fa on only", file=sys.stderr)
        a.fa = "on"
    winners = Winners("llama_best.py", bin_dir, a.model)
    tests = [t for t, n in (("pp", a.pp), ("tg", a.tg)) if n > 0]
    row_key = lambda t, test: (f"threads {t} {test}{a.pp if test == 'pp' else a.tg} depth {a.depth} KV {a.kv} "  # noqa: E731
                               f"grid weights {a.weights} fa {a.fa}")
    stored = {(t, test): winners.get(row_key(t, test)) for t in a.threads.split(",") for test in tests}
    cached = bool(stored) and all(stored.values()) and not regrid_requested(a.regrid)
    models = {}
    for w in a.weights.split(","):
        if cached and all(v["settings"]["weights"] != w for v in stored.values()):
            continue
        models[w] = a.model if w == "original" else convert(bin_dir, a.model, w)
    by_path = {v: k for k, v in models.items()}

    def bench(cmd: list[str]) -> list[dict]:
        print("llama_best.py: " + " ".join(cmd), file=sys.stderr)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"llama_best.py: llama-bench failed ({r.returncode}){crash_hint(r.returncode)}:\n{r.stderr[-2000:]}")
        return json.loads(r.stdout)

    base = [os.path.join(bin_dir, "llama-bench"), "-d", str(a.depth), "-r", str(a.reps), "-ctk", a.kv, "-ctv", a.kv,
            "-o", "json"]
    if cached:  # one llama-bench per (threads, test), at its stored winner
        rows, cmds = [], []
        for (t, test), v in stored.items():
            cmd = base + ["-m", models[v["settings"]["weights"]], "-t", t, "-p", str(a.pp if test == "pp" else 0),
                          "-n", str(a.tg if test == "tg" else 0), "-fa", v["settings"]["fa"]]
            rows += bench(cmd)
            cmds.append(" ".join(cmd))
        grid = f"stored winners (measured {min(v['date'] for v in stored.values())}; --regrid measures the grid again)"
    else:
        cmd = base + ["-m", ",".join(models.values()), "-t", a.threads, "-p", str(a.pp), "-n", str(a.tg), "-fa", a.fa]
        rows = bench(cmd)
        cmds = [" ".join(cmd)]
        grid = "full"
    variants, best = [], {}
    for row in rows:
        test = "pp" if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0 else "tg"
        samples = row.get("samples_ts") or [row["avg_ts"]]
        fa = row.get("flash_attn")
        fa_s = {True: "on", False: "off", 1: "on", 0: "off", -1: "auto"}.get(fa, str(fa))
        settings = (f"weights {by_path.get(row['model_filename'], row['model_filename'])} ({row.get('model_type', '')}), "
                    f"flash-attn {fa_s}, KV {row.get('type_k', a.kv)}")
        v = {"test": test, "threads": row["n_threads"], "settings": settings, "median": statistics.median(samples),
             "min": min(samples), "max": max(samples), "samples": samples}
        variants.append(v)
        v["stored"] = {"weights": by_path.get(row["model_filename"], row["model_filename"]), "fa": fa_s}
        key = (str(row["n_threads"]), test)
        if key not in best or v["median"] > best[key]["median"]:
            best[key] = v
    if not cached:
        for (t, test), v in best.items():
            winners.put(row_key(t, test), v["stored"], v["median"])
        winners.save()
    for v in variants:
        del v["stored"]
    out = {"threads": {}, "variants": variants, "depth": a.depth, "kv_type": a.kv, "tool": f"llama-bench (build {rows[0].get('build_commit', '?')} "
                                                        f"{rows[0].get('build_number', '')})" if rows else "llama-bench",
           "command": "; ".join(cmds), "grid": grid, "reps": a.reps}
    for (t, test), v in best.items():
        d = out["threads"].setdefault(t, {})
        d[test] = v["median"]
        d[f"{test}_settings"] = v["settings"]
        d[f"{test}_spread"] = [v["min"], v["max"]]
    if a.json:
        print(json.dumps(out))
        return
    print(f"{'threads':>7} {'test':>4} {'median t/s':>11} {'min':>9} {'max':>9}  settings")
    for v in sorted(variants, key=lambda v: (v["threads"], v["test"], -v["median"])):
        mark = "*" if best[(str(v["threads"]), v["test"])] is v else " "
        print(f"{v['threads']:>7} {v['test']:>4} {v['median']:>11.1f} {v['min']:>9.1f} {v['max']:>9.1f} {mark} {v['settings']}")
    print("* = the best of its (threads, test): chorus bench compares against it")


if __name__ == "__main__":
    main()
