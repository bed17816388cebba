"""Replicas sharing compressed KV blocks through a real Redis (`chorus serve --kv-store`).

Each case starts a real `redis-server` on a free loopback port (--save '' --appendonly no, its own
process group) and real `chorus serve` replicas (SmolLM2-135M, 1 thread each), and stops all of
them in `finally`. Run one case: python3 kv_store_test.py CASE (ctest runs each as its own test).

  share          A serves a ~4K-token document (and answers question 2 from its own blocks); cold B
                 gets the same document + question 2: B's TTFT <= 10 % of a cold ~4K prefill on B
                 (another document of the same length), B prefills only the last partial block
                 (usage and /metrics agree), B's greedy answer == A's.
  redis_absent   nothing listens at --kv-store: serve starts, warns, answers; metrics say down.
  redis_restart  Redis killed mid-run, then restarted: every request succeeds; publishing resumes.
  corrupt        one block's payload byte flipped in Redis: rejected by checksum, recomputed (same
                 answer), counted, and republished intact.
  truncated      one block cut short in Redis: rejected, recomputed, counted.
  forged         another configuration's block under this one's key, a block with another model's
                 fingerprint, and a block of other formats with a forged header: each rejected.
  slow           Redis paused (CLIENT PAUSE) during a fetch: past the deadline, local prefill.
  bad_url        a malformed --kv-store URL: exit != 0 with a message naming it.
  auth           Redis with requirepass and no password given: warns, serves locally; with the
                 password in the URL: connected.
"""
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "server"))
from serve_harness import DEFAULT_MODEL, ChorusServer  # noqa: E402

BIN = os.environ.get("CHORUS_BIN", "build/bin/chorus")
HEADER = struct.Struct("<IHHQQQQIHHII")  # src/kv/block_codec.h, layout v2 (56 bytes)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RespError(Exception):
    pass


class Resp:
    """A minimal RESP2 client (the Redis protocol), enough for the test's own commands."""

    def __init__(self, port, password=None, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.f = self.s.makefile("rb")
        if password:
            self.cmd("AUTH", password)

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self._read()

    def _read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RespError(f"unexpected reply {line!r}")

    def close(self):
        self.s.close()


class RedisServer:
    def __init__(self, port=None, *extra, password=None):
        self.port = port or free_port()
        self.password = password
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(200):
            try:
                r = Resp(self.port, password)
                r.cmd("PING")
                r.close()
                return
            except (OSError, RespError):
                time.sleep(0.025)
        self.kill()
        raise RuntimeError("redis-server did not answer PING")

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        return Resp(self.port, self.password)

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Stack:
    """Everything a case started, stopped in reverse order whatever happens."""

    def __init__(self):
        self.items = []

    def add(self, x):
        self.items.append(x)
        return x

    def close(self):
        for x in reversed(self.items):
            try:
                (getattr(x, "kill", None) or x.stop)()  # servers stop cleanly; redis, proxies are killed
            except Exception as e:  # keep stopping the rest
                print("stop:", e)


WORDS = ("river stone garden lantern copper violet harbor meadow signal orchard window thunder marble "
         "falcon cedar ember glacier saddle compass velvet quarry beacon willow ledger canyon harvest "
         "pepper anchor summit timber crystal saffron hollow ribbon basalt walnut prairie cobalt").split()


def document(seed, n_words):
    rng = random.Random(seed)
    sents = []
    while sum(len(s.split()) for s in sents) < n_words:
        sents.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + ".")
    return f"Record {seed}. " + " ".join(sents)


def ask(srv, prompt, max_tokens=12, key=None):
    """Greedy streamed completion: (text, ttft seconds, usage dict); `key`: an API key."""
    import json
    import urllib.request
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(srv.url + "/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": "Bearer " + key} if key else {})})
    t0 = time.perf_counter()
    ttft, text, usage = None, "", None
    with urllib.request.urlopen(req, timeout=300) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            assert "error" not in ev, ev
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                if ch.get("text"):
                    ttft = ttft if ttft is not None else time.perf_counter() - t0
                    text += ch["text"]
    assert usage, "no usage chunk"
    return text, ttft, usage


def cached(usage):
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def serve(stack, *flags):
    return stack.add(ChorusServer(BIN, DEFAULT_MODEL, "-t", "1", "--max-tokens", "32", *flags))


def wait_for(pred, what, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def published(srv):
    return srv.metrics().get("chorus_kv_remote_published_blocks_total", 0)


def settled(srv, quiet_s=0.5):
    """Waits until the replica's publication counter stops moving (its queue is written)."""
    last, since = -1, time.time()
    while time.time() - since < quiet_s:
        p = published(srv) + srv.metrics().get("chorus_kv_remote_publish_dropped_total", 0)
        if p != last:
            last, since = p, time.time()
        time.sleep(0.05)


def err(m, kind):
    return m.get(f'chorus_kv_remote_errors_total{{kind="{kind}"}}', 0)


def blocks_by_index(r, salt=None, skip=()):
    """{salt: {index: (key, value)}} of the chorus blocks in Redis (header parsed), but keys in skip."""
    out = {}
    for key in r.cmd("KEYS", "chorus:kv2:*"):
        if key in skip:
            continue
        v = r.cmd("GET", key)
        if v is None or len(v) < HEADER.size:
            continue
        h = HEADER.unpack_from(v)
        out.setdefault(h[4], {})[h[11]] = (key, v)
    return out if salt is None else out.get(salt, {})


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def doc_blocks(srv, prompt):
    """Full 32-token blocks of a prompt that a replica publishes."""
    _, _, u = ask(srv, prompt, max_tokens=1)
    return u["prompt_tokens"] // 32


# ---- cases ---------------------------------------------------------------------------------------

def case_share(st):
    redis = st.add(RedisServer())
    a = serve(st, "--kv-store", redis.url)
    b = serve(st, "--kv-store", redis.url)
    doc, other = document(1, 3450), document(2, 3450)
    q1 = "\n\nQuestion: Which word comes first? Answer:"
    q2 = "\n\nCopy the first sentence of the record word for word:"
    _, ttft_a, ua = ask(a, doc + q1)
    n_doc = ua["prompt_tokens"]
    check(n_doc >= 3900, f"the document is {n_doc} tokens, not ~4K")
    # Cold prefill on B: a document of the same length nobody has seen (its fetch finds nothing).
    # Sequential, not beside A's prefill: measured here, two concurrent 1-thread prefills on a
    # loaded machine took 3x as long each, which would flatter the ratio.
    _, ttft_cold, uc = ask(b, other + q1)
    check(cached(uc) == 0 and abs(uc["prompt_tokens"] - n_doc) < 64, f"cold request: {uc}")
    text_a, _, ua2 = ask(a, doc + q2, max_tokens=24)  # A's answer to q2, computed from its own blocks
    settled(a)
    m1 = b.metrics()
    text_b, ttft_b, ub = ask(b, doc + q2, max_tokens=24)
    m2 = b.metrics()
    prefilled = m2["chorus_prefill_tokens_total"] - m1["chorus_prefill_tokens_total"]
    hits = m2["chorus_kv_remote_hits_total"] - m1["chorus_kv_remote_hits_total"]
    tail = ub["prompt_tokens"] - cached(ub)
    print(f"A: {n_doc}-token prompt, TTFT {ttft_a:.3f} s; B cold ({uc['prompt_tokens']} tokens): TTFT "
          f"{ttft_cold:.3f} s; B shared: TTFT {ttft_b:.3f} s = {100 * ttft_b / ttft_cold:.1f} % of cold, "
          f"{cached(ub)} of {ub['prompt_tokens']} tokens fetched ({hits:.0f} blocks, "
          f"{m2['chorus_kv_remote_fetched_bytes_total'] - m1['chorus_kv_remote_fetched_bytes_total']:.0f} bytes), "
          f"{prefilled:.0f} prefilled; answers {text_b!r} / {text_a!r}")
    check(text_b == text_a, f"B's answer {text_b!r} != A's {text_a!r}")
    check(prefilled == tail, f"B prefilled {prefilled} tokens, usage says {tail} were not cached")
    check(tail <= 32, f"B prefilled {tail} tokens: more than the last partial block")
    check(hits * 32 == cached(ub), f"{hits} remote hits for {cached(ub)} cached tokens")
    check(ttft_b <= 0.10 * ttft_cold, f"B's TTFT {ttft_b:.3f} s > 10 % of its cold prefill {ttft_cold:.3f} s")
    h = m2.get('chorus_kv_remote_fetch_seconds_count', 0)
    check(h >= 2, f"fetch histogram count {h}")


def case_redis_absent(st):
    port = free_port()  # nothing listens there
    a = serve(st, "--kv-store", f"redis://127.0.0.1:{port}")
    text, _, u = ask(a, document(3, 300) + "\n\nQuestion: first word? Answer:")
    m = a.metrics()
    log = "".join(a.stderr_lines)
    check("warning: kv-store" in log and "serving without it" in log, f"no warning in the log: {log}")
    check(m["chorus_kv_remote_up"] == 0 and err(m, "connect") >= 1, "metrics do not say the store is down")
    check(u["completion_tokens"] > 0 and cached(u) == 0, f"usage {u}")


def case_redis_restart(st):
    redis = st.add(RedisServer())
    port = redis.port
    a = serve(st, "--kv-store", redis.url)
    q = "\n\nQuestion: first word? Answer:"
    n1 = doc_blocks(a, document(4, 500) + q)
    wait_for(lambda: published(a) >= n1, "publication before the kill")
    redis.kill()
    t2, _, u2 = ask(a, document(5, 500) + q)  # Redis is gone: served locally
    check(u2["completion_tokens"] > 0, "request while Redis is down failed")
    wait_for(lambda: a.metrics()["chorus_kv_remote_up"] == 0, "the store to be seen down")
    redis2 = st.add(RedisServer(port))
    before = published(a)
    n3 = doc_blocks(a, document(6, 500) + q)
    wait_for(lambda: published(a) >= before + n3, "publishing to resume after the restart", timeout=30)
    r = redis2.client()
    keys = len(r.cmd("KEYS", "chorus:kv2:*"))
    m = a.metrics()
    print(f"published before kill {n1}, after restart {published(a) - before:.0f} blocks; restarted Redis holds "
          f"{keys} keys; errors io={err(m, 'io')} connect={err(m, 'connect')} dropped="
          f"{m['chorus_kv_remote_publish_dropped_total']:.0f}")
    check(keys >= n3 and m["chorus_kv_remote_up"] == 1, "the restarted Redis did not get the new blocks")


def rejected_once(b, prompt, kind, good_blocks, reference):
    """B asks prompt: exactly one block rejected as `kind`, the ones before it used, the rest
    computed, and the answer equal to reference() (a replica that computed the blocks itself)."""
    m1 = b.metrics()
    text_b, _, ub = ask(b, prompt)
    m2 = b.metrics()
    want = reference()
    print(f"{kind}: B used {cached(ub)} fetched tokens, prefilled {ub['prompt_tokens'] - cached(ub)}; errors "
          f"{kind}={err(m2, kind)}; answers {text_b!r} / {want!r}")
    check(err(m2, kind) - err(m1, kind) == 1, f"the bad block was not rejected as {kind}")
    check(cached(ub) == good_blocks * 32, f"B used {cached(ub)} tokens, not blocks 0-{good_blocks - 1}")
    check(text_b == want, "B's answer differs from the reference")


def damaged(st, damage, kind):
    """A publishes a document, `damage(r, key, value)` spoils its block 5 in Redis, cold B asks."""
    redis = st.add(RedisServer())
    a = serve(st, "--kv-store", redis.url)
    prompt = document(7, 700) + "\n\nQuestion: first word? Answer:"
    text_a, _, ua = ask(a, prompt)
    wait_for(lambda: published(a) >= ua["prompt_tokens"] // 32, "A to publish")
    r = redis.client()
    by = blocks_by_index(r)
    check(len(by) == 1, f"one configuration expected in Redis, found {len(by)}")
    (salt, blocks), = by.items()
    key, good = blocks[5]
    damage(r, key, good)
    b = serve(st, "--kv-store", redis.url)
    rejected_once(b, prompt, kind, 5, lambda: text_a)
    # B recomputed block 5 and published it: Redis holds the intact bytes again.
    wait_for(lambda: r.cmd("GET", key) == good, "the recomputed block to replace the damaged one")
    log = "".join(b.stderr_lines)
    check("rejected" in log, "no rejection in B's log")


def case_corrupt(st):
    def flip(r, key, v):
        at = len(v) - 100  # inside the last layer's V side
        r.cmd("SETRANGE", key, at, bytes([v[at] ^ 0x40]))
    damaged(st, flip, "checksum")


def case_truncated(st):
    damaged(st, lambda r, key, v: r.cmd("SET", key, v[: len(v) // 2]), "truncated")


def case_forged(st):
    redis = st.add(RedisServer())
    p = serve(st, "--kv-store", redis.url)  # kivi4/tq3, the default
    o = serve(st, "--kv-store", redis.url, "--policy", "q8/q8")  # another configuration
    b = serve(st, "--kv-store", redis.url)  # cold, same configuration as p
    r = redis.client()
    q = "\n\nQuestion: first word? Answer:"
    seen = set()

    def publish(doc):
        """Both configurations publish doc; returns (p's blocks, o's blocks) by index, new keys only."""
        for srv in (p, o):
            n = doc_blocks(srv, doc + q)
        wait_for(lambda: len(r.cmd("KEYS", "chorus:kv2:*")) >= len(seen) + 2 * n, "publication")
        by = blocks_by_index(r, skip=seen)
        for blocks in by.values():
            seen.update(k for k, _ in blocks.values())
        check(len(by) == 2, f"two configurations expected, found {len(by)}")
        return by, list(by)

    def attempt(doc, forge, kind):
        by, salts = publish(doc)
        # Which salt is p's: the one whose block 3 does not have o's q8 keys (format id 1) in its
        # layer table (p runs the default, whose keys are not q8).
        ps = [s for s in salts if by[s][3][1][HEADER.size] != 1][0]
        os_ = [s for s in salts if s != ps][0]
        pkey, pval = by[ps][3]
        _, oval = by[os_][3]
        r.cmd("SET", pkey, forge(pval, oval))
        rejected_once(b, doc + q, kind, 3, lambda: ask(p, doc + q)[0])

    # Another configuration's whole block under this configuration's key.
    attempt(document(8, 400), lambda pv, ov: ov, "settings")
    # This configuration's block claiming another model.
    attempt(document(9, 400), lambda pv, ov: pv[:8] + bytes(8) + pv[16:], "model")
    # Other formats behind a header forged to match (model, settings, scope, key): the layer table refuses.
    attempt(document(10, 400), lambda pv, ov: ov[:8] + pv[8:40] + ov[40:], "format")
    # This configuration's block sealed for another sharing scope (another tenant's) under this key.
    attempt(document(11, 400), lambda pv, ov: pv[:24] + (0x5c09e).to_bytes(8, "little") + pv[32:], "scope")


def case_slow(st):
    redis = st.add(RedisServer())
    a = serve(st, "--kv-store", redis.url)
    b = serve(st, "--kv-store", redis.url, "--kv-store-timeout-ms", "200")
    prompt = document(11, 700) + "\n\nQuestion: first word? Answer:"
    text_a, _, ua = ask(a, prompt)
    wait_for(lambda: published(a) >= ua["prompt_tokens"] // 32, "A to publish")
    m1 = b.metrics()
    r = redis.client()
    # Every client's commands wait 10 minutes: longer than the test may run, so an answer at all
    # shows B did not wait for Redis (no timing assertion). Redis is killed in finally.
    r.cmd("CLIENT", "PAUSE", "600000", "ALL")
    t0 = time.perf_counter()
    text_b, ttft, ub = ask(b, prompt)
    m2 = b.metrics()
    late = err(m2, "timeout") + err(m2, "deadline") - err(m1, "timeout") - err(m1, "deadline")
    fetch_s = m2["chorus_kv_remote_fetch_seconds_sum"] - m1["chorus_kv_remote_fetch_seconds_sum"]
    print(f"slow: the fetch took {fetch_s:.3f} s; B answered after {time.perf_counter() - t0:.2f} s (TTFT {ttft:.2f} s), cached "
          f"{cached(ub)}, late fetches {late}; answers {text_b!r} / {text_a!r}")
    check(late >= 1, "the fetch past its deadline was not counted")
    check(cached(ub) == 0 and m2["chorus_kv_remote_hits_total"] == m1["chorus_kv_remote_hits_total"],
          "B used remote blocks")
    check(text_b == text_a, "B's local answer differs from A's")


def case_bad_url(st):
    for url, what in (("http://127.0.0.1:6379", "must start with redis://"), ("redis://127.0.0.1:99999", "port"),
                      ("redis://127.0.0.1:6379/x", "database"), ("redis://", "host is empty")):
        p = subprocess.run([BIN, "serve", "-m", DEFAULT_MODEL, "--port", "0", "-t", "1", "--kv-store", url],
                           capture_output=True, text=True, timeout=120)
        print(f"{url}: rc {p.returncode}: {p.stderr.strip().splitlines()[-1]}")
        check(p.returncode != 0, f"{url} accepted")
        check("malformed --kv-store URL" in p.stderr and what in p.stderr, f"{url}: {p.stderr}")


def case_auth(st):
    redis = st.add(RedisServer(None, "--requirepass", "s3cret", password="s3cret"))
    a = serve(st, "--kv-store", redis.url)
    _, _, u = ask(a, document(12, 300) + "\n\nQuestion: first word? Answer:")
    m = a.metrics()
    log = "".join(a.stderr_lines)
    check(u["completion_tokens"] > 0, "no answer without the store")
    check(err(m, "auth") >= 1 and m["chorus_kv_remote_up"] == 0, "auth error not in /metrics")
    check("warning: kv-store" in log and "AUTH" in log.upper(), f"log: {log}")
    good = serve(st, "--kv-store", f"redis://:s3cret@127.0.0.1:{redis.port}/0")
    n = doc_blocks(good, document(13, 300) + "\n\nQuestion: first word? Answer:")
    wait_for(lambda: published(good) >= n, "publication with the password")
    check(good.metrics()["chorus_kv_remote_up"] == 1, "not connected with the password")
    check("s3cret" not in "".join(good.stderr_lines), "the password was logged")
    # A Redis 6 ACL user limited to chorus's keys and commands (redis://USER:PASSWORD@...).
    check(redis.client().cmd("ACL", "SETUSER", "replica", "on", ">pw-r3plica", "~chorus:*", "+get", "+mget",
                             "+set", "+ping", "+select", "+auth") == "OK", "ACL SETUSER failed")
    acl = serve(st, "--kv-store", f"redis://replica:pw-r3plica@127.0.0.1:{redis.port}/0")
    n = doc_blocks(acl, document(15, 300) + "\n\nQuestion: first word? Answer:")
    wait_for(lambda: published(acl) >= n, "publication as an ACL user")
    check(acl.metrics()["chorus_kv_remote_up"] == 1, "not connected as the ACL user")
    check("pw-r3plica" not in "".join(acl.stderr_lines), "the ACL password was logged")


def case_tenants(st):
    """Tenants A and B in one group, C alone, through two replicas and Redis: B fetches what A's
    replica published, C fetches nothing (its keys are in another scope) and computes it all."""
    import tempfile
    keys = {"A": "key-a-0123456789abcdef", "B": "key-b-0123456789abcdef", "C": "key-c-0123456789abcdef"}
    f = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
    f.write(f"{keys['A']} A g\n{keys['B']} B g\n{keys['C']} C\n")
    f.close()
    try:
        redis = st.add(RedisServer())
        x = serve(st, "--kv-store", redis.url, "--api-keys", f.name)
        y = serve(st, "--kv-store", redis.url, "--api-keys", f.name)
        prompt = document(14, 400) + "\n\nQuestion: first word? Answer:"
        text_a, _, ua = ask(x, prompt, key=keys["A"])
        settled(x)
        m0 = y.metrics()
        text_c, _, uc = ask(y, prompt, key=keys["C"])
        m1 = y.metrics()
        text_b, _, ub = ask(y, prompt, key=keys["B"])
        m2 = y.metrics()
        hits_c = m1["chorus_kv_remote_hits_total"] - m0["chorus_kv_remote_hits_total"]
        hits_b = m2["chorus_kv_remote_hits_total"] - m1["chorus_kv_remote_hits_total"]
        print(f"A on replica x: {ua['prompt_tokens']} tokens; on replica y: C cached {cached(uc)} "
              f"({hits_c:.0f} remote hits), B cached {cached(ub)} ({hits_b:.0f} remote hits); "
              f"answers {text_a!r} / {text_b!r} / {text_c!r}")
        check(cached(uc) == 0 and hits_c == 0, "C was served blocks of A's scope")
        check(cached(ub) >= ua["prompt_tokens"] - 32 and hits_b * 32 == cached(ub), "B did not fetch A's blocks")
        check(text_a == text_b == text_c, "the answers differ")
        settled(y)
        r = redis.client()
        scopes = {HEADER.unpack_from(r.cmd("GET", k))[5] for k in r.cmd("KEYS", "chorus:kv2:*")}
        check(len(scopes) == 2 and 0 not in scopes, f"scopes in Redis: {scopes} (expected group g's and C's)")
    finally:
        os.unlink(f.name)


def case_mac(st):
    """--kv-store-secret-file: replicas sharing the secret share blocks; values written by a replica
    with another secret (a writer without it) or none are refused as "mac" and computed locally."""
    import tempfile
    files = []
    for secret in ("the-replicas-shared-secret\n", "an-attackers-other-secret\n"):
        f = tempfile.NamedTemporaryFile("w", suffix=".secret", delete=False)
        f.write(secret)
        f.close()
        files.append(f.name)
    try:
        redis = st.add(RedisServer())
        x = serve(st, "--kv-store", redis.url, "--kv-store-secret-file", files[0])
        y = serve(st, "--kv-store", redis.url, "--kv-store-secret-file", files[0])
        z = serve(st, "--kv-store", redis.url, "--kv-store-secret-file", files[1])
        w = serve(st, "--kv-store", redis.url)  # no secret: its values carry no MAC
        prompt = document(16, 300) + "\n\nQuestion: first word? Answer:"
        text_x, _, ux = ask(x, prompt)
        settled(x)
        text_y, _, uy = ask(y, prompt)
        m = y.metrics()
        check(cached(uy) >= ux["prompt_tokens"] - 32 and err(m, "mac") == 0, f"y did not fetch x's blocks: {uy}")
        text_z, _, uz = ask(z, prompt)
        mz = z.metrics()
        check(cached(uz) == 0 and err(mz, "mac") == 1, f"z (another secret) used x's blocks: {uz}, mac {err(mz, 'mac')}")
        other = document(17, 300) + "\n\nQuestion: first word? Answer:"
        ask(w, other)
        settled(w)
        _, _, uy2 = ask(y, other)
        check(cached(uy2) == 0 and err(y.metrics(), "mac") == 1, "y used a block with no MAC")
        print(f"mac: y fetched {cached(uy)} tokens; z (other secret) 0, y on w's unMACed blocks 0; answers "
              f"{text_x!r} / {text_y!r} / {text_z!r}")
        check(text_x == text_y == text_z, "the answers differ")
        logs = "".join(line for srv in (x, y, z) for line in srv.stderr_lines)
        check("shared-secret" not in logs and "other-secret" not in logs, "a secret was logged")
    finally:
        for name in files:
            os.unlink(name)


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in CASES:
        sys.exit(f"usage: {sys.argv[0]} CASE  ({', '.join(CASES)})")
    stack = Stack()
    t0 = time.time()
    try:
        CASES[name](stack)
    finally:
        stack.close()
    print(f"{name}: ok ({time.time() - t0:.1f} s)")
