"""The dashboard in a real browser: `chorus serve` (the real binary, SmolLM2) on 127.0.0.1, several
streaming agents (the `openai` client) on one shared document, GET /dashboard in headless Chromium
driven by selenium (Debian chromium + chromium-driver, PyPI selenium: scripts/setup.sh).

Catches: a page that does not load or throws (the browser console is read after every phase and any
error fails the test), DOM figures that disagree with /metrics (running requests, shared bytes) for
longer than one refresh, a page that does not say "no requests" on an empty server, a page that
stops updating after a client disconnects mid-stream or after the server restarts, user text (a
`<script>` in the document and in a question) inserted as markup instead of text, dashboard paths
that answer what they should not (unknown /dashboard/* must be 404), and /v1/state answered without
the API key. A screenshot of the busy page is saved to a temporary directory (printed).

Run: CHORUS_BIN=build/bin/chorus python3 tests/server/dashboard_browser_test.py  (ctest: dashboard_browser)
"""
import http.client
import json
import os
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import ROOT, DEFAULT_MODEL, ChorusServer, free_port  # noqa: E402

import openai  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

BIN = os.environ.get("CHORUS_BIN", os.path.join(ROOT, "build", "bin", "chorus"))
MODEL = os.environ.get("CHORUS_MODEL", DEFAULT_MODEL)
THREADS = os.environ.get("CHORUS_THREADS", "2")
SHOTS = tempfile.mkdtemp(prefix="chorus-dashboard-")
# A shared document with markup in it: the page must show it as text.
DOC = ("<script>window.__pwned_doc = 1</script> The harbour office keeps three ledgers. " +
       " ".join(f"Ledger entry {i}: ship {i * 7 % 13} arrived with {i * 3} crates of tea." for i in range(18)))
QUESTIONS = ["Which ship arrived first?", "How many crates came in entry 5?",
             "<b>bold</b><script>window.__pwned_q = 1</script> What is kept?", "Summarize the ledgers."]


def status_of(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("Content-Type", "")


def agent(srv, question, max_tokens, out):
    c = openai.OpenAI(base_url=srv.url, api_key="-", max_retries=0, timeout=300)
    text = ""
    for ch in c.chat.completions.create(model="m", messages=[{"role": "system", "content": DOC},
                                                             {"role": "user", "content": question}],
                                        max_tokens=max_tokens, temperature=0, stream=True,
                                        extra_body={"ignore_eos": True}):
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
    out.append(text)


def disconnecting_client(srv, after_chunks=3):
    """A streaming client that goes away after a few chunks (closes its socket mid-stream)."""
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=120)
    body = json.dumps({"model": "m", "stream": True, "max_tokens": 400, "ignore_eos": True,
                       "messages": [{"role": "system", "content": DOC}, {"role": "user", "content": "Go on."}]})
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    got = 0
    while got < after_chunks:
        line = r.fp.readline()
        if not line:
            break
        got += line.startswith(b"data:")
    conn.close()
    return got


class Browser:
    def __init__(self):
        o = webdriver.ChromeOptions()
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1900",
                  "--no-first-run", "--disable-extensions"):
            o.add_argument(a)
        o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
        self.d.set_script_timeout(30)

    def dom(self):
        return self.d.execute_script("""
            const q = (id) => document.getElementById(id);
            return {updates: Number(document.body.dataset.updates || 0),
                    status: q('status').textContent,
                    running: q('running-count').textContent,
                    shared: q('shared-bytes').dataset.bytes,
                    rows: Array.from(document.querySelectorAll('#requests tbody tr')).map(tr => tr.textContent),
                    request_states: Array.from(document.querySelectorAll('#requests tbody tr[data-state]')).map(tr => tr.dataset.state),
                    empty: q('requests-empty') ? q('requests-empty').textContent : null,
                    run_rows: Array.from(document.querySelectorAll('#runs tbody tr')).map(tr =>
                        Array.from(tr.cells).map(td => td.textContent)),
                    maps: document.querySelectorAll('#maps canvas').length,
                    scripts: document.querySelectorAll('script').length,
                    bold: document.querySelectorAll('table b, table script').length,
                    pwned: (window.__pwned_doc || 0) + (window.__pwned_q || 0)};""")

    def wait(self, pred, timeout=30, what="condition"):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = self.dom()
            if pred(last):
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; DOM: {last}")

    def next_update(self, timeout=15):
        n = self.dom()["updates"]
        return self.wait(lambda s: s["updates"] > n, timeout, "the next refresh")

    def errors(self, allow_network=False):
        """Console entries at level SEVERE (errors), minus failed fetches when the phase expects them
        (the server down during a restart, a 401 without the key)."""
        bad = []
        for e in self.d.get_log("browser"):
            if e.get("level") != "SEVERE":
                continue
            if allow_network and e.get("source") == "network":
                continue
            bad.append(e)
        return bad

    def close(self):
        self.d.quit()


class DashboardBrowser(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.b = Browser()

    @classmethod
    def tearDownClass(cls):
        cls.b.close()

    def open(self, srv, fragment=""):
        # What an earlier page logged (its server stopping under it) is not this phase's.
        self.b.d.get("about:blank")
        self.b.d.get_log("browser")
        self.b.d.get(srv.base + "/dashboard" + fragment)

    def tearDown(self):
        self.b.d.get("about:blank")  # before the server of the next test starts

    def test_1_empty_server_says_no_requests(self):
        with ChorusServer(BIN, MODEL, "-t", THREADS) as srv:
            self.open(srv)
            s = self.b.wait(lambda s: s["updates"] >= 1, what="the first refresh")
            self.assertEqual(s["empty"], "no requests")
            self.assertEqual(s["running"], "0")
            self.assertTrue(s["status"].startswith("live"), s["status"])
            self.assertEqual(self.b.errors(), [])

    def test_2_agents_dom_matches_metrics_text_stays_text_disconnect(self):
        with ChorusServer(BIN, MODEL, "-t", THREADS, "--kv-budget", "512M") as srv:
            self.open(srv)
            self.b.wait(lambda s: s["updates"] >= 1, what="the first refresh")
            out = []
            agents = [threading.Thread(target=agent, args=(srv, q, 400, out)) for q in QUESTIONS]
            for t in agents:
                t.start()
            # All four decoding (the document prefilled once, borrowed by the others); 400 tokens each so
            # they still run through the refreshes compared below (80 ended first once the KV attention
            # ran on int8 arithmetic).
            self.b.wait(lambda s: s["request_states"].count("decode") == len(QUESTIONS), 60, "every agent decoding")
            # The DOM against /metrics, within one refresh: the figures of a refresh equal the
            # metrics read just before or just after it.
            matched = False
            for _ in range(8):
                m1 = srv.metrics()
                s = self.b.next_update()
                m2 = srv.metrics()
                runs = {int(m["chorus_requests_running"]) for m in (m1, m2)}
                shared = {int(m["chorus_kv_shared_bytes"]) for m in (m1, m2)}
                if int(s["running"]) in runs and int(s["shared"]) in shared:
                    matched = True
                    break
            self.assertTrue(matched, f"DOM running {s['running']} shared {s['shared']} vs metrics {runs} {shared}")
            self.assertEqual(int(s["running"]), len(QUESTIONS))
            self.assertGreater(int(s["shared"]), 0)
            # The document's run is read by every agent; maps are drawn.
            readers = [int(r[4]) for r in s["run_rows"] if len(r) == 7]
            self.assertIn(len(QUESTIONS), readers, s["run_rows"])
            self.assertGreaterEqual(s["maps"], 2)
            # User text is text: the question's <script> and <b> are shown, never parsed or run.
            self.assertTrue(any("<script>window.__pwned_q = 1</script>" in r for r in s["rows"]), s["rows"])
            self.assertTrue(any("<script>window.__pwned_doc" in " ".join(r) for r in s["run_rows"]), s["run_rows"])
            self.assertEqual(s["scripts"], 1)
            self.assertEqual(s["pwned"], 0)
            self.assertEqual(s["bold"], 0)  # no element made from the question's markup
            shot = os.path.join(SHOTS, "dashboard-agents.png")
            self.b.d.save_screenshot(shot)
            print(f"screenshot: {shot}", flush=True)
            # A client that disconnects mid-stream: its request ends, the page keeps updating.
            got = disconnecting_client(srv)
            self.assertGreater(got, 0)
            self.b.wait(lambda s: float(srv.metrics()["chorus_requests_cancelled_total"]) >= 1, 30, "the cancel")
            self.b.next_update()
            for t in agents:
                t.join(timeout=180)
            self.assertEqual(len(out), len(QUESTIONS))
            s = self.b.wait(lambda s: s["empty"] == "no requests", 30, "no requests after the agents finished")
            self.assertEqual(s["running"], "0")
            self.assertEqual(self.b.errors(), [])

    def test_3_page_recovers_after_a_server_restart(self):
        port = free_port()
        srv = ChorusServer(BIN, MODEL, "-t", THREADS, port=port)
        try:
            self.open(srv)
            self.b.wait(lambda s: s["updates"] >= 1, what="the first refresh")
            self.assertEqual(srv.stop(), 0)
            self.b.wait(lambda s: "unreachable" in s["status"], 20, "the page noticing the server is gone")
            n = self.b.dom()["updates"]
            srv = ChorusServer(BIN, MODEL, "-t", THREADS, port=port)
            s = self.b.wait(lambda s: s["updates"] > n and s["status"].startswith("live"), 30, "the page recovering")
            self.assertEqual(s["empty"], "no requests")
        finally:
            srv.stop()
        # Failed fetches while the server was down are expected; nothing else.
        self.assertEqual(self.b.errors(allow_network=True), [])

    def test_4_paths_and_api_key(self):
        with ChorusServer(BIN, MODEL, "-t", THREADS, "--api-key", "sekrit") as srv:
            for path in ("/dashboard/", "/dashboard/nope", "/dashboard/app.js.map", "/dashboardx"):
                self.assertEqual(status_of(srv.base + path)[0], 404, path)
            code, body, ctype = status_of(srv.base + "/dashboard/app.js")
            self.assertEqual(code, 200)
            self.assertIn("javascript", ctype)
            self.assertIn("textContent", body)
            self.assertNotIn("innerHTML", body)
            self.assertEqual(status_of(srv.base + "/v1/state")[0], 401)
            self.assertEqual(status_of(srv.base + "/v1/state", {"Authorization": "Bearer wrong"})[0], 401)
            code, body, _ = status_of(srv.base + "/v1/state", {"Authorization": "Bearer sekrit"})
            self.assertEqual(code, 200)
            st = json.loads(body)
            self.assertEqual(st["requests"], [])
            # The page without the key says so; with it in the fragment it is live.
            self.open(srv)
            self.b.wait(lambda s: "API key required" in s["status"], 20, "the key message")
            self.assertEqual(self.b.errors(allow_network=True), [])  # the 401 fetch itself only
            self.open(srv, "#key=sekrit")
            self.b.wait(lambda s: s["updates"] >= 1 and s["status"].startswith("live"), 20, "live with the key")
            self.assertEqual(self.b.errors(), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
