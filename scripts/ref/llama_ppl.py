#!/usr/bin/env python3
"""Perplexity exactly as llama.cpp's `llama-perplexity -c N_CTX -b N_CTX` computes it.

Method (tools/perplexity/perplexity.cpp, perplexity()):
  * read the file as `-f` does (raw bytes, one trailing '\\n' dropped) and tokenize it whole:
    llama_tokenize(add_special=true, parse_special=false). SmolLM2 has add_bos_token=false,
    so no BOS anywhere.
  * n_chunk = n_tokens // n_ctx non-overlapping chunks (the tail is dropped; --chunks caps it;
    at least 2*n_ctx tokens are required).
  * each chunk is evaluated from a cleared KV cache, positions 0..n_ctx-1, in one
    llama_decode; if the model has add_bos, the chunk's FIRST token is REPLACED by BOS (not
    prepended), as llama-perplexity does.
  * only the second half is scored: first = n_ctx/2; the logits at positions
    j = first .. n_ctx-2 predict token j+1, i.e. n_ctx - first - 1 tokens per chunk
    (255 at n_ctx 512).
  * nll = -(logit[tok] - max - log(sum_v expf(logit[v] - max))) (max in f32, sum in f64).
    PPL = exp(mean nll); the printed "+/-" is ppl * sqrt((mean(nll^2) - mean(nll)^2)/(count-1)).
  * the running value after chunk i is exp(sum nll / count) over chunks 1..i (llama.cpp's
    "[i]ppl," line; printed here on stderr).
llama-perplexity's default -b 2048 packs 4 chunks of 512 into one batch as 4 sequences;
that changes only the batching, not the math. Here n_batch = n_ubatch = n_ctx.

Usage: scripts/ref/llama_ppl.py [-m MODEL] [-f FILE] [-c 512] [-t 2] [--chunks N] [--json]
                                [--kv-type f16|q8_0|q4_0] [--nll-out FILE.npy]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llamaref as R  # noqa: E402


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-row -log_softmax(row)[target], computed the way llama.cpp's log_softmax() does."""
    mx = logits.max(axis=1, keepdims=True)                                   # float32
    sum_exp = np.exp(logits - mx).astype(np.float64).sum(axis=1)             # expf, f64 sum
    tgt = logits[np.arange(len(targets)), targets].astype(np.float64)
    return -(tgt - mx[:, 0].astype(np.float64) - np.log(sum_exp))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=R.DEFAULT_MODEL)
    ap.add_argument("-f", "--file", "--data", dest="file", default=R.DEFAULT_DATA)
    ap.add_argument("-c", "--ctx-size", type=int, default=512, help="n_ctx per chunk (default 512)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=-1, help="max chunks (default: all)")
    ap.add_argument("--kv-type", choices=sorted(R.KV_TYPES), default="f16")
    ap.add_argument("--flash-attn", choices=sorted(R.FLASH_ATTN), default="auto")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--nll-out", help="write the per-scored-token NLL (float64, chunk-major) as .npy")
    ap.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    a = ap.parse_args()

    n_ctx = a.ctx_size
    first = n_ctx // 2
    t_start = time.perf_counter()
    m = R.Model(a.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=a.threads,
                kv_type=a.kv_type, flash_attn=a.flash_attn, verbose=a.verbose)
    t0 = time.perf_counter()
    tokens = m.tokenize(R.read_text(a.file), add_special=True)
    t_tok = time.perf_counter() - t0
    if len(tokens) < 2 * n_ctx:
        sys.exit(f"need at least {2 * n_ctx} tokens for n_ctx {n_ctx}; {a.file} has {len(tokens)}")
    n_chunk_max = len(tokens) // n_ctx
    n_chunk = n_chunk_max if a.chunks < 0 else min(a.chunks, n_chunk_max)
    print(f"llama_ppl: {len(tokens)} tokens (tokenized in {t_tok:.2f} s), {n_chunk} chunks of {n_ctx}, "
          f"scoring {n_ctx - first - 1} tokens/chunk, {a.threads} threads, kv {a.kv_type}, "
          f"add_bos={m.add_bos}", file=sys.stderr)

    want = np.arange(n_ctx) >= first
    nll_sum = nll2_sum = 0.0
    count = 0
    running = []
    all_nll = []
    t_eval0 = time.perf_counter()
    for i in range(n_chunk):
        start = i * n_ctx
        chunk = tokens[start:start + n_ctx].copy()
        if m.add_bos:
            chunk[0] = m.bos
        m.clear()
        n_out = m.decode(chunk, 0, want)              # outputs rows for positions first..n_ctx-1
        logits = m.logits(n_out)[: n_ctx - 1 - first]  # positions first..n_ctx-2
        targets = tokens[start + first + 1: start + n_ctx]  # original tokens (BOS never scored)
        nll = token_nll(logits, targets)
        nll_sum += float(nll.sum())
        nll2_sum += float((nll * nll).sum())
        count += len(nll)
        running.append(math.exp(nll_sum / count))
        if a.nll_out:
            all_nll.append(nll)
        if i == 0:
            dt = time.perf_counter() - t_eval0
            print(f"llama_ppl: {dt:.2f} seconds per pass - ETA {dt * n_chunk / 60:.2f} minutes",
                  file=sys.stderr)
        print(f"[{i + 1}]{running[-1]:.4f},", end="" if (i + 1) % 10 else "\n", file=sys.stderr,
              flush=True)
    print("", file=sys.stderr)
    t_eval = time.perf_counter() - t_eval0
    settings = m.settings()
    m.close()

    mean = nll_sum / count
    ppl = math.exp(mean)
    var = nll2_sum / count - mean * mean
    stderr = ppl * math.sqrt(var / (count - 1)) if var > 0 else float("nan")
    print(f"Final estimate: PPL = {ppl:.4f} +/- {stderr:.5f}", file=sys.stderr)
    print(f"llama_ppl: {n_chunk * n_ctx} tokens evaluated in {t_eval:.1f} s "
          f"({n_chunk * n_ctx / t_eval:.1f} tokens/s), total {time.perf_counter() - t_start:.1f} s",
          file=sys.stderr)
    if a.nll_out:
        np.save(a.nll_out, np.concatenate(all_nll))

    res = {
        "ppl": ppl, "ppl_stderr": stderr, "mean_nll": mean,
        "n_ctx": n_ctx, "first": first, "n_chunks": n_chunk, "n_chunks_max": n_chunk_max,
        "n_tokens_file": int(len(tokens)), "n_tokens_scored": count,
        "seconds_eval": round(t_eval, 2), "seconds_total": round(time.perf_counter() - t_start, 2),
        "file": os.path.relpath(os.path.abspath(a.file), R.REPO),
        "model": os.path.basename(a.model),
        "running_ppl": [round(x, 4) for x in running],
        "llama_cpp": {**R.versions(), **settings},
        "command": "scripts/ref/llama_ppl.py " + " ".join(sys.argv[1:]),
    }
    if a.json:
        print(json.dumps(res))
    else:
        print(f"PPL = {ppl:.4f} +/- {stderr:.5f}  ({n_chunk} chunks x {n_ctx}, {count} tokens scored, "
              f"{t_eval:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
