"""Shared helpers for the llama.cpp reference oracles in scripts/ref/.

Thin layer over llama-cpp-python's *low-level* ctypes API (llama_cpp.llama_*), so that
what we time and what we read back is llama.cpp itself, not the high-level Llama class.
Only the reference scripts import this; nothing in the C++ build depends on it.

Install the peer with `scripts/setup.sh --with-peer` (or `pip install llama-cpp-python`).
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import time

import numpy as np

try:
    import llama_cpp as L
except ImportError:  # pragma: no cover
    sys.exit("llama-cpp-python is not installed: run scripts/setup.sh --with-peer "
             "(or: CMAKE_BUILD_PARALLEL_LEVEL=2 python3 -m pip install llama-cpp-python)")

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_DATA = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "wikitext-2", "test.txt"))

KV_TYPES = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0, "q4_0": L.GGML_TYPE_Q4_0}
FLASH_ATTN = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
              "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}

_backend_ready = False


def _set_verbose(verbose: bool) -> None:
    """llama-cpp-python routes llama.cpp's log through the "llama-cpp-python" logger
    (installed on import); below ERROR it is silent."""
    logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.ERROR)


def versions() -> dict:
    """Versions of the peer: the Python package, libllama and the C library's system info."""
    out = {"llama_cpp_python": L.__version__}
    try:
        out["libllama"] = L.llama_version().decode()
    except Exception:  # older bindings have no llama_version()
        pass
    out["system_info"] = L.llama_print_system_info().decode().strip()
    return out


def memory_clear(ctx) -> None:
    """Clear the KV cache (llama_memory_clear on new llama.cpp, llama_kv_self_clear on old)."""
    if hasattr(L, "llama_memory_clear") and hasattr(L, "llama_get_memory"):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
    elif hasattr(L, "llama_kv_self_clear"):
        L.llama_kv_self_clear(ctx)
    else:
        L.llama_kv_cache_clear(ctx)


def _memory_fn(new: str, *old: str):
    """The llama.cpp memory function under its current name or an older one: returns
    (callable taking ctx first, name used)."""
    if hasattr(L, new) and hasattr(L, "llama_get_memory"):
        f = getattr(L, new)
        return (lambda ctx, *a: f(L.llama_get_memory(ctx), *a)), new
    for name in old:
        if hasattr(L, name):
            return getattr(L, name), name
    raise RuntimeError(f"this llama-cpp-python has none of {(new,) + old}")


def memory_seq_cp(ctx, src: int, dst: int, p0: int = -1, p1: int = -1) -> str:
    """Copy sequence src's cells [p0, p1) to dst (-1 = all). With a unified KV cache the cells
    are shared (dst's seq id is added to them), nothing is copied. Returns the API name used:
    llama_memory_seq_cp (new), llama_kv_self_seq_cp or llama_kv_cache_seq_cp (older)."""
    f, name = _memory_fn("llama_memory_seq_cp", "llama_kv_self_seq_cp", "llama_kv_cache_seq_cp")
    f(ctx, src, dst, p0, p1)
    return name


def memory_seq_pos_max(ctx, seq: int) -> int:
    """Largest position held for sequence seq (-1 if empty)."""
    f, _ = _memory_fn("llama_memory_seq_pos_max", "llama_kv_self_seq_pos_max", "llama_kv_cache_seq_pos_max")
    return int(f(ctx, seq))


class _Tee(io.TextIOBase):
    def __init__(self, buf, echo):
        self.buf, self.echo = buf, echo

    def write(self, s):
        self.buf.write(s)
        if self.echo is not None:
            self.echo.write(s)
        return len(s)

    def flush(self):
        if self.echo is not None:
            self.echo.flush()


@contextlib.contextmanager
def capture_log(echo: bool = False):
    """Capture llama.cpp's log (all levels) while the block runs; yields a StringIO.

    llama-cpp-python's log callback prints each line to sys.stderr (looked up per call) when
    the "llama-cpp-python" logger's level allows it, so: lower the level, swap sys.stderr.
    echo: also pass the lines through to the real stderr."""
    buf = io.StringIO()
    lg = logging.getLogger("llama-cpp-python")
    old_level, old_err = lg.level, sys.stderr
    lg.setLevel(logging.DEBUG)
    sys.stderr = _Tee(buf, old_err if echo else None)
    try:
        yield buf
    finally:
        sys.stderr = old_err
        lg.setLevel(old_level)


_capture_log = capture_log  # Model.__init__'s capture_log argument shadows the name


_KV_SIZE_RE = re.compile(
    r"llama_kv_cache\w*: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\)"
    r"(?:, K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB)?")
_BUF_RE = re.compile(r"(\w+):\s+(\S+)\s+(KV|compute|output) buffer size =\s*([\d.]+) MiB")


def parse_kv_log(log: str) -> dict:
    """What llama.cpp's own log says it allocated: the "llama_kv_cache: size = ..." line(s)
    (summed if several caches, e.g. SWA) and the KV/compute/output buffer lines. Only values
    printed by llama.cpp; empty dict if none were found."""
    out: dict = {}
    sizes = _KV_SIZE_RE.findall(log)
    if sizes:
        out["kv_size_mib"] = round(sum(float(x[0]) for x in sizes), 3)
        out["kv_cells"] = [int(x[1]) for x in sizes]
        out["kv_layers"] = [int(x[2]) for x in sizes]
        out["kv_seqs"] = [f"{x[3]}/{x[4]}" for x in sizes]
        if sizes[0][5]:
            out["kv_k_mib"] = round(sum(float(x[6]) for x in sizes if x[6]), 3)
            out["kv_v_mib"] = round(sum(float(x[8]) for x in sizes if x[8]), 3)
            out["type_k"], out["type_v"] = sizes[0][5], sizes[0][7]
        out["kv_size_lines"] = [ln.strip() for ln in log.splitlines() if _KV_SIZE_RE.search(ln)]
    for _, dev, kind, mib in _BUF_RE.findall(log):
        key = f"{kind}_buffer_mib"
        out[key] = round(out.get(key, 0.0) + float(mib), 3)
    return out


class Model:
    """A loaded model + one context (single sequence unless n_seq_max says otherwise)."""

    def __init__(self, path: str, n_ctx: int, n_batch: int | None = None, n_ubatch: int | None = None,
                 n_threads: int = 2, kv_type: str = "f16", flash_attn: str = "auto",
                 verbose: bool = False, n_seq_max: int = 1, kv_unified: bool | None = None,
                 capture_log: bool = False):
        """n_seq_max: sequences the context holds; kv_unified: set llama_context_params.kv_unified
        (one KV buffer shared by all sequences; None = llama.cpp's default); capture_log: keep
        llama.cpp's log of the model load + context creation in self.log (see parse_kv_log)."""
        global _backend_ready
        if not os.path.exists(path):
            sys.exit(f"model not found: {path} (run scripts/fetch_model.sh)")
        if not _backend_ready:
            _set_verbose(verbose)
            L.llama_backend_init()
            _backend_ready = True
        self.log = None
        cap = _capture_log(echo=verbose) if capture_log else contextlib.nullcontext(None)
        with cap as logbuf:
            try:
                self._load(path, n_ctx, n_batch, n_ubatch, n_threads, kv_type, flash_attn, n_seq_max,
                           kv_unified)
            except BaseException:
                if logbuf is not None and not verbose:  # show what llama.cpp said before failing
                    sys.__stderr__.write("".join(logbuf.getvalue().splitlines(True)[-40:]))
                raise
        if logbuf is not None:
            self.log = logbuf.getvalue()

    def _load(self, path, n_ctx, n_batch, n_ubatch, n_threads, kv_type, flash_attn, n_seq_max, kv_unified):
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            sys.exit(f"llama.cpp failed to load {path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.add_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        self.bos = L.llama_vocab_bos(self.vocab)

        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch or n_ctx
        cp.n_ubatch = n_ubatch or cp.n_batch
        cp.n_seq_max = n_seq_max
        if kv_unified is not None:
            if not any(f[0] == "kv_unified" for f in cp._fields_):
                sys.exit("this llama-cpp-python has no llama_context_params.kv_unified")
            cp.kv_unified = bool(kv_unified)
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        cp.type_k = KV_TYPES[kv_type]
        cp.type_v = KV_TYPES[kv_type]
        if kv_type != "f16" and flash_attn == "off":
            sys.exit("a quantized V cache needs flash attention (--flash-attn on|auto)")
        cp.flash_attn_type = FLASH_ATTN[flash_attn]
        cp.no_perf = False
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            sys.exit("llama.cpp failed to create a context")
        self.n_ctx = L.llama_n_ctx(self.ctx)
        self.n_batch = cp.n_batch
        self.n_ubatch = cp.n_ubatch
        self.n_threads = n_threads
        self.kv_type = kv_type
        self.flash_attn = flash_attn
        self.n_seq_max = L.llama_n_seq_max(self.ctx) if hasattr(L, "llama_n_seq_max") else n_seq_max
        self.kv_unified = bool(getattr(cp, "kv_unified", False))
        self._batch = L.llama_batch_init(self.n_batch, 0, 1)

    def settings(self) -> dict:
        return {"n_ctx": self.n_ctx, "n_batch": self.n_batch, "n_ubatch": self.n_ubatch,
                "n_threads": self.n_threads, "type_k": self.kv_type, "type_v": self.kv_type,
                "flash_attn": self.flash_attn}

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:
            L.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "ctx", None):
            L.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            L.llama_model_free(self.model)
            self.model = None

    # -- tokenizer --------------------------------------------------------------------------
    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = False) -> np.ndarray:
        """llama_tokenize exactly as common_tokenize(ctx, text, add_special) calls it."""
        data = text.encode("utf-8") if isinstance(text, str) else text
        cap = len(data) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError("llama_tokenize failed")
        return np.ctypeslib.as_array(buf)[:n].astype(np.int32).copy()

    # -- evaluation ---------------------------------------------------------------------------
    def clear(self) -> None:
        memory_clear(self.ctx)

    def decode(self, tokens, pos0: int, want_logits) -> int:
        """One llama_decode of len(tokens) tokens at positions pos0.., sequence 0.

        want_logits: bool (all or none), or a per-token sequence of bools. Returns the number
        of output rows. Raises on a failed decode."""
        n_out = self.fill(tokens, pos0, want_logits)
        self.run()
        return n_out

    def fill(self, tokens, pos0: int, want_logits) -> int:
        """Fill the batch (Python-side work) without decoding; see decode()."""
        n = len(tokens)
        return self.fill_seqs(tokens, range(pos0, pos0 + n), [0] * n, want_logits)

    def fill_seqs(self, tokens, positions, seq_ids, want_logits) -> int:
        """Fill the batch with one token per row at its own position and sequence id (for
        multi-sequence decoding). want_logits: one bool for every row, or one per row. Returns the
        number of output rows."""
        n = len(tokens)
        if n > self.n_batch:
            raise ValueError(f"batch of {n} tokens > n_batch {self.n_batch}")
        b = self._batch
        n_out = 0
        for i in range(n):
            b.token[i] = int(tokens[i])
            b.pos[i] = int(positions[i])
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = int(seq_ids[i])
            w = want_logits if isinstance(want_logits, bool) else bool(want_logits[i])
            b.logits[i] = 1 if w else 0
            n_out += w
        b.n_tokens = n
        return n_out

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> str:
        """Copy sequence src's KV cells to dst; returns the llama.cpp function used."""
        return memory_seq_cp(self.ctx, src, dst, p0, p1)

    def seq_pos_max(self, seq: int) -> int:
        return memory_seq_pos_max(self.ctx, seq)

    def run(self) -> None:
        """llama_decode of the batch filled by fill()."""
        rc = L.llama_decode(self.ctx, self._batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed: {rc}")

    def synchronize(self) -> None:
        L.llama_synchronize(self.ctx)

    def logits(self, n_rows: int) -> np.ndarray:
        """The output rows of the last decode, as an (n_rows, n_vocab) float32 view-copy."""
        ptr = L.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab)).copy()

    def logits_ith(self, i: int) -> np.ndarray:
        ptr = L.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()



def cpu_idle_fraction(interval: float = 1.0) -> float:
    """Fraction of all CPUs idle over `interval` seconds (from /proc/stat; 1.0 if unknown)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    try:
        i0, t0 = snap()
        time.sleep(interval)
        i1, t1 = snap()
        return (i1 - i0) / max(t1 - t0, 1)
    except (OSError, ValueError, IndexError):
        return 1.0


def wait_idle(max_wait: float, threshold: float) -> float:
    """Wait (up to max_wait s) until the CPUs are at least `threshold` idle; returns the last idle
    fraction seen (below threshold = timed out). max_wait 0 = do not wait (NaN)."""
    if max_wait <= 0:
        return float("nan")
    deadline = time.monotonic() + max_wait
    while True:
        idle = cpu_idle_fraction()
        if idle >= threshold or time.monotonic() >= deadline:
            return idle


def read_text(path: str) -> bytes:
    """Read a text file the way llama.cpp's `-f FILE` does: raw bytes, one trailing '\\n' dropped."""
    with open(path, "rb") as f:
        data = f.read()
    if data.endswith(b"\n"):
        data = data[:-1]
    return data
