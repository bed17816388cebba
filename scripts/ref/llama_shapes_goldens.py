#!/usr/bin/env python3
"""llama.cpp goldens for the llama family's shapes on random-weight GGUFs.

build/tests/e2e/write_test_models DIR writes the GGUFs of tests/model/synthetic_model.h
(LlamaFamilyShapes: Llama 3.x head_dim 64 / GQA 4:1 and head_dim 128 / GQA 8:1 with Llama 3.1's
rope_freqs, Qwen 2.5 with QKV biases and tied output, Mistral head_dim 128, linear RoPE scaling);
each is evaluated by llama.cpp (llama-cpp-python, low-level API) on N fixed token ids as one
sequence from position 0, flash attention auto (the golden) and off (the noise floor).

Writes tests/e2e/testdata/shapes/NAME.{bin,json} (format of scripts/ref/llama_logits.py; the header
adds model.fnv1a of the GGUF bytes and noise_floor), read by tests/e2e/llama_shapes_test.cc.

Usage: scripts/ref/llama_shapes_goldens.py [--writer build/tests/e2e/write_test_models] [-n 128] [-t 2]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llamaref as R  # noqa: E402
from llama_logits import noise_floor, write_golden  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writer", default=os.path.join(R.REPO, "build", "tests", "e2e", "write_test_models"))
    ap.add_argument("-n", "--n-pos", type=int, default=128)
    ap.add_argument("-k", "--top-k", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--out-dir", default=os.path.join(R.REPO, "tests", "e2e", "testdata", "shapes"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        lines = subprocess.run([a.writer, tmp], check=True, capture_output=True, text=True).stdout.split("\n")
        for line in filter(None, lines):
            name, path, fnv = line.split()
            runs = {}
            for fa in ("auto", "off"):
                m = R.Model(path, n_ctx=a.n_pos, n_batch=a.n_pos, n_threads=a.threads, flash_attn=fa)
                n_vocab = m.n_vocab
                # Fixed ids over the whole vocabulary except <unk>/<s>/</s>, no BOS: a deterministic
                # pseudo-random walk so every position sees a different context.
                tokens = ((np.arange(a.n_pos, dtype=np.int64) * 7919 + 17) % (n_vocab - 3) + 3).astype(np.int32)
                m.clear()
                n_out = m.decode(tokens, 0, True)
                m.synchronize()
                runs[fa] = m.logits(n_out)
                settings = m.settings()
                m.close()
            floor = noise_floor(runs["auto"], runs["off"], a.top_k)
            write_golden(a.out_dir, name, tokens, runs["auto"], a.top_k, {
                "model": {"file": name + ".gguf", "fnv1a": fnv,
                          "generator": "tests/model/synthetic_model.h (write_test_models)"},
                "llama_cpp": {**R.versions(), **settings},
                "noise_floor": {"reference": "flash_attn auto vs off", **floor},
                "command": "scripts/ref/llama_shapes_goldens.py " + " ".join(sys.argv[1:]),
            })
            print(f"{name}: noise floor {floor}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
