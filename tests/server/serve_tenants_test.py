"""Many tenants on one server (issue 42, must-show 1 and 2) on the real model: `chorus serve --api-keys`
with tenants A and B in one group, C alone, and admin.

- A's document gives B cached tokens and C none (usage.prompt_tokens_details.cached_tokens).
- The timing side channel: C's time to first token on a document A sent is that of a cold prefill.
  Over >= 20 interleaved pairs C sends a document only A sent before (the probe) and one nobody sent
  (the control), of the same length, in alternating order; a Welch t-test must see no difference at
  p < 0.01. B (A's group) on A's documents shows the channel the scopes close is there to be seen.
- A running request of A is in A's /v1/state and not in C's; admin sees it.
- Quotas: tenant Q (2 MiB) gets 429s naming the bytes while B's long request runs to its end.

Numbers are printed (docs/results/tenants.md quotes a run).
Run: CHORUS_BIN=build/bin/chorus python3 tests/server/serve_tenants_test.py  (ctest: serve_tenants)
"""
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import ROOT, DEFAULT_MODEL, ChorusServer  # noqa: E402

BIN = os.environ.get("CHORUS_BIN", os.path.join(ROOT, "build", "bin", "chorus"))
MODEL = os.environ.get("CHORUS_MODEL", DEFAULT_MODEL)
THREADS = os.environ.get("CHORUS_THREADS", "2")
PAIRS = int(os.environ.get("CHORUS_TENANT_PAIRS", "24"))
DOC_TOKENS = 640
KEYS = {"A": "key-tenant-a-0123456789", "B": "key-tenant-b-0123456789", "C": "key-tenant-c-0123456789",
        "admin": "key-admin-000123456789", "Q": "key-tenant-q-0123456789"}


def betacf(a, b, x):
    """Continued fraction of the regularized incomplete beta function (Numerical Recipes, betacf)."""
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1 + aa / c if abs(1 + aa / c) > 1e-300 else 1e-300
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1 + aa / c if abs(1 + aa / c) > 1e-300 else 1e-300
        de = d * c
        h *= de
        if abs(de - 1) < 1e-12:
            break
    return h


def betai(a, b, x):
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * betacf(a, b, x) / a
    return 1 - math.exp(lbt) * betacf(b, a, 1 - x) / b


def welch(x, y):
    """Welch's two-sided t-test: (t, degrees of freedom, p)."""
    nx, ny = len(x), len(y)
    mx, my = sum(x) / nx, sum(y) / ny
    vx = sum((v - mx) ** 2 for v in x) / (nx - 1)
    vy = sum((v - my) ** 2 for v in y) / (ny - 1)
    se2 = vx / nx + vy / ny
    t = (mx - my) / math.sqrt(se2)
    df = se2 ** 2 / ((vx / nx) ** 2 / (nx - 1) + (vy / ny) ** 2 / (ny - 1))
    return t, df, betai(df / 2, 0.5, df / (df + t * t))


def document(seed):
    """DOC_TOKENS token ids of ordinary vocabulary, different per seed (no block shared by two seeds)."""
    r = random.Random(seed)
    return [r.randrange(300, 20000) for _ in range(DOC_TOKENS)]


class Tenants(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.keys_file = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
        cls.keys_file.write("# issue 42's three tenants\n"
                            f"{KEYS['A']} A g\n{KEYS['B']} B g\n{KEYS['C']} C\n{KEYS['admin']} admin\n"
                            f"{KEYS['Q']} Q - 2M\n")
        cls.keys_file.close()
        cls.srv = ChorusServer(BIN, MODEL, "-t", THREADS, "--api-keys", cls.keys_file.name)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        os.unlink(cls.keys_file.name)

    def complete(self, who, prompt, max_tokens=1):
        """(seconds to the whole answer of max_tokens=1 = time to first token, cached tokens)."""
        t0 = time.perf_counter()
        status, body, _ = self.srv.post("/v1/completions",
                                        {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                                        headers={"Authorization": "Bearer " + KEYS[who]})
        dt = time.perf_counter() - t0
        self.assertEqual(status, 200, body)
        return dt, json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]

    def test_a_group_shares_and_c_sees_a_cold_prefill(self):
        doc = document(1)
        self.assertEqual(self.complete("A", doc)[1], 0)
        b = self.complete("B", doc)[1]
        c = self.complete("C", doc)[1]
        print(f"\n  A's {DOC_TOKENS}-token document: cached_tokens B {b}, C {c}")
        self.assertGreaterEqual(b, DOC_TOKENS - 32)
        self.assertEqual(c, 0)

        self.complete("C", document(10 ** 6))  # warm-up (first-call costs), not counted
        probe, control, group, cached = [], [], [], []
        for i in range(PAIRS):
            mine, cold = document(1000 + i), document(2000 + i)
            self.complete("A", mine)  # A sends it; then C probes it beside a document nobody sent
            order = [("probe", mine), ("control", cold)]
            if i % 2:
                order.reverse()
            for kind, p in order:
                dt, ct = self.complete("C", p)
                (probe if kind == "probe" else control).append(dt)
                cached.append(ct)
            group.append(self.complete("B", mine)[0])
        t, df, p = welch(probe, control)
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        print(f"  C's TTFT over {PAIRS} pairs: on A's documents {mean(probe) * 1e3:.1f} ms, cold "
              f"{mean(control) * 1e3:.1f} ms (Welch t = {t:.2f}, df = {df:.1f}, p = {p:.3f}); "
              f"B on A's documents {mean(group) * 1e3:.1f} ms")
        self.assertEqual(sum(cached), 0, "C borrowed blocks of another scope")
        self.assertGreaterEqual(p, 0.01, "C's time to first token tells A's documents from cold ones")
        # The channel is real inside a group: B's hits are far faster than a cold prefill.
        self.assertLess(mean(group), 0.6 * mean(control))

    def test_a_running_request_is_seen_by_its_tenant_and_admin_only(self):
        done = threading.Event()

        def long_request():
            try:
                self.srv.post("/v1/completions", {"prompt": "A secret plan: " * 20, "max_tokens": 400,
                                                  "ignore_eos": True, "temperature": 0},
                              headers={"Authorization": "Bearer " + KEYS["A"]})
            finally:
                done.set()

        threading.Thread(target=long_request, daemon=True).start()
        seen = {}
        deadline = time.time() + 120
        while time.time() < deadline and not done.is_set() and len(seen) < 3:
            for who in ("A", "C", "admin"):
                _, body = self.srv.get("/v1/state", {"Authorization": "Bearer " + KEYS[who]})
                reqs = json.loads(body)["requests"]
                if who not in seen and any("secret plan" in r["preview"] for r in reqs):
                    seen[who] = reqs
                if who == "C":
                    self.assertNotIn("secret plan", body)
            time.sleep(0.3)
        done.wait(300)
        self.assertIn("A", seen, "A's running request never appeared in A's state")
        self.assertIn("admin", seen)
        self.assertNotIn("C", seen)
        self.assertEqual(seen["admin"][0]["tenant"], "A")
        _, metrics = self.srv.get("/metrics")
        self.assertNotIn("secret plan", metrics)

    def test_over_quota_is_429_while_others_run(self):
        result = {}

        def long_request():
            result["b"] = self.srv.post("/v1/completions", {"prompt": "B's own work: " * 20, "max_tokens": 200,
                                                            "ignore_eos": True, "temperature": 0},
                                        headers={"Authorization": "Bearer " + KEYS["B"]})

        t = threading.Thread(target=long_request)
        t.start()
        time.sleep(0.5)
        refused = []
        for i in range(3):
            status, body, headers = self.srv.post("/v1/completions",
                                                  {"prompt": document(3000 + i), "max_tokens": 16},
                                                  headers={"Authorization": "Bearer " + KEYS["Q"]})
            refused.append(status)
            if status == 429:
                err = json.loads(body)["error"]
                self.assertEqual(err["code"], "kv_quota_exceeded")
                self.assertIn("2097152-byte quota", err["message"])
                self.assertIn("Retry-After", headers)
        t.join(300)
        status, body, _ = result["b"]
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["usage"]["completion_tokens"], 200)
        print(f"\n  Q (2 MiB quota, 640-token prompts): {refused}; B's 200-token request finished")
        self.assertEqual(refused, [429, 429, 429])


if __name__ == "__main__":
    unittest.main(verbosity=2)
