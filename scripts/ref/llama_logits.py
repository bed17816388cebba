#!/usr/bin/env python3
"""llama.cpp logits goldens: evaluate the first N tokens of WikiText-2 test as ONE sequence.

Tokenization: llama_tokenize(whole file, add_special=True, parse_special=False) after the
file is read as llama.cpp's `-f` reads it (raw bytes, one trailing '\\n' dropped); the model
has add_bos_token=false, so no BOS is added; the first --n-pos tokens are kept. They are
evaluated from position 0 in a single llama_decode (n_ctx = n_batch = n_ubatch = n_pos,
every token requests logits, fresh KV cache, f16 KV, flash-attn auto, --threads threads).

Writes (defaults under tests/e2e/testdata/):
  llamacpp_logits_golden.bin   little-endian sections, back to back, no padding:
      tokens        int32   [n_pos]       input token ids (position p holds token p)
      top_ids       int32   [n_pos, k]    top-k token ids at each position, by logit, descending
                                          (ties: lower id first)
      top_logprobs  float32 [n_pos, k]    log_softmax(full logits)[top_ids]
      lse           float32 [n_pos]       log-sum-exp of the full logits row
      top1_logit    float32 [n_pos]       raw logit of top_ids[:, 0]
    Row p is the distribution for the token at position p+1 (the next token).
  llamacpp_logits_golden.json  the header: n_pos, k, n_vocab, the section table (name, dtype,
    shape, offset, nbytes), sha256 of the .bin, the model/data/settings/versions, tokens.
  --full-out FILE.npy (optional): the full logits, float32 [n_pos, n_vocab] (~200 MB at 1024;
    keep it out of git) for scripts/ref/compare_logits.py.

Usage: scripts/ref/llama_logits.py [-m MODEL] [--data FILE] [-n 1024] [-k 32] [-t 2]
                                    [--out-dir DIR] [--name STEM] [--full-out FILE.npy]
                                    [--flash-attn auto|on|off] [--n-ubatch N] [--kv-type f16|q8_0|q4_0]
(the committed goldens use the defaults)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llamaref as R  # noqa: E402


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def log_softmax_rows(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log_softmax as float64, lse as float64) of each row of float32 logits."""
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return x - lse[:, None], lse


def topk_rows(logits: np.ndarray, k: int) -> np.ndarray:
    """Top-k ids per row by logit descending; ties broken by lower id (stable sort)."""
    out = np.empty((logits.shape[0], k), dtype=np.int32)
    for i, row in enumerate(logits):
        kth = np.partition(row, row.size - k)[row.size - k]  # k-th largest value
        cand = np.nonzero(row >= kth)[0]                      # every id tied with it included
        order = np.lexsort((cand, -row[cand]))                # value desc, then id asc
        out[i] = cand[order[:k]]
    return out


def write_golden(out_dir: str, name: str, tokens: np.ndarray, logits: np.ndarray, k: int, extra: dict,
                 extra_stats: dict | None = None) -> dict:
    """Writes NAME.bin (tokens, top_ids, top_logprobs, lse, top1_logit) and NAME.json (the header,
    with `extra` merged in) under out_dir; returns the header."""
    n, n_vocab = logits.shape
    logp, lse = log_softmax_rows(logits)
    top_ids = topk_rows(logits, k)
    rows = np.arange(n)[:, None]
    top_logprobs = logp[rows, top_ids].astype(np.float32)
    top1_logit = logits[np.arange(n), top_ids[:, 0]].astype(np.float32)
    sections = [
        ("tokens", tokens.astype("<i4")),
        ("top_ids", top_ids.astype("<i4")),
        ("top_logprobs", top_logprobs.astype("<f4")),
        ("lse", lse.astype("<f4")),
        ("top1_logit", top1_logit.astype("<f4")),
    ]
    os.makedirs(out_dir, exist_ok=True)
    bin_path = os.path.join(out_dir, name + ".bin")
    json_path = os.path.join(out_dir, name + ".json")
    table, off = [], 0
    with open(bin_path, "wb") as f:
        for sec, arr in sections:
            raw = np.ascontiguousarray(arr).tobytes()
            f.write(raw)
            table.append({"name": sec, "dtype": {"<i4": "int32", "<f4": "float32"}[arr.dtype.str],
                          "shape": list(arr.shape), "offset": off, "nbytes": len(raw)})
            off += len(raw)
    # Teacher-forced next-token NLL over the whole sequence (a sanity number, not the ppl method).
    nll = -logp[np.arange(n - 1), tokens[1:]]
    header = {
        "format": "chorus-logits-golden-v1",
        "description": "llama.cpp logits for n_pos tokens evaluated as one sequence from position 0. "
                       "Row p = distribution after tokens[0..p] (predicts tokens[p+1]). Sections are "
                       "little-endian, back to back, at the given offsets.",
        "n_pos": int(n), "k": k, "n_vocab": int(n_vocab),
        "endianness": "little",
        "sections": table,
        "bin_file": os.path.basename(bin_path),
        "bin_bytes": off,
        "bin_sha256": sha256_file(bin_path),
        **extra,
        "stats": {"mean_nll_next_token": float(nll.mean()),
                  "ppl_next_token_all_positions": float(np.exp(nll.mean())),
                  "mean_lse": float(lse.mean()), **(extra_stats or {})},
    }
    body = json.dumps(header, indent=1)
    # tokens on one line, last, so the header stays readable.
    body = body[:-2] + ',\n "tokens": ' + json.dumps(tokens.tolist()) + "\n}\n"
    json.loads(body)
    with open(json_path, "w") as f:
        f.write(body)
    print(f"wrote {bin_path} ({off} bytes) and {json_path}", file=sys.stderr)
    return header


def noise_floor(ref: np.ndarray, other: np.ndarray, k: int) -> dict:
    """How far llama.cpp is from itself: KL(ref ‖ other) over the full rows and the lower bound the
    C++ tests compute from a golden (top-k of ref plus one bucket for the rest), and top-1."""
    lp, _ = log_softmax_rows(ref)
    lq, _ = log_softmax_rows(other)
    full = (np.exp(lp) * (lp - lq)).sum(axis=1)
    ids = topk_rows(ref, k)
    rows = np.arange(ref.shape[0])[:, None]
    p_top, q_top = lp[rows, ids], lq[rows, ids]
    lb = (np.exp(p_top) * (p_top - q_top)).sum(axis=1)
    p_rest = 1 - np.exp(p_top).sum(axis=1)
    q_rest = 1 - np.exp(q_top).sum(axis=1)
    ok = (p_rest > 1e-12) & (q_rest > 1e-12)
    lb[ok] += p_rest[ok] * np.log(p_rest[ok] / q_rest[ok])
    return {"kl_full_mean": float(full.mean()), "kl_full_p99": float(np.quantile(full, 0.99)),
            "kl_lower_bound_mean": float(lb.mean()),
            "top1": float((ref.argmax(axis=1) == other.argmax(axis=1)).mean())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=R.DEFAULT_MODEL)
    ap.add_argument("--data", default=R.DEFAULT_DATA, help="text file (default: WikiText-2 test)")
    ap.add_argument("-n", "--n-pos", type=int, default=1024, help="tokens to evaluate (default 1024)")
    ap.add_argument("-k", "--top-k", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--flash-attn", choices=sorted(R.FLASH_ATTN), default="auto")
    ap.add_argument("--n-ubatch", type=int, help="physical batch (default: n_pos, one graph)")
    ap.add_argument("--kv-type", choices=sorted(R.KV_TYPES), default="f16")
    ap.add_argument("--out-dir", default=os.path.join(R.REPO, "tests", "e2e", "testdata"))
    ap.add_argument("--name", default="llamacpp_logits_golden", help="output file stem")
    ap.add_argument("--full-out", help="also write the full logits [n_pos, n_vocab] float32 (.npy, "
                    "or raw little-endian f32 for any other suffix)")
    ap.add_argument("--noise-floor", action="store_true",
                    help="also evaluate with flash attention off and record KL(on ‖ off) in the header")
    ap.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    a = ap.parse_args()

    n, k = a.n_pos, a.top_k
    text = R.read_text(a.data)
    m = R.Model(a.model, n_ctx=n, n_batch=n, n_ubatch=a.n_ubatch or n, n_threads=a.threads,
                kv_type=a.kv_type, flash_attn=a.flash_attn, verbose=a.verbose)
    all_tokens = m.tokenize(text, add_special=True)
    if len(all_tokens) < n:
        sys.exit(f"{a.data} tokenizes to only {len(all_tokens)} tokens (< {n})")
    tokens = all_tokens[:n].astype(np.int32)
    if m.add_bos:
        print("note: model has add_bos_token=true; tokens[0] is BOS", file=sys.stderr)

    t0 = time.perf_counter()
    m.clear()
    n_out = m.decode(tokens, 0, True)
    m.synchronize()
    t_eval = time.perf_counter() - t0
    logits = m.logits(n_out)  # [n, n_vocab] float32
    settings = m.settings()
    m.close()
    if not np.all(np.isfinite(logits)):
        sys.exit("non-finite logits from llama.cpp")
    floor = {}
    if a.noise_floor:
        off = R.Model(a.model, n_ctx=n, n_batch=n, n_ubatch=a.n_ubatch or n, n_threads=a.threads,
                      kv_type=a.kv_type, flash_attn="off", verbose=a.verbose)
        off.clear()
        n_off = off.decode(tokens, 0, True)
        off.synchronize()
        floor = {"noise_floor": {"reference": f"flash_attn {a.flash_attn} vs off", **noise_floor(logits, off.logits(n_off), k)}}
        off.close()

    header = write_golden(a.out_dir, a.name, tokens, logits, k, {
        "model": {"file": os.path.basename(a.model), "sha256": sha256_file(a.model)},
        "data": {"file": os.path.relpath(os.path.abspath(a.data), R.REPO),
                 "sha256": sha256_file(a.data),
                 "tokenization": "llama_tokenize(file bytes minus one trailing newline, add_special=true, "
                                 "parse_special=false); first n_pos tokens",
                 "n_tokens_in_file": int(len(all_tokens))},
        "llama_cpp": {**R.versions(), **settings, "n_decode_calls": 1, "kv_cache": "fresh"},
        "command": "scripts/ref/llama_logits.py " + " ".join(sys.argv[1:]),
        **floor,
    }, {"eval_seconds": round(t_eval, 3)})

    if a.full_out:
        d = os.path.dirname(os.path.abspath(a.full_out))
        os.makedirs(d, exist_ok=True)
        if a.full_out.endswith(".npy"):
            np.save(a.full_out, logits.astype("<f4"))
        else:
            logits.astype("<f4").tofile(a.full_out)
        print(f"wrote {a.full_out} ({logits.shape[0]} x {logits.shape[1]} f32)", file=sys.stderr)

    print(json.dumps({"n_pos": n, "k": k, "bin_bytes": header["bin_bytes"], **header["stats"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
