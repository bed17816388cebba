#!/usr/bin/env python3
"""Serving benchmark: chorus serve beside llama-server, both driven by this one client script (the
`openai` package, streaming) in the same run, on 127.0.0.1.

For each N in --agents (default 1,4,16): N concurrent agents send the same ~4K-token document as
the system message plus their own question, 128 tokens each (ignore_eos, greedy). Reports aggregate
tok/s, TTFT p50/p99, inter-token latency p50/p99, and KV bytes (chorus: peak of /metrics
chorus_kv_held_bytes, measured; llama-server: the KV buffer it allocates, from its own log). Then a
warm agent (the same document again, a new question) vs the cold first one: TTFT.

Usage: scripts/bench_serve.py [-m MODEL] [-t 2] [--agents 1,4,16] [--doc-tokens 4096] [--tg 128]
                              [--peer-kv q8_0] [--reps 1] [--json OUT] [--no-peer]
The peer is llama-server from scripts/build_peer.sh (set CHORUS_PEER_DIR to reuse a build), started
with its best settings for this workload: --parallel max(N), --kv-unified, -fa on, the KV type given.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from serve_harness import ChorusServer, free_port  # noqa: E402

import openai  # noqa: E402

QUESTIONS = ["Who was Du Fu?", "When was Du Fu born?", "Summarize the document.", "Which poet was his friend?",
             "What are the themes of his poetry?", "Where did he live at the end?", "How is he regarded today?",
             "What did he write about war?", "Who were his parents?", "What offices did he hold?",
             "Which rebellion affected him?", "How many poems survive?", "What is his style called?",
             "Who translated him?", "Where was he born?", "What was his courtesy name?"]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def document(tokenize, target):
    text = open(os.path.join(ROOT, "examples", "du_fu.txt")).read()
    while len(text) < 8 * target:
        text += "\n" + text
    lo, hi = 100, len(text)
    while lo < hi:  # the longest prefix with <= target tokens
        mid = (lo + hi + 1) // 2
        if tokenize(text[:mid]) <= target:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def agent(base_url, model, doc, question, tg, out, timeout=1800):
    """One streaming agent. A request that does not finish within `timeout` s counts the tokens it got
    (and is marked timed_out) instead of ending the benchmark."""
    c = openai.OpenAI(base_url=base_url, api_key="-", max_retries=0, timeout=timeout)
    t0 = time.time()
    times = []
    usage = None
    timed_out = False
    try:
        stream = c.chat.completions.create(
            model=model, messages=[{"role": "system", "content": doc}, {"role": "user", "content": question}],
            max_tokens=tg, temperature=0, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True})
        for ch in stream:
            if ch.choices and ch.choices[0].delta.content:
                times.append(time.time())
            if getattr(ch, "usage", None):
                usage = ch.usage
    except (openai.APITimeoutError, openai.APIConnectionError):
        timed_out = True
    out.append({"t0": t0, "times": times, "tokens": usage.completion_tokens if usage else len(times),
                "timed_out": timed_out,
                "cached": getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None) if usage else None})


def run_agents(base_url, model, doc, questions, tg):
    """One concurrent streaming agent per question; returns (their records, wall seconds)."""
    out = []
    threads = [threading.Thread(target=agent, args=(base_url, model, doc, q, tg, out)) for q in questions]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.time() - t0


def wave(base_url, model, doc, questions, tg, sampler=None):
    out, wall = run_agents(base_url, model, doc, questions, tg)
    ttft = [r["times"][0] - r["t0"] for r in out if r["times"]]
    itl = [b - a for r in out for a, b in zip(r["times"], r["times"][1:])]
    tokens = sum(r["tokens"] for r in out)
    return {"agents": len(questions), "timed_out": sum(r["timed_out"] for r in out), "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
            "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99), "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99),
            "cached_tokens": [r["cached"] for r in out]}


class Sampler(threading.Thread):
    """Peak of chorus_kv_held_bytes while a wave runs."""

    def __init__(self, srv):
        super().__init__(daemon=True)
        self.srv, self.peak, self.stop_ = srv, 0, False

    def run(self):
        while not self.stop_:
            try:
                self.peak = max(self.peak, self.srv.metrics()["chorus_kv_held_bytes"])
            except Exception:
                pass
            time.sleep(0.05)


class LlamaServer:
    def __init__(self, binary, model, threads, parallel, ctx, kv_type, extra=(), unified=True):
        self.cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", str(threads), "-tb", str(threads),
                    "--parallel", str(parallel), *(["--kv-unified"] if unified else []), "-fa", "on", "-c", str(ctx),
                    "-ctk", kv_type, "-ctv", kv_type, "--no-webui", "-b", "2048", "-ub", "512", *extra]
        port = self.free_port()
        self.cmd[self.cmd.index("--port") + 1] = str(port)
        self.log = []
        self._kv = None
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stdout], daemon=True).start()
        self.url = f"http://127.0.0.1:{port}/v1"
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.2)
        else:
            raise RuntimeError("llama-server did not start: " + "".join(self.log[-20:]))

    @staticmethod
    def free_port():
        return free_port()

    def kv_bytes(self):
        """The KV buffer llama.cpp allocates with these settings, as its log reports it ('llama_kv_cache: size =
        X MiB'). That line is printed at -lv 4 only, whose per-step debug output slows the server several times:
        a second instance with the same flags at -lv 4 is started just to read it, then stopped."""
        if self._kv is None:
            cmd = list(self.cmd)
            cmd[cmd.index("--port") + 1] = str(self.free_port())
            out = subprocess.Popen(cmd + ["-lv", "4"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            total = 0.0
            for line in out.stdout:
                m = re.search(r"llama_kv_cache: size =\s*([\d.]+) MiB", line)
                if m:
                    total += float(m.group(1))
                if "listening on" in line:
                    break
            out.kill()
            out.wait()
            self._kv = int(total * 2**20)
        return self._kv

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--agents", default="1,4,16")
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--peer-kv", default="q8_0", help="llama-server KV type (f16, q8_0, q4_0)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--chorus-flags", default="", help="extra chorus serve flags")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    ns = [int(x) for x in a.agents.split(",")]
    binary = os.path.join(ROOT, "build", "bin", "chorus")
    results = {"command": "scripts/bench_serve.py " + " ".join(sys.argv[1:]), "model": a.model, "threads": a.threads,
               "tg": a.tg, "load_avg": os.getloadavg(), "chorus": {}, "llama_server": {}}

    srv = ChorusServer(binary, a.model, "-t", str(a.threads), "--kv-budget", "2G", *a.chorus_flags.split())
    # Document of ~doc_tokens tokens by the server's own count (a completion with max_tokens 1).
    c = openai.OpenAI(base_url=srv.url, api_key="-", max_retries=0, timeout=600)

    def ntok(text):
        return c.completions.create(model="m", prompt=text, max_tokens=1).usage.prompt_tokens

    doc = document(ntok, a.doc_tokens)
    results["doc_tokens"] = ntok(doc)
    print(f"document: {results['doc_tokens']} tokens; load average {os.getloadavg()[0]:.2f}", flush=True)

    def run_one(name, url, kv, n):
        # a fresh document per side and N (a different first line), so every wave starts cold
        d = f"[{name} run {n}]\n" + doc
        s = Sampler(srv) if name == "chorus" else None
        if s:
            s.start()
        cold = wave(url, "m", d, QUESTIONS[:n], a.tg)
        if s:
            s.stop_ = True
            s.join()
        warm = wave(url, "m", d, ["One more question: " + QUESTIONS[-1]], a.tg)
        cold["kv_bytes"] = s.peak if s else kv()
        cold["warm_ttft"] = warm["ttft_p50"]
        cold["warm_cached_tokens"] = warm["cached_tokens"][0]
        cold["load_avg"] = os.getloadavg()[0]
        print(f"{name:12s} N={n:2d}: {cold['tok_s']:7.1f} tok/s  TTFT p50 {cold['ttft_p50']:.3f} p99 {cold['ttft_p99']:.3f} s  "
              f"ITL p50 {1000 * cold['itl_p50']:.1f} p99 {1000 * cold['itl_p99']:.1f} ms  KV {cold['kv_bytes'] / 2**20:.1f} MiB  "
              f"warm TTFT {warm['ttft_p50']:.3f} s (cached {warm['cached_tokens'][0]})  load {cold['load_avg']:.2f}", flush=True)
        return cold

    peer = None
    if not a.no_peer:
        peer_dir = subprocess.run([os.path.join(ROOT, "scripts", "build_peer.sh"), "--print-dir"], capture_output=True,
                                  text=True, check=True).stdout.strip().splitlines()[-1]
        # Unified KV: room for every agent's whole sequence (llama-server's cache is per slot, not shared).
        ctx = max(ns) * (results["doc_tokens"] + a.tg + 64) + 256
        peer = LlamaServer(os.path.join(peer_dir, "llama-server"), a.model, a.threads, max(ns), ctx, a.peer_kv)
        results["llama_server_cmd"] = " ".join(peer.cmd)
    # One short request to each first: neither side's first-request warm-up lands in a wave.
    for url in [srv.url] + ([peer.url] if peer else []):
        wave(url, "m", "warm-up", ["Say hi."], 8)
    # Both servers are up (idle when not driven); the sides alternate per N, so both see the same load.
    for n in ns:
        results["chorus"][n] = run_one("chorus", srv.url, None, n)
        if peer:
            results["llama_server"][n] = run_one("llama-server", peer.url, peer.kv_bytes, n)
            ch, ll = results["chorus"][n], results["llama_server"][n]
            print(f"N={n:2d}: chorus / llama-server aggregate tok/s {ch['tok_s'] / ll['tok_s']:.2f}x, KV bytes "
                  f"{ch['kv_bytes'] / max(1, ll['kv_bytes']):.3f}x", flush=True)
    srv.stop()
    if peer:
        peer.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
