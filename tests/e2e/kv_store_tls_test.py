"""Replicas sharing KV blocks through a real Redis over TLS (`chorus serve --kv-store rediss://...`).

Each case makes a throwaway CA and a server certificate for 127.0.0.1 with `openssl` in its own
temporary directory, starts a real `redis-server` serving both a plaintext port and a TLS port
(the same data) and real `chorus serve` replicas (SmolLM2-135M, 1 thread each), and stops all of
them in `finally`. Run one case: python3 kv_store_tls_test.py CASE (ctest runs each as its own test).

  tls         A and B over rediss:// with --kv-store-ca: B fetches the blocks A published (same
              answer, no prefill but the last partial block). A replica with the wrong CA, one
              whose --kv-store-sni names another host, and plaintext redis:// to the TLS port each
              warn naming the problem, serve locally (same answer, nothing cached) and count a
              "tls" or "io" error: the behaviour of an unreachable store. Fetch latency of the same
              blocks over TLS and over the plaintext port is printed.
  tls_client  Redis requiring client certificates (tls-auth-clients yes): without --kv-store-cert
              the handshake fails (warned, served locally); with it, connected and publishing.
  tls_flags   bad TLS flags refuse to start with a message naming the flag: an unreadable CA
              file, a file that is not PEM, --kv-store-cert without --kv-store-key, a key that is
              not the certificate's, TLS flags with a redis:// URL.
"""
import os
import subprocess
import sys
import tempfile
import time

from kv_store_test import (BIN, DEFAULT_MODEL, RedisServer, Stack, ask, cached, check, doc_blocks, document, err,
                           free_port, published, serve, settled, wait_for)

Q = "\n\nQuestion: Which word comes first? Answer:"


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_pki(d):
    """Two CAs (the right one and a stranger), a server certificate for 127.0.0.1 / localhost and a
    client certificate, both signed by the right CA. P-256 keys: fast to make."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    p = {k: os.path.join(d, k) for k in ("ca.pem", "ca.key", "other-ca.pem", "other-ca.key", "server.pem",
                                          "server.key", "client.pem", "client.key", "ext")}
    openssl("req", "-x509", *ec, "-keyout", p["ca.key"], "-out", p["ca.pem"], "-days", "1", "-subj", "/CN=chorus-ca")
    openssl("req", "-x509", *ec, "-keyout", p["other-ca.key"], "-out", p["other-ca.pem"], "-days", "1", "-subj",
            "/CN=stranger-ca")
    with open(p["ext"], "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        csr = os.path.join(d, who + ".csr")
        openssl("req", *ec, "-keyout", p[who + ".key"], "-out", csr, "-subj", f"/CN={who}")
        openssl("x509", "-req", "-in", csr, "-CA", p["ca.pem"], "-CAkey", p["ca.key"], "-CAcreateserial", "-out",
                p[who + ".pem"], "-days", "1", "-extfile", p["ext"])
    return p


def tls_redis(st, pki, auth_clients="no"):
    """Redis on a plaintext port (the test's own client, and the plaintext comparison) and a TLS port."""
    tport = free_port()
    redis = st.add(RedisServer(None, "--tls-port", str(tport), "--tls-cert-file", pki["server.pem"],
                               "--tls-key-file", pki["server.key"], "--tls-ca-cert-file", pki["ca.pem"],
                               "--tls-auth-clients", auth_clients))
    redis.tls_url = f"rediss://127.0.0.1:{tport}/0"
    redis.tls_port = tport
    return redis


def warned(srv, *needles):
    log = "".join(srv.stderr_lines)
    check("warning: kv-store" in log and "serving without it" in log, f"no warning in the log: {log}")
    for n in needles:
        check(n in log, f"the warning does not say {n!r}: {log}")
    return [line for line in srv.stderr_lines if "warning: kv-store" in line][0].strip()


def fetch_seconds(m0, m1):
    """Mean seconds of the fetches between two /metrics snapshots."""
    n = m1["chorus_kv_remote_fetch_seconds_count"] - m0.get("chorus_kv_remote_fetch_seconds_count", 0)
    return (m1["chorus_kv_remote_fetch_seconds_sum"] - m0.get("chorus_kv_remote_fetch_seconds_sum", 0)) / max(n, 1), n


def case_tls(st):
    d = tempfile.mkdtemp(prefix="chorus-tls-")
    pki = make_pki(d)
    redis = tls_redis(st, pki)
    a = serve(st, "--kv-store", redis.tls_url, "--kv-store-ca", pki["ca.pem"])
    b = serve(st, "--kv-store", redis.tls_url, "--kv-store-ca", pki["ca.pem"])
    doc = document(21, 1500)
    text_a, _, ua = ask(a, doc + Q)
    check(a.metrics()["chorus_kv_remote_up"] == 1, "A is not connected over TLS: " + "".join(a.stderr_lines))
    settled(a)
    n = ua["prompt_tokens"] // 32
    check(published(a) >= n, f"A published {published(a)} of {n} blocks over TLS")
    # The blocks are in Redis: read through the plaintext port, the same data.
    keys = redis.client().cmd("KEYS", "chorus:kv2:*")
    check(len(keys) >= n, f"{len(keys)} keys in Redis, {n} blocks published")
    m0 = b.metrics()
    text_b, _, ub = ask(b, doc + Q)
    m1 = b.metrics()
    hits = m1["chorus_kv_remote_hits_total"] - m0["chorus_kv_remote_hits_total"]
    check(text_b == text_a, f"B's answer {text_b!r} != A's {text_a!r}")
    check(hits == n and cached(ub) == 32 * n, f"B over TLS: {hits} hits, {cached(ub)} cached tokens, {n} blocks")
    tls_s, tls_n = fetch_seconds(m0, m1)
    fetched = m1["chorus_kv_remote_fetched_bytes_total"] - m0["chorus_kv_remote_fetched_bytes_total"]

    # The same blocks over the plaintext port, for the cost of TLS on a fetch.
    p = serve(st, "--kv-store", redis.url)
    m0 = p.metrics()
    text_p, _, up = ask(p, doc + Q)
    plain_s, plain_n = fetch_seconds(m0, p.metrics())
    check(text_p == text_a and cached(up) == 32 * n, f"plaintext replica: {cached(up)} cached, {text_p!r}")
    print(f"{n} blocks ({fetched:.0f} bytes) fetched: TLS {1e3 * tls_s:.2f} ms/fetch ({tls_n:.0f} fetches), plaintext {1e3 * plain_s:.2f} "
          f"ms/fetch ({plain_n:.0f} fetches)")

    # Failures: each replica warns, serves locally with the same answer, and counts the error.
    bad = {
        "wrong CA": (["--kv-store", redis.tls_url, "--kv-store-ca", pki["other-ca.pem"]], "tls",
                     ["TLS handshake", "certificate verify failed", "--kv-store-ca"]),
        "wrong name": (["--kv-store", redis.tls_url, "--kv-store-ca", pki["ca.pem"], "--kv-store-sni",
                        "redis.example.org"], "tls", ["certificate verify failed"]),
        "plaintext to TLS": (["--kv-store", f"redis://127.0.0.1:{redis.tls_port}/0"], "io", ["use rediss://"]),
    }
    for what, (flags, kind, needles) in bad.items():
        t0 = time.time()
        c = serve(st, *flags)
        started = time.time() - t0
        text_c, _, uc = ask(c, doc + Q)
        m = c.metrics()
        line = warned(c, *needles)
        print(f"{what}: started in {started:.1f} s; {line}")
        check(m["chorus_kv_remote_up"] == 0 and err(m, kind) >= 1, f"{what}: metrics up {m['chorus_kv_remote_up']}, "
              f"{kind} errors {err(m, kind)}")
        check(text_c == text_a and cached(uc) == 0, f"{what}: local answer {text_c!r}, {cached(uc)} cached")


def case_tls_client(st):
    d = tempfile.mkdtemp(prefix="chorus-tls-")
    pki = make_pki(d)
    redis = tls_redis(st, pki, auth_clients="yes")
    a = serve(st, "--kv-store", redis.tls_url, "--kv-store-ca", pki["ca.pem"])
    text_a, _, ua = ask(a, document(22, 300) + Q)
    m = a.metrics()
    print("no client certificate:", warned(a, "client certificate? --kv-store-cert"))
    check(m["chorus_kv_remote_up"] == 0 and err(m, "tls") + err(m, "io") >= 1, "connected without a client cert")
    check(ua["prompt_tokens"] > 0 and cached(ua) == 0, f"usage {ua}")  # answered, all computed here
    b = serve(st, "--kv-store", redis.tls_url, "--kv-store-ca", pki["ca.pem"], "--kv-store-cert", pki["client.pem"],
              "--kv-store-key", pki["client.key"])
    n = doc_blocks(b, document(23, 300) + Q)
    wait_for(lambda: published(b) >= n, "publication with a client certificate")
    check(b.metrics()["chorus_kv_remote_up"] == 1, "not connected with the client certificate")


def case_tls_flags(st):
    d = tempfile.mkdtemp(prefix="chorus-tls-")
    pki = make_pki(d)
    port = free_port()  # nothing listens: the flags are refused before any connection
    url = f"rediss://127.0.0.1:{port}/0"
    not_pem = os.path.join(d, "not.pem")
    with open(not_pem, "w") as f:
        f.write("this is no certificate\n")
    cases = [
        (["--kv-store", url, "--kv-store-ca", os.path.join(d, "missing.pem")], "--kv-store-ca", "cannot read it"),
        (["--kv-store", url, "--kv-store-ca", not_pem], "--kv-store-ca", "no PEM CA certificate"),
        (["--kv-store", url, "--kv-store-cert", pki["client.pem"]], "--kv-store-key", "go together"),
        (["--kv-store", url, "--kv-store-cert", pki["client.pem"], "--kv-store-key", pki["server.key"]],
         "--kv-store-key", "not the key of"),
        (["--kv-store", url, "--kv-store-cert", not_pem, "--kv-store-key", pki["client.key"]], "--kv-store-cert",
         "no PEM certificate"),
        (["--kv-store", f"redis://127.0.0.1:{port}/0", "--kv-store-ca", pki["ca.pem"]], "--kv-store-ca",
         "use rediss://"),
    ]
    for flags, flag, what in cases:
        p = subprocess.run([BIN, "serve", "-m", DEFAULT_MODEL, "--port", "0", "-t", "1", *flags],
                           capture_output=True, text=True, timeout=120)
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        print(f"{' '.join(f[len(d) + 1:] if f.startswith(d) else f for f in flags[2:])}: rc {p.returncode}: {last}")
        check(p.returncode != 0, f"{flags} accepted")
        check(flag in p.stderr and what in p.stderr, f"{flags}: {p.stderr}")


CASES = {"tls": case_tls, "tls_client": case_tls_client, "tls_flags": case_tls_flags}

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
