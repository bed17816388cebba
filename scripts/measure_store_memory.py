#!/usr/bin/env python3
"""Redis memory of one published document, measured (not a test): a fresh redis-server, one
`chorus serve --kv-store` replica (1 thread) that serves a ~4K-token document, then Redis's own
accounting (INFO memory used_memory before and after, DBSIZE) against the values' bytes (STRLEN).

  python3 scripts/measure_store_memory.py [--words 3450] [-- extra chorus serve flags]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from kv_store_test import BIN, RedisServer, Stack, ask, document, serve, settled  # noqa: E402


def used_memory(r):
    info = r.cmd("INFO", "memory").decode()
    return int(next(l.split(":")[1] for l in info.splitlines() if l.startswith("used_memory:")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=3450)
    ap.add_argument("flags", nargs="*")
    a = ap.parse_args()
    st = Stack()
    try:
        redis = st.add(RedisServer())
        r = redis.client()
        base = used_memory(r)
        srv = serve(st, "--kv-store", redis.url, *a.flags)
        _, ttft, u = ask(srv, document(1, a.words) + "\n\nQuestion: Which word comes first? Answer:")
        settled(srv)
        keys = r.cmd("KEYS", "chorus:kv2:*")
        sizes = sorted(r.cmd("STRLEN", k) for k in keys)
        after = used_memory(r)
        m = srv.metrics()
        print(f"binary {BIN}, flags {a.flags}: prompt {u['prompt_tokens']} tokens (TTFT {ttft:.1f} s)")
        print(f"keys {len(keys)}, value bytes {sum(sizes)} (min {sizes[0]}, max {sizes[-1]}), published bytes "
              f"{m['chorus_kv_remote_published_bytes_total']:.0f}")
        print(f"redis used_memory {base} -> {after}: +{after - base} bytes = {(after - base) / sum(sizes):.4f} x the values")
        print("load average:", open("/proc/loadavg").read().split()[:3])
    finally:
        st.close()


if __name__ == "__main__":
    main()
