#!/usr/bin/env python3
"""Reference oracle for chorus's sentence encoder (src/encoder/): all-MiniLM-L6-v2.

Token ids come from HF `tokenizers` (the Rust BertTokenizerFast pipeline, loaded from the model's
tokenizer.json; padding off, truncation to sentence_bert_config.json max_seq_length = 256). The
embedding is a float64 numpy BERT written from the HF BertModel definition: word + position +
token-type-0 embeddings → LayerNorm → 6 post-LN layers (12-head self-attention, erf-GELU FFN) →
mean over all tokens (modules.json: Pooling mean_tokens) → L2 normalize (modules.json: Normalize).
Weights are read with the `safetensors` package (numpy backend), not chorus's reader.

  pip install tokenizers safetensors numpy
  scripts/ref/minilm_ref.py [--model models/all-MiniLM-L6-v2] [--valid ../shared/data/wikitext-2/valid.txt]
                            [--n-wiki 240] [--out tests/encoder/testdata]

Writes OUT/minilm_goldens.jsonl ({"text", "ids"} per line, one per sentence),
OUT/minilm_embeddings.f16 (float16 little-endian, n_sentences x 384, in the same order) and
OUT/minilm_unicode_ids.jsonl (token ids only, for --n-unicode seeded random strings drawn from many
scripts, symbols, marks, controls, private-use and unassigned code points). --only-unicode writes just
the last one (no forward pass).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

EDGE_CASES = [
    "",
    "   \t  ",
    "!!!...???",
    "Crème brûlée à la française, naïve café, Ångström, façade.",
    "北京是中国的首都。",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.",
    "Emoji 😀🚀 test 👍🏽 and ❤️ hearts",
    "Москва — столица России.",
    "Ελληνικά: ΟΔΟΣ και οδός.",
    "İstanbul ǅ ẞ ﬁ ＡＢＣ full-width",
    "tabs\tand\nnewlines\r\n and\u00a0no-break\u2028spaces",
    "control\u0000chars\u0007here\u200b and\u200dzero-width \ufeffBOM \ufffdreplacement",
    "[CLS] special [SEP] tokens [MASK] and [unk] [PAD]x",
    "a" * 150,
    "word " + "b" * 101 + " and " + "c" * 100,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "$100,000.00 @user #hashtag http://example.com/a?b=c&d=e_f~g",
    "x\u0301\u0327y combining marks ǹ",
    "“smart quotes” — and… ellipsis ¿que? ¡si!",
    "العربية ٣ numbers ۴",
    "ok",
]


def layer_norm(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def erf(x):
    return np.vectorize(math.erf)(x)


class Bert:
    def __init__(self, model_dir):
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        assert cfg["model_type"] == "bert" and cfg["hidden_act"] == "gelu"
        self.cfg = cfg
        self.w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()
                  if v.dtype != np.int64}
        pool = json.load(open(os.path.join(model_dir, "1_Pooling", "config.json")))
        assert pool["pooling_mode_mean_tokens"] and not pool["pooling_mode_cls_token"]
        mods = [m["type"] for m in json.load(open(os.path.join(model_dir, "modules.json")))]
        assert mods[-1].endswith("Normalize"), mods

    def embed(self, ids):
        w, c = self.w, self.cfg
        H, nh, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
        hd = H // nh
        n = len(ids)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n] + \
            w["embeddings.token_type_embeddings.weight"][0]
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        lin = lambda t, p: t @ w[p + ".weight"].T + w[p + ".bias"]
        for i in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q = lin(x, p + "attention.self.query").reshape(n, nh, hd).transpose(1, 0, 2)
            k = lin(x, p + "attention.self.key").reshape(n, nh, hd).transpose(1, 0, 2)
            v = lin(x, p + "attention.self.value").reshape(n, nh, hd).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(1, 0, 2).reshape(n, H)
            x = layer_norm(x + lin(ctx, p + "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                           w[p + "attention.output.LayerNorm.bias"], eps)
            h = lin(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
            x = layer_norm(x + lin(h, p + "output.dense"), w[p + "output.LayerNorm.weight"],
                           w[p + "output.LayerNorm.bias"], eps)
        e = x.mean(0)
        return e / max(np.linalg.norm(e), 1e-12)


def wiki_sentences(path, n, seed=7):
    """Sentences of WikiText-2 valid (article text lines split at ' . '), varied lengths, plus a few
    whole paragraphs longer than 256 tokens (they exercise truncation)."""
    lines = [l.strip() for l in open(path, encoding="utf-8") if l.strip() and not l.strip().startswith("=")]
    sents = []
    for l in lines:
        for s in l.split(" . "):
            s = s.strip()
            if len(s) > 3:
                sents.append(s if s.endswith(".") else s + " .")
    rng = random.Random(seed)
    picked = rng.sample(sents, n)
    longest = sorted(lines, key=len)[-3:]
    return picked + longest


# Blocks the random strings draw from (plus ASCII letters, spaces and punctuation between them).
UNICODE_BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
                  (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1E00, 0x1FFF), (0x2000, 0x206F),
                  (0x20A0, 0x22FF), (0x2460, 0x24FF), (0x3000, 0x30FF), (0x3400, 0x3500), (0x4E00, 0x9FFF),
                  (0xAC00, 0xD7A3), (0xE000, 0xE0FF), (0xF900, 0xFAFF), (0xFB00, 0xFB4F), (0xFE00, 0xFE6F),
                  (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0x2B820, 0x2B930),
                  (0xE0000, 0xE007F), (0x0, 0x1F), (0x7F, 0x9F)]


def unicode_strings(n, seed=5):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = "".join(chr(rng.randint(*rng.choice(UNICODE_BLOCKS))) if rng.random() < 0.6 else rng.choice(" abcXYZ.,")
                    for _ in range(rng.randint(1, 30)))
        out.append(s)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--valid", default=os.path.join(REPO, "..", "shared", "data", "wikitext-2", "valid.txt"))
    ap.add_argument("--n-wiki", type=int, default=240)
    ap.add_argument("--n-unicode", type=int, default=800)
    ap.add_argument("--only-unicode", action="store_true")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "encoder", "testdata"))
    a = ap.parse_args()
    max_len = json.load(open(os.path.join(a.model, "sentence_bert_config.json")))["max_seq_length"]
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_len)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "minilm_unicode_ids.jsonl"), "w", encoding="utf-8") as f:
        for t in unicode_strings(a.n_unicode):
            f.write(json.dumps({"text": t, "ids": tok.encode(t).ids}) + "\n")
    if a.only_unicode:
        return
    bert = Bert(a.model)
    texts = EDGE_CASES + wiki_sentences(a.valid, a.n_wiki)
    embs = []
    with open(os.path.join(a.out, "minilm_goldens.jsonl"), "w", encoding="utf-8") as f:
        for t in texts:
            ids = tok.encode(t).ids
            embs.append(bert.embed(ids))
            f.write(json.dumps({"text": t, "ids": ids}, ensure_ascii=False) + "\n")
    np.asarray(embs, dtype="<f2").tofile(os.path.join(a.out, "minilm_embeddings.f16"))
    lens = [len(tok.encode(t).ids) for t in texts]
    print(f"{len(texts)} texts, tokens min/mean/max {min(lens)}/{sum(lens) / len(lens):.1f}/{max(lens)}, "
          f"{sum(lens)} in all -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
