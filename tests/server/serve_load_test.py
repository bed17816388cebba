"""Load and faults against `chorus serve` on 127.0.0.1 (the server issue's must-show 3), bounded: two
rounds of 300 requests from 32 concurrent clients with mixed documents, questions and lengths; 10 %
disconnect mid-stream, 10 % are malformed. Checks: every malformed one gets its 400; no 5xx except
deliberate 503s on a full queue; every well-formed greedy answer equals the same request sent alone
(prefix of it for shorter max_tokens); afterwards nothing is in use (cached prefixes only) and
resident memory is flat across the rounds. Stops by itself (per-request timeouts, fixed counts).

Run: CHORUS_BIN=build/bin/chorus python3 tests/server/serve_load_test.py   (ctest: serve_load)
"""
import concurrent.futures as cf
import http.client
import json
import os
import random
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import ROOT, DEFAULT_MODEL, ChorusServer  # noqa: E402

BIN = os.environ.get("CHORUS_BIN", os.path.join(ROOT, "build", "bin", "chorus"))
MODEL = os.environ.get("CHORUS_MODEL", DEFAULT_MODEL)
THREADS = os.environ.get("CHORUS_THREADS", "2")
REQUESTS = int(os.environ.get("CHORUS_LOAD_REQUESTS", "300"))
CLIENTS = 32
TEXT = open(os.path.join(ROOT, "examples", "du_fu.txt")).read()
DOCS = [TEXT[0:1400], TEXT[5000:6600], TEXT[12000:13000]]  # three documents, ~300-400 tokens each
QUESTIONS = ["Who is this about?", "Name one place mentioned.", "What happened first?", "Summarize in one line."]
LONGEST = 20

MALFORMED = [
    (b"{\"messages\": [", "invalid JSON"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 17}).encode(), "n"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": -4}).encode(), "max_tokens"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": 9}).encode(), "temperature"),
    (json.dumps({"messages": "hello"}).encode(), "messages"),
    (b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", "invalid UTF-8"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}], "stop": [1, 2]}).encode(), "stop"),
    (json.dumps({"messages": [{"role": "user", "content": "w " * 9000}]}).encode(), "too long"),
]


def body(doc, q, max_tokens, stream):
    return json.dumps({"model": "m", "messages": [{"role": "system", "content": doc}, {"role": "user", "content": q}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": stream}).encode()


def send(port, data, stream, disconnect_after=None, timeout=600):
    """(status, answer text or None, error text). Reads SSE when streaming; closes early to disconnect."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200 or not stream:
            text = r.read().decode("utf-8", "replace")
            if r.status != 200:
                return r.status, None, text
            return 200, json.loads(text)["choices"][0]["message"]["content"], ""
        out, events = [], 0
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                break
            obj = json.loads(payload)
            if "error" in obj:
                return 500, None, payload
            events += 1
            if obj["choices"]:
                out.append(obj["choices"][0]["delta"].get("content") or "")
            if disconnect_after is not None and events >= disconnect_after:
                return -1, None, "disconnected"  # closing the connection below is the disconnect
        return 200, "".join(out), ""
    finally:
        conn.close()


class ServeLoad(unittest.TestCase):
    def test_load_and_faults(self):
        rng = random.Random(1234)
        prompts = [(d, q) for d in range(len(DOCS)) for q in range(len(QUESTIONS))]
        with ChorusServer(BIN, MODEL, "-t", THREADS, "--kv-budget", "256M", "--max-queue", "48") as srv:
            # Solo answers: each distinct prompt alone, the longest length (shorter ones are prefixes).
            solo = {}
            for d, q in prompts:
                status, text, err = send(srv.port, body(DOCS[d], QUESTIONS[q], LONGEST, False), False)
                self.assertEqual(status, 200, err)
                solo[(d, q)] = text
            rss = []
            for rnd in range(2):
                plan = []
                for i in range(REQUESTS):
                    x = rng.random()
                    d, q = rng.choice(prompts)
                    n = rng.choice([4, 8, 12, LONGEST])
                    if x < 0.1:
                        plan.append(("malformed", rng.randrange(len(MALFORMED)), None, None))
                    elif x < 0.2:
                        plan.append(("disconnect", (d, q), n, rng.randint(1, 3)))
                    else:
                        plan.append(("ok", (d, q), n, rng.random() < 0.5))

                def run(item):
                    kind, key, n, extra = item
                    if kind == "malformed":
                        data, what = MALFORMED[key]
                        status, _, err = send(srv.port, data, False)
                        return kind, key, status, err, what
                    d, q = key
                    if kind == "disconnect":
                        status, _, err = send(srv.port, body(DOCS[d], QUESTIONS[q], n, True), True, disconnect_after=extra)
                        return kind, key, status, err, n
                    status, text, err = send(srv.port, body(DOCS[d], QUESTIONS[q], n, extra), extra)
                    return kind, key, status, (text, err), n

                t0 = time.time()
                with cf.ThreadPoolExecutor(CLIENTS) as ex:
                    results = list(ex.map(run, plan))
                elapsed = time.time() - t0
                counts = {}
                for kind, key, status, payload, n in results:
                    counts[(kind, status)] = counts.get((kind, status), 0) + 1
                    if kind == "malformed":
                        self.assertEqual(status, 400, (MALFORMED[key][1], payload))
                        self.assertIn("error", json.loads(payload))
                        continue
                    self.assertFalse(500 <= status < 600 and status != 503, (kind, status, payload))
                    if kind == "ok" and status == 200:
                        text, _ = payload
                        want = solo[key]
                        # A shorter answer is a prefix of the longest one (greedy); equal at the longest.
                        self.assertTrue(want.startswith(text) if n < LONGEST else text == want,
                                        f"answer changed under load: {text!r} vs alone {want!r}")
                print(f"\n  round {rnd + 1}: {len(results)} requests in {elapsed:.1f} s: {sorted(counts.items())}")
                # Everything finishes; then nothing is in use (cancelled requests freed their blocks).
                for _ in range(600):
                    m = srv.metrics()
                    if m["chorus_requests_running"] == 0 and m["chorus_requests_waiting"] == 0:
                        break
                    time.sleep(0.1)
                m = srv.metrics()
                self.assertEqual(m["chorus_requests_running"], 0)
                self.assertEqual(m['chorus_kv_bytes{kind="in_use"}'], 0.0)
                self.assertEqual(m['chorus_kv_bytes{kind="pinned"}'], 0.0)
                # held = cached prefixes + the store's own scratch and free pool slots, nothing else
                self.assertLessEqual(m["chorus_kv_held_bytes"],
                                     m['chorus_kv_bytes{kind="cached"}'] + m['chorus_kv_bytes{kind="overhead"}'])
                self.assertGreater(m["chorus_requests_cancelled_total"], 0)
                rss.append(srv.rss_bytes())
                print(f"  after round {rnd + 1}: RSS {rss[-1] / 2**20:.1f} MiB, KV held {m['chorus_kv_held_bytes'] / 2**20:.1f} MiB "
                      f"(cached prefixes), cancelled so far {m['chorus_requests_cancelled_total']:.0f}")
            # Flat: the second round may not grow the process by more than 8 MiB (allocator noise).
            self.assertLess(rss[1], rss[0] + 8 * 2**20, f"RSS grew {rss[0]} -> {rss[1]}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
