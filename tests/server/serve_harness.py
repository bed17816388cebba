"""Starts and stops `chorus serve` on 127.0.0.1 for the Python tests (the real binary, the real model).

ChorusServer(binary, model, *flags, port=0) picks a free port (--port 0, read from the first stdout line),
waits for /health, and on stop sends SIGTERM and waits for a clean exit (it kills after a timeout,
so a test run always ends). Helpers read /metrics as a dict.
"""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def free_port():
    """A TCP port free on 127.0.0.1 now (for a server that must come back on the same port)."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class ChorusServer:
    def __init__(self, binary, model=DEFAULT_MODEL, *flags, startup_s=120, port=0):
        self.cmd = [binary, "serve", "-m", model, "--port", str(port), *flags]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr_lines = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.time() + startup_s
        line = ""
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if line or self.proc.poll() is not None:
                break
        m = re.search(r"http://([\d.]+):(\d+)/v1", line or "")
        if not m:
            self.proc.kill()
            raise RuntimeError(f"chorus serve did not start: {line!r} {''.join(self.stderr_lines)}")
        self.host, self.port = m.group(1), int(m.group(2))
        self.base = f"http://{self.host}:{self.port}"
        self.url = self.base + "/v1"
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        for _ in range(100):
            try:
                if self.get_json("/health")["status"] == "ok":
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("chorus serve never answered /health")

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def get(self, path, headers=None):
        req = urllib.request.Request(self.base + path, headers=headers or {})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()

    def get_json(self, path):
        return json.loads(self.get(path)[1])

    def post(self, path, body, headers=None, timeout=300):
        """Returns (status, text) for any status (HTTP errors are answers here, not exceptions)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def metrics(self):
        """Prometheus text → {name or name{labels}: value}."""
        out = {}
        for line in self.get("/metrics")[1].splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
        return out

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("chorus serve did not stop on SIGTERM within %d s" % timeout)
            finally:
                for f in (self.proc.stdout, self.proc.stderr):
                    try:
                        f.close()
                    except Exception:  # a reader thread may still hold it; the process is gone
                        pass
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
