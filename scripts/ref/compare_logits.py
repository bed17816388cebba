#!/usr/bin/env python3
"""Compare full logits from two engines: KL(ref || ours), top-1 agreement. Prints JSON.

  scripts/ref/compare_logits.py REF OURS [--golden GOLDEN.json] [--n-vocab 49152]
                                [--max-kl-mean X] [--min-top1 Y]

REF, OURS: [n_pos, n_vocab] float32 logits, either .npy or raw little-endian f32 (any other
  suffix; n_pos = size / n_vocab). REF is normally llama.cpp's dump from
  `scripts/ref/llama_logits.py --full-out ref.npy`; OURS is chorus's
  `chorus eval logits -m MODEL -f FILE -n 1024 --out ours.f32`. If the row counts differ,
  the first min(n_pos) rows are compared (and that is reported).

REF may instead be the top-k golden header (tests/e2e/testdata/llamacpp_logits_golden.json):
  then only what top-k allows is computed: top-1 agreement, max |logprob diff| on the
  reference's top-k ids, and a lower bound on KL (the top-k ids plus one bucket for the rest).

Per position p (row p is the distribution predicting token p+1):
  KL_p = sum_v P(v) (log P(v) - log Q(v)),  P = softmax(ref row), Q = softmax(ours row),
  computed in float64 from the full rows. Reported: mean, median, p99, max (and where).
  top1_agree = fraction of rows with argmax(ref) == argmax(ours).
  With --golden (or a golden REF) the input tokens are known, so the teacher-forced
  next-token NLL / PPL of both over all positions is reported too.
--max-kl-mean / --min-top1: exit 1 if the measured value is worse (for CI/tests).
--split P: also report the KL statistics and top-1 of rows [0, P) and [P, n) apart (e.g. P = 512,
  a sliding window's length: the positions past it are where windowed attention differs).
--n-vocab: row length of raw f32 files; when REF is a .npy its row length is used instead.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np


def load_logits(path: str, n_vocab: int) -> np.ndarray:
    if path.endswith(".npy"):
        a = np.load(path, mmap_mode="r")
        if a.ndim != 2:
            sys.exit(f"{path}: expected a 2-D array, got shape {a.shape}")
        return a
    size = os.path.getsize(path)
    if size % (4 * n_vocab):
        sys.exit(f"{path}: {size} bytes is not a multiple of n_vocab*4 = {4 * n_vocab}")
    return np.memmap(path, dtype="<f4", mode="r", shape=(size // (4 * n_vocab), n_vocab))


def load_golden(path: str) -> dict:
    with open(path) as f:
        h = json.load(f)
    binp = os.path.join(os.path.dirname(os.path.abspath(path)), h["bin_file"])
    raw = open(binp, "rb").read()
    out = {"header": h}
    for s in h["sections"]:
        dt = {"int32": "<i4", "float32": "<f4"}[s["dtype"]]
        out[s["name"]] = np.frombuffer(raw, dtype=dt, count=int(np.prod(s["shape"])),
                                       offset=s["offset"]).reshape(s["shape"])
    return out


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))


def stats(v: np.ndarray, prefix: str) -> dict:
    return {f"{prefix}_mean": float(v.mean()), f"{prefix}_median": float(np.median(v)),
            f"{prefix}_p99": float(np.percentile(v, 99)), f"{prefix}_max": float(v.max()),
            f"{prefix}_max_pos": int(v.argmax())}


def compare_full(ref: np.ndarray, ours: np.ndarray, tokens, chunk: int = 64, split: int = 0) -> dict:
    n = min(ref.shape[0], ours.shape[0])
    kl = np.empty(n)
    agree = np.empty(n, dtype=bool)
    max_abs = 0.0
    nll_ref, nll_ours = [], []
    for s in range(0, n, chunk):
        r = np.asarray(ref[s:s + chunk], dtype=np.float32)
        o = np.asarray(ours[s:s + chunk], dtype=np.float32)
        if not np.all(np.isfinite(o)):
            bad = s + int(np.nonzero(~np.isfinite(o).all(axis=1))[0][0])
            sys.exit(f"non-finite logits in OURS at row {bad}")
        lr, lo = log_softmax(r), log_softmax(o)
        kl[s:s + len(r)] = (np.exp(lr) * (lr - lo)).sum(axis=1)
        agree[s:s + len(r)] = r.argmax(axis=1) == o.argmax(axis=1)
        max_abs = max(max_abs, float(np.abs(r.astype(np.float64) - o).max()))
        if tokens is not None:
            for i in range(len(r)):
                p = s + i
                if p + 1 < len(tokens):
                    nll_ref.append(-lr[i, tokens[p + 1]])
                    nll_ours.append(-lo[i, tokens[p + 1]])
    kl = np.maximum(kl, 0.0)  # tiny negative values are rounding
    out = {"mode": "full", "n_pos": n, "n_vocab": int(ref.shape[1]), **stats(kl, "kl"),
           "top1_agree": float(agree.mean()), "top1_agree_count": int(agree.sum()),
           "max_abs_logit_diff": max_abs}
    if 0 < split < n:
        for name, sl in (("before_split", slice(0, split)), ("from_split", slice(split, n))):
            out[name] = {"rows": [sl.start, sl.stop], **stats(kl[sl], "kl"), "top1_agree": float(agree[sl].mean())}
    if nll_ref:
        out["ppl_ref_next_token"] = float(np.exp(np.mean(nll_ref)))
        out["ppl_ours_next_token"] = float(np.exp(np.mean(nll_ours)))
    return out


def compare_golden(g: dict, ours: np.ndarray) -> dict:
    ids, lp_ref = g["top_ids"], g["top_logprobs"].astype(np.float64)
    n = min(ids.shape[0], ours.shape[0])
    kl_lb = np.empty(n)
    agree = np.empty(n, dtype=bool)
    max_lp = 0.0
    tokens = g["tokens"]
    nll_ours = []
    for p in range(n):
        lo = log_softmax(np.asarray(ours[p:p + 1], dtype=np.float32))[0]
        lq = lo[ids[p]]
        pr = np.exp(lp_ref[p])
        rest_p = max(1.0 - pr.sum(), 0.0)
        rest_q = max(1.0 - np.exp(lq).sum(), 1e-300)
        kl_lb[p] = (pr * (lp_ref[p] - lq)).sum() + (rest_p * np.log(rest_p / rest_q) if rest_p > 0 else 0.0)
        agree[p] = int(np.argmax(lo)) == int(ids[p, 0])
        max_lp = max(max_lp, float(np.abs(lp_ref[p] - lq).max()))
        if p + 1 < len(tokens):
            nll_ours.append(-lo[tokens[p + 1]])
    return {"mode": "golden-topk", "n_pos": n, "k": int(ids.shape[1]),
            **stats(np.maximum(kl_lb, 0.0), "kl_lower_bound"),
            "top1_agree": float(agree.mean()), "top1_agree_count": int(agree.sum()),
            "max_abs_logprob_diff_topk": max_lp,
            "ppl_ref_next_token": g["header"].get("stats", {}).get("ppl_next_token_all_positions"),
            "ppl_ours_next_token": float(np.exp(np.mean(nll_ours))) if nll_ours else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ref", help="reference logits (.npy / raw f32) or golden header (.json)")
    ap.add_argument("ours", help="our logits (.npy / raw f32)")
    ap.add_argument("--golden", help="golden header .json (for the input tokens -> next-token ppl)")
    ap.add_argument("--n-vocab", type=int, default=49152, help="row length of raw f32 files")
    ap.add_argument("--max-kl-mean", type=float, help="fail (exit 1) if mean KL exceeds this")
    ap.add_argument("--min-top1", type=float, help="fail (exit 1) if top-1 agreement is below this")
    ap.add_argument("--split", type=int, default=0, help="also report rows [0, P) and [P, n) apart")
    a = ap.parse_args()

    if a.ref.endswith(".npy"):
        a.n_vocab = int(np.load(a.ref, mmap_mode="r").shape[1])
    ours = load_logits(a.ours, a.n_vocab)
    if a.ref.endswith(".json"):
        g = load_golden(a.ref)
        if ours.shape[1] != g["header"]["n_vocab"]:
            sys.exit(f"n_vocab mismatch: ours {ours.shape[1]} vs golden {g['header']['n_vocab']}")
        res = compare_golden(g, ours)
        n_ref = g["top_ids"].shape[0]
        kl_key = "kl_lower_bound_mean"
    else:
        ref = load_logits(a.ref, a.n_vocab)
        if ref.shape[1] != ours.shape[1]:
            sys.exit(f"n_vocab mismatch: ref {ref.shape[1]} vs ours {ours.shape[1]}")
        tokens = load_golden(a.golden)["tokens"] if a.golden else None
        res = compare_full(ref, ours, tokens, split=a.split)
        n_ref = ref.shape[0]
        kl_key = "kl_mean"
    res["n_pos_ref"], res["n_pos_ours"] = int(n_ref), int(ours.shape[0])
    res["ref"], res["ours"] = a.ref, a.ours

    ok = True
    if a.max_kl_mean is not None and res[kl_key] > a.max_kl_mean:
        ok = False
    if a.min_top1 is not None and res["top1_agree"] < a.min_top1:
        ok = False
    res["pass"] = ok
    print(json.dumps(res, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
