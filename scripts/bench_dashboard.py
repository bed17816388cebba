#!/usr/bin/env python3
"""Cost of the dashboard: decode tok/s of the 16-agent serve benchmark with /dashboard open in a
headless Chromium (polling /v1/state once a second) vs closed (the browser on about:blank), waves
alternated, chorus only. With --modes open,poll,closed a third mode polls GET /v1/state once a second
from this script with no browser (the server's share of the cost, without the browser's CPU), and
records how long each answer took.

Each wave: N concurrent streaming agents (the `openai` client, as scripts/bench_serve.py) on one
~4K-token document (the system message) + their own question, `--tg` tokens each (ignore_eos,
greedy). The document is prefilled once before the first wave, so every wave borrows it from the
prefix cache and the waves measure decode. Decode tok/s = tokens streamed while all N agents were
decoding (from the last agent's first token to the first agent's last token) / that window.

Usage: scripts/bench_dashboard.py [-t 1] [--agents 16] [--reps 3] [--tg 128] [--doc-tokens 4096]
                                  [--json OUT] [--screenshot PNG]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from serve_harness import ChorusServer  # noqa: E402
from bench_serve import QUESTIONS, run_agents  # noqa: E402

import openai  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402


def decode_rate(out):
    """Tokens per second while every agent was decoding, and the window length."""
    firsts = [r["times"][0] for r in out if r["times"]]
    lasts = [r["times"][-1] for r in out if r["times"]]
    if len(firsts) < len(out):
        return float("nan"), 0.0
    lo, hi = max(firsts), min(lasts)
    if hi <= lo:
        return float("nan"), 0.0
    n = sum(1 for r in out for t in r["times"] if lo < t <= hi)
    return n / (hi - lo), hi - lo


def run_wave(srv, doc, questions, tg):
    out, wall = run_agents(srv.url, "m", doc, questions, tg)
    rate, window = decode_rate(out)
    return {"decode_tok_s": rate, "window_s": window, "wall_s": wall, "tokens": sum(r["tokens"] for r in out),
            "aggregate_tok_s": sum(r["tokens"] for r in out) / wall, "timed_out": sum(r["timed_out"] for r in out)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--modes", default="open,closed", help="open (browser), poll (no browser), closed")
    ap.add_argument("--json")
    ap.add_argument("--screenshot", help="save the open dashboard mid-wave (first open wave) here")
    a = ap.parse_args()
    uptime = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    res = {"command": "scripts/bench_dashboard.py " + " ".join(sys.argv[1:]), "threads": a.threads,
           "agents": a.agents, "tg": a.tg, "uptime_before": uptime(), "waves": []}
    print(res["uptime_before"], flush=True)
    srv = ChorusServer(os.path.join(ROOT, "build", "bin", "chorus"), a.model, "-t", str(a.threads), "--kv-budget", "2G")
    o = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,2700"):
        o.add_argument(arg)
    browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
    try:
        c = openai.OpenAI(base_url=srv.url, api_key="-", max_retries=0, timeout=600)

        def ntok(text):
            return c.completions.create(model="m", prompt=text, max_tokens=1).usage.prompt_tokens

        # ~doc_tokens tokens of examples/du_fu.txt (repeated): a cut at 4 characters a token, then one
        # proportional correction (each count is a prefill: no binary search at one thread).
        text = open(os.path.join(ROOT, "examples", "du_fu.txt")).read()
        while len(text) < 8 * a.doc_tokens:
            text += "\n" + text
        cut = 4 * a.doc_tokens
        n = ntok(text[:cut])
        if n > a.doc_tokens:
            cut = int(cut * a.doc_tokens / n * 0.99)
            n = ntok(text[:cut])
        doc = text[:cut]
        res["doc_tokens"] = n
        t0 = time.time()
        run_wave(srv, doc, ["Say hi."], 4)  # prefill the document once: every wave borrows it
        print(f"document {res['doc_tokens']} tokens prefilled in {time.time() - t0:.1f} s", flush=True)
        questions = [QUESTIONS[i % len(QUESTIONS)] + ("" if i < len(QUESTIONS) else f" ({i})") for i in range(a.agents)]
        shot_taken = False
        for rep in range(a.reps):
            modes = a.modes.split(",")
            for mode in (modes if rep % 2 == 0 else modes[::-1]):
                if mode == "open":
                    browser.get(srv.base + "/dashboard")
                else:
                    browser.get("about:blank")
                time.sleep(2)
                updates0 = browser.execute_script("return Number(document.body && document.body.dataset.updates || 0)")
                shot = None
                if mode == "open" and a.screenshot and not shot_taken:
                    def take():
                        time.sleep(20)
                        browser.save_screenshot(a.screenshot)
                    shot = threading.Thread(target=take)
                    shot.start()
                    shot_taken = True
                poller, poll_ms, stop = None, [], threading.Event()
                if mode == "poll":
                    def poll():
                        while not stop.is_set():
                            t = time.time()
                            srv.get("/v1/state")
                            poll_ms.append(1000 * (time.time() - t))
                            stop.wait(max(0.0, 1.0 - (time.time() - t)))
                    poller = threading.Thread(target=poll)
                    poller.start()
                w = run_wave(srv, doc, questions, a.tg)
                if shot:
                    shot.join()
                if poller:
                    stop.set()
                    poller.join()
                    w["state_ms"] = sorted(poll_ms)
                w["polls"] = len(poll_ms) if mode == "poll" else browser.execute_script(
                    "return Number(document.body && document.body.dataset.updates || 0)") - updates0
                w.update({"mode": mode, "rep": rep, "load_avg": os.getloadavg()})
                res["waves"].append(w)
                print(f"rep {rep} dashboard {mode:6s}: decode {w['decode_tok_s']:.2f} tok/s over {w['window_s']:.1f} s, "
                      f"aggregate {w['aggregate_tok_s']:.2f} tok/s, {w['polls']} page refreshes, "
                      f"load {w['load_avg'][0]:.2f}", flush=True)
    finally:
        browser.quit()
        srv.stop()
    for mode in a.modes.split(","):
        xs = [w["decode_tok_s"] for w in res["waves"] if w["mode"] == mode]
        res[mode] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "all": xs}
        print(f"decode tok/s, dashboard {mode}: median {res[mode]['median']:.2f} (min {res[mode]['min']:.2f}, max "
              f"{res[mode]['max']:.2f}) of {len(xs)}")
        if mode != "closed" and "closed" in res:
            res[mode + "_over_closed"] = res[mode]["median"] / res["closed"]["median"]
            print(f"  {mode} / closed: {res[mode + '_over_closed']:.3f}")
    ms = [m for w in res["waves"] for m in w.get("state_ms", [])]
    if ms:
        ms.sort()
        print(f"GET /v1/state answer time during the waves: median {ms[len(ms) // 2]:.1f} ms, max {ms[-1]:.1f} ms, "
              f"{len(ms)} calls")
    res["uptime_after"] = uptime()
    print(res["uptime_after"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
