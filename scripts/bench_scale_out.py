#!/usr/bin/env python3
"""Scale-out benchmark (not a test): 1 vs 2 `chorus serve` replicas behind HAProxy, with and without
the Redis block store (--kv-store), 16 agents on one shared ~4K-token document.

Per run (fresh replicas, fresh Redis, so every run starts cold): one warm-up request carries the
document through the load balancer (it lands on one replica, which prefills and publishes it),
then 16 agents ask their own question about the document at once (round robin: half of them land
on the other replica, which has never seen it). Measured: wall time of the 16, aggregate generated tok/s,
prompt tokens computed across replicas (sum of chorus_prefill_tokens_total, warm-up included), TTFT
p50/p99 of the 16, remote hits. Configurations are interleaved, --reps of each; medians and ranges.

  python3 scripts/bench_scale_out.py --reps 3 --out docs/results/scale-out.json
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from serve_harness import DEFAULT_MODEL, ChorusServer  # noqa: E402
from kv_store_test import RedisServer, ask, document, free_port  # noqa: E402


class HaProxy:
    def __init__(self, backends):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="chorus-haproxy-")
        cfg = os.path.join(self.dir, "haproxy.cfg")
        servers = "\n".join(f"  server r{i} 127.0.0.1:{p}" for i, p in enumerate(backends))
        with open(cfg, "w") as f:
            f.write(f"""global
  maxconn 1024
defaults
  mode http
  option http-server-close
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend chorus
  bind 127.0.0.1:{self.port}
  default_backend replicas
backend replicas
  balance roundrobin
{servers}
""")
        self.config = open(cfg).read()
        self.proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Url:
    def __init__(self, url):
        self.url = url


def run(binary, replicas, store, doc, n_agents, max_tokens):
    started = []
    try:
        redis = None
        flags = ["-t", "1", "--max-tokens", str(max_tokens)]
        if store:
            redis = RedisServer()
            started.append(redis)
            flags += ["--kv-store", redis.url]
        srvs = [ChorusServer(binary, DEFAULT_MODEL, *flags) for _ in range(replicas)]
        started += srvs
        lb = HaProxy([s.port for s in srvs])
        started.append(lb)
        front = Url(lb.url)
        _, warm_ttft, wu = ask(front, doc + "\n\nQuestion: How does the record begin? Answer:", max_tokens=1)
        if store:  # the replica that served it publishes what it sealed before the agents come
            want = wu["prompt_tokens"] // 32
            end = time.time() + 60
            while (max(s.metrics().get("chorus_kv_remote_published_blocks_total", 0) for s in srvs) < want and
                   time.time() < end):
                time.sleep(0.05)
        res = [None] * n_agents

        def agent(i):
            res[i] = ask(front, doc + f"\n\nQuestion {i}: Which word appears in sentence {i + 2}? Answer:",
                         max_tokens=max_tokens)

        t0 = time.perf_counter()
        th = [threading.Thread(target=agent, args=(i,)) for i in range(n_agents)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.perf_counter() - t0
        ms = [s.metrics() for s in srvs]
        ttft = sorted(r[1] for r in res)
        gen = sum(r[2]["completion_tokens"] for r in res)
        return {
            "replicas": replicas, "store": store, "wall_s": wall, "generated_tokens": gen, "tok_per_s": gen / wall,
            "prefill_tokens": sum(m["chorus_prefill_tokens_total"] for m in ms),
            "prefill_tokens_per_replica": [m["chorus_prefill_tokens_total"] for m in ms],
            "prompt_tokens_each": res[0][2]["prompt_tokens"],
            "ttft_p50_s": statistics.median(ttft), "ttft_p99_s": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
            "warm_ttft_s": warm_ttft,
            "remote_hits": sum(m.get("chorus_kv_remote_hits_total", 0) for m in ms),
            "remote_fetched_bytes": sum(m.get("chorus_kv_remote_fetched_bytes_total", 0) for m in ms),
            "remote_published_bytes": sum(m.get("chorus_kv_remote_published_bytes_total", 0) for m in ms),
            "remote_published_blocks": sum(m.get("chorus_kv_remote_published_blocks_total", 0) for m in ms),
            "haproxy_config": lb.config,
        }
    finally:
        for x in reversed(started):
            try:
                (getattr(x, "kill", None) or x.stop)()
            except Exception as e:
                print("stop:", e, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "chorus"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--words", type=int, default=3450, help="document length in words (3450 = ~4.06K tokens)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    doc = document(1, a.words)
    configs = [(1, False), (2, False), (2, True)]
    runs = []
    for rep in range(a.reps):
        for replicas, store in configs:
            r = run(a.bin, replicas, store, doc, a.agents, a.max_tokens)
            r["rep"] = rep
            runs.append(r)
            print(f"rep {rep} replicas {replicas} store {store}: {r['tok_per_s']:.1f} tok/s, wall {r['wall_s']:.1f} s, "
                  f"prefill {r['prefill_tokens']:.0f} tokens {r['prefill_tokens_per_replica']}, TTFT p50 "
                  f"{r['ttft_p50_s']:.2f} s p99 {r['ttft_p99_s']:.2f} s, remote hits {r['remote_hits']:.0f}",
                  flush=True)
    load = open("/proc/loadavg").read().split()[:3]
    summary = []
    for replicas, store in configs:
        rs = [r for r in runs if r["replicas"] == replicas and r["store"] == store]
        row = {"replicas": replicas, "store": store}
        for k in ("tok_per_s", "wall_s", "prefill_tokens", "ttft_p50_s", "ttft_p99_s", "remote_hits",
                  "remote_fetched_bytes", "remote_published_bytes", "remote_published_blocks"):
            v = [r[k] for r in rs]
            row[k] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
        summary.append(row)
        print(f"replicas {replicas} store {'yes' if store else 'no '}: "
              + ", ".join(f"{k} {row[k]['median']:.3g} [{row[k]['min']:.3g}, {row[k]['max']:.3g}]"
                          for k in ("tok_per_s", "prefill_tokens", "ttft_p50_s", "ttft_p99_s")))
    print("load average at the end:", " ".join(load))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "load_end": load, "prompt_tokens_each":
                       runs[0]["prompt_tokens_each"], "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
