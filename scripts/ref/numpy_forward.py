#!/usr/bin/env python3
"""Exact-math reference: the llama-family forward pass in numpy, no llama.cpp involved.

Weights are dequantized exactly (Q4_1, Q8_0, F16, F32 — the types SmolLM2's GGUF uses) and
everything after that is float64: no activation quantization (llama.cpp quantizes the
activations to Q8_1/Q8_0 before every quantized matmul) and, unless --kv-f16, no rounding of
K/V. It answers "which engine is closer to the math?" when chorus and llama.cpp disagree.

  scripts/ref/numpy_forward.py [-m MODEL] [-n 1024] [--kv-f16] [--emulate-q8] [--f32] --out FILE.npy

Tokens: the golden's token ids (--tokens-from tests/e2e/testdata/llamacpp_logits_golden.json,
the default), so the three engines see the same input. Output: float32 [n, n_vocab] logits
(.npy, or raw little-endian f32 for any other suffix), comparable with compare_logits.py.
Only numpy is needed (a small GGUF reader is included).
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# ---- GGUF reader (metadata + tensor views) ----------------------------------------------------
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGML_F32, GGML_F16, GGML_Q4_1, GGML_Q8_0 = 0, 1, 3, 8


class Gguf:
    def __init__(self, path: str):
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        if bytes(self.buf[:4]) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        self.version = self._u("<I")
        n_tensors, n_kv = self._u("<Q"), self._u("<Q")
        self.meta = {}
        for _ in range(n_kv):
            key = self._str()
            self.meta[key] = self._value(self._u("<I"))
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u("<I")
            dims = [self._u("<Q") for _ in range(nd)]
            ttype, off = self._u("<I"), self._u("<Q")
            self.tensors[name] = (dims, ttype, off)
        align = int(self.meta.get("general.alignment", 32))
        self.data_start = (self.pos + align - 1) // align * align

    def _u(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def _str(self):
        n = self._u("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def _value(self, t):
        if t in _SCALAR:
            return self._u(_SCALAR[t])
        if t == 8:
            return self._str()
        if t == 9:
            et, n = self._u("<I"), self._u("<Q")
            if et in _SCALAR:  # bulk-skip numeric arrays (token types etc.)
                sz = struct.calcsize(_SCALAR[et])
                arr = np.frombuffer(self.buf, dtype=_SCALAR[et], count=n, offset=self.pos)
                self.pos += sz * n
                return arr
            return [self._value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {t}")

    def tensor(self, name: str) -> np.ndarray:
        """Dequantized tensor, float32, shape (ne1, ne0) for matrices (row = ne0 contiguous)."""
        dims, t, off = self.tensors[name]
        n = int(np.prod(dims))
        base = self.data_start + off
        if t == GGML_F32:
            x = np.frombuffer(self.buf, dtype="<f4", count=n, offset=base)
        elif t == GGML_F16:
            x = np.frombuffer(self.buf, dtype="<f2", count=n, offset=base).astype(np.float32)
        elif t == GGML_Q8_0:  # block 32: f16 d, 32 x int8
            nb = n // 32
            raw = np.frombuffer(self.buf, dtype=np.uint8, count=nb * 34, offset=base).reshape(nb, 34)
            d = raw[:, :2].copy().view("<f2").astype(np.float32)
            q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
            x = (d * q).reshape(-1)
        elif t == GGML_Q4_1:  # block 32: f16 d, f16 m, 16 bytes: lo nibbles = 0..15, hi = 16..31
            nb = n // 32
            raw = np.frombuffer(self.buf, dtype=np.uint8, count=nb * 20, offset=base).reshape(nb, 20)
            d = raw[:, 0:2].copy().view("<f2").astype(np.float32)
            m = raw[:, 2:4].copy().view("<f2").astype(np.float32)
            qs = raw[:, 4:]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
            x = (d * q + m).reshape(-1)
        else:
            raise ValueError(f"{name}: GGML type {t} not supported by this oracle")
        return x.reshape(list(reversed(dims))) if len(dims) > 1 else x


# ---- forward ----------------------------------------------------------------------------------
def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def rope(x, pos, base):
    """GGML 'normal' RoPE (adjacent pairs), x: [n, heads, d]."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None].astype(np.float64) * inv[None, :]             # [n, d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def q8_blocks(x: np.ndarray) -> np.ndarray:
    """ggml's activation quantization before a quantized matmul (quantize_row_q8_0/q8_1):
    per 32 values, d = amax/127 stored as fp16, q = round(x/d) in int8; returns d*q."""
    sh = x.shape
    b = x.reshape(-1, 32)
    d = (np.abs(b).max(axis=1, keepdims=True) / 127.0).astype(np.float16).astype(x.dtype)
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.clip(np.rint(b * inv), -127, 127)
    return (q * d).reshape(sh)


def forward(g: Gguf, tokens: np.ndarray, kv_f16: bool, dtype=np.float64, emulate_q8: bool = False) -> np.ndarray:
    a = g.meta["general.architecture"]
    L = int(g.meta[f"{a}.block_count"])
    n_head = int(g.meta[f"{a}.attention.head_count"])
    n_kv = int(g.meta[f"{a}.attention.head_count_kv"])
    eps = float(g.meta[f"{a}.attention.layer_norm_rms_epsilon"])
    base = float(g.meta.get(f"{a}.rope.freq_base", 10000.0))
    W = lambda name: g.tensor(name).astype(dtype)  # noqa: E731
    quantized = {GGML_Q4_1, GGML_Q8_0}

    def mm(h, name):  # h @ W^T, with ggml's int8 activation quantization if emulated
        if emulate_q8 and g.tensors[name][1] in quantized:
            h = q8_blocks(h)
        return h @ W(name).T
    emb = g.tensor("token_embd.weight")
    x = emb[tokens].astype(dtype)                                    # [n, d_model]
    n = len(tokens)
    pos = np.arange(n)
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    for l in range(L):
        p = f"blk.{l}."
        h = rmsnorm(x, W(p + "attn_norm.weight"), eps)
        q = mm(h, p + "attn_q.weight")
        k = mm(h, p + "attn_k.weight")
        v = mm(h, p + "attn_v.weight")
        hd = q.shape[1] // n_head
        q = rope(q.reshape(n, n_head, hd), pos, base)
        k = rope(k.reshape(n, n_kv, hd), pos, base)
        v = v.reshape(n, n_kv, hd)
        if kv_f16:
            k = k.astype(np.float16).astype(dtype)
            v = v.astype(np.float16).astype(dtype)
        out = np.empty((n, n_head, hd), dtype=dtype)
        grp = n_head // n_kv
        for hh in range(n_head):
            kh, vh = k[:, hh // grp], v[:, hh // grp]
            s = q[:, hh] @ kh.T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hh] = (s / s.sum(axis=1, keepdims=True)) @ vh
        x = x + mm(out.reshape(n, -1), p + "attn_output.weight")
        h = rmsnorm(x, W(p + "ffn_norm.weight"), eps)
        gate = mm(h, p + "ffn_gate.weight")
        up = mm(h, p + "ffn_up.weight")
        x = x + mm(gate / (1 + np.exp(-gate)) * up, p + "ffn_down.weight")
    x = rmsnorm(x, W("output_norm.weight"), eps)
    out_w = "output.weight" if "output.weight" in g.tensors else "token_embd.weight"
    return mm(x, out_w)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens-from", default=os.path.join(REPO, "tests", "e2e", "testdata",
                                                          "llamacpp_logits_golden.json"),
                    help="a golden header .json whose 'tokens' are the input")
    ap.add_argument("-n", "--n-pos", type=int, default=0, help="first n tokens (default: all of them)")
    ap.add_argument("--kv-f16", action="store_true", help="round K and V to fp16, as a f16 KV cache does")
    ap.add_argument("--f32", action="store_true", help="compute in float32 instead of float64")
    ap.add_argument("--emulate-q8", action="store_true",
                    help="quantize activations to int8 per 32 (fp16 scale) before each quantized "
                         "matmul, as ggml's CPU kernels (and chorus's int8 kernels) do")
    ap.add_argument("--out", required=True, help="output logits, .npy or raw f32")
    a = ap.parse_args()

    tokens = np.array(json.load(open(a.tokens_from))["tokens"], dtype=np.int64)
    if a.n_pos:
        tokens = tokens[: a.n_pos]
    t0 = time.perf_counter()
    g = Gguf(a.model)
    logits = forward(g, tokens, a.kv_f16, np.float32 if a.f32 else np.float64, a.emulate_q8).astype("<f4")
    if a.out.endswith(".npy"):
        np.save(a.out, logits)
    else:
        logits.tofile(a.out)
    print(json.dumps({"out": a.out, "n_pos": int(len(tokens)), "n_vocab": int(logits.shape[1]),
                      "kv_f16": a.kv_f16, "emulate_q8": a.emulate_q8, "dtype": "float32" if a.f32 else "float64",
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
