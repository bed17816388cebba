#!/usr/bin/env python3
"""Tokenizer goldens from llama.cpp (via llama-cpp-python) for tests/model/tokenizer_test.cc.

Writes tests/model/testdata/tokenizer_golden.jsonl, one JSON object per line:
  {"text": str, "special": bool, "ids": [int, ...]}                 SmolLM2's own pre ("smollm")
  {"pre": "llama-bpe", "text": ..., "special": ..., "ids": [...]}   same vocab, other pre-tokenizer
The "pre" lines come from copies of the model's metadata (no tensors) with tokenizer.ggml.pre
replaced, loaded vocab-only, so the other regex cascades are checked against llama.cpp too.
Also writes tests/model/testdata/tokenizer_golden_gemma3.jsonl: the same texts (plus Gemma's turn
markers) on Gemma 3's SentencePiece vocab (models/gemma-3-270m-q4_k_m.gguf, --gemma-model), same
line format, and a first line {"wikitext_test_tokens": N} = llama.cpp's count for the whole
wikitext-2/test.txt read as -f reads it (add_special=true).
ids never include BOS (add_bos=False). Deterministic: fixed seeds, fixed sampling.

Usage: python3 scripts/ref_tokenizer_goldens.py [--model PATH] [--wikitext DIR] [--out PATH]
Needs: pip install llama-cpp-python gguf
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile

try:
    import llama_cpp
except ImportError:
    sys.exit("llama-cpp-python is not installed: pip install llama-cpp-python")
import gguf

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_WIKITEXT = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "wikitext-2"))
DEFAULT_OUT = os.path.join(REPO, "tests", "model", "testdata", "tokenizer_golden.jsonl")
DEFAULT_GEMMA = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
DEFAULT_GEMMA_OUT = os.path.join(REPO, "tests", "model", "testdata", "tokenizer_golden_gemma3.jsonl")
GEMMA_SPECIAL = [
    "<start_of_turn>user\nHello, who are you?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<start_of_turn>", "<end_of_turn>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused0>", "<unused6241>",
    "[multimodal]", "<start_of_image>", "<end_of_image>", "text<end_of_turn>more", " <start_of_turn> spaced ",
    "almost <start_of_turn special", "<<start_of_turn>>", "\n\n\n\n  \t\t  \n", "<b>bold</b> <html>", "</s>", "a</s>b", "<s>x</s>",
]
OTHER_PRES = ["gpt-2", "llama-bpe", "default", "qwen2"]

CODE = [
    "#include <vector>\n\nint main(int argc, char** argv) {\n  std::vector<int> v{1, 2, 3};\n"
    "  for (auto& x : v) x *= 2;\n  return v.size() > 2 ? 0 : 1;\n}\n",
    "template <typename T>\nT Max(const T& a, const T& b) { return a < b ? b : a; }\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\n"
    "print([fib(i) for i in range(10)])\n",
    "class Foo:\n    def __init__(self, x: int = 0) -> None:\n        self.x = x  # comment\n\n"
    "    def __repr__(self):\n        return f\"Foo({self.x!r})\"\n",
    "if x:\n\tif y:\n\t\treturn 1\n\telse:\n\t\treturn 2\n",
    "\tindented_with_tab = True\n\t\ttwo_tabs = [\n\t\t\t'a',\n\t\t]\n",
    "{\"name\": \"chorus\", \"version\": [0, 1, 2], \"ok\": true, \"nested\": {\"k\": null}}",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%smith%' ORDER BY id DESC;",
    "for f in *.txt; do\n  echo \"$f\" | sed -e 's/a/b/g' >> out.log 2>&1\ndone",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![0xFF; 16];\n    Ok(())\n}",
    "x = a->b; y = c::d; z = e?.f ?? g; w = h!== i; k = l <=> m; n <<= 2; o >>>= 3;",
    "    \n    \n\n    return;\n",
    "// TODO(someone): fix this\n/* multi\n * line\n */\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "const re = /^(?:\\d{3}-)?\\d{4}$/gi; console.log(`value: ${re.test('555-1234')}`);",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\nprint(arr.shape, arr[1:, ::2])\n",
]

UNICODE = [
    "日本語のテキストです。東京は大きい都市です。",
    "中文分词测试：我们今天去公园散步，天气很好！",
    "한국어 문장입니다. 안녕하세요, 반갑습니다.",
    "Ça va? L'élève a mangé une crème brûlée à Noël. Über Straße, größer, Ærø, Øresund.",
    "Tiếng Việt có nhiều dấu: Hà Nội, Sài Gòn, người, được, những.",
    "مرحبا بالعالم، هذا نص عربي للاختبار.",
    "שלום עולם! זהו טקסט בעברית.",
    "Mixed RTL: hello مرحبا world שלום 123 ٣٤٥",
    "e\u0301 a\u0300 o\u0308 n\u0303 — combining marks: Z\u0351\u0362a\u035flg\u0310o",
    "हिन्दी में लिखा गया वाक्य। नमस्ते दुनिया।",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Ελληνικά: Καλημέρα κόσμε. Русский: Привет, мир! Українська: Ґанок, їжак, є.",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍🚀 ❤️‍🔥 🇯🇵🇺🇸 #️⃣ 1️⃣",
    "ZWJ family👨‍👨‍👧 and a flag🏴‍☠️ in text, then 🤷‍♀️?",
    "Math: ∀x∈ℝ, ∃y: x² + y² ≤ 1; ∑ᵢ aᵢ = ∞; √2 ≈ 1.414; ½ + ¼ = ¾; Ⅻ",
    "Currency: €100, £50, ¥1000, ₹500, $20.00, ₿0.5",
    "Whitespace oddities: a\u00a0b\u3000c\u2028d\u2029e\u0085f\u200bg\ufeffh\u2009i\u202fj",
    "Fullwidth: ＡＢＣ１２３！？ and halfwidth ｶﾀｶﾅ",
    "Quotes: “smart” ‘single’ «guillemets» „German“ — em dash – en dash … ellipsis",
    "Box: ┌──┐│  │└──┘ Braille: ⠓⠑⠇⠇⠕ Music: 𝄞 Old Italic: 𐌀𐌁 Math bold: 𝐀𝐁𝐂",
    "control chars: a\x04b\x06c\x13d\x14e\x16f\x1dg\x01h\x7fi",
    "Tab\tseparated\tvalues\t\t\tand CR\r\nline endings\r\n\r\n",
]

SPECIAL = [
    "<|im_start|>user\nHello, who are you?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_end|><|im_end|>",
    "text<|endoftext|>more text", " <|im_start|> spaced <|im_end|> ",
    "<repo_name>chorus<file_sep>src/main.cc<filename>x<gh_stars>10",
    "<issue_start>bug<issue_comment>fixed<issue_closed>",
    "<jupyter_start><jupyter_text>hi<jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<jupyter_script>", "<reponame>", "almost <|im_start| special", "<|im_start|<|im_end|>>",
    "<<|im_start|>>", "<|IM_START|>", "plain text without special tokens",
]

WORDS = ["the", "The", "THE", "hello", "world", "don't", "I'm", "we're", "they've", "she'll",
         "he'd", "it's", "IT'S", "We'RE", "'s", "'t", "''", "'", "rock'n'roll", "O'Neil",
         "naïve", "café", "日本", "😀", "👨‍👩‍👧", "42", "3.14159", "-7", "1,234,567", "0x1F",
         "1e-9", "٣٤٥", "１２３", "²", "½", "Ⅻ", "@", "#", "$", "%", "^^", "&&", "||", "...",
         "—", "«", "»", "(", ")", "[", "]", "{", "}", "<", ">", "=", "==", "!=", "=>",
         "\\", "/", "//", "*", "**", "_", "__init__", "foo_bar", "camelCase", "x86_64",
         "a\u0301", "\u0301", "e\u0308", "ℝ", "∑", "€", "<|im_start|>", "<|im_end|>", "<s>"]
SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", " \n", "\n ", " \t ",
          "\r\n", "\u00a0", "\u3000", "", "", "", "", ""]


def whitespace_cases() -> list[str]:
    out = []
    units = [" ", "\t", "\n", "\r", "\u00a0", "\u2003", "\u0085", "\u3000"]
    rng = random.Random(7)
    for n in [1, 2, 3, 4, 5, 8, 16, 33]:
        for u in units[:4]:
            out.append(u * n)
            out.append("word" + u * n + "word")
            out.append(u * n + "x")
            out.append("x" + u * n)
            out.append(u * n + "1")
            out.append(u * n + "!")
    for _ in range(60):
        s = "".join(rng.choice(units) for _ in range(rng.randint(1, 12)))
        out.append(rng.choice(["", "a", "1", ".", "é", "😀"]) + s + rng.choice(["", "b", "2", ",", "ß"]))
    return out


def number_cases() -> list[str]:
    rng = random.Random(11)
    out = ["0", "7", "42", "123", "1234", "12345", "123456789", "9" * 50, "3.14159265358979",
           "1,000,000", "1.000.000,50", "-12", "+1 (555) 123-4567", "2024-01-31", "10:45:30",
           "v1.2.3", "1st 2nd 3rd 4th", "x1y22z333", "a1b2c3", "১২৩", "١٢٣٤", "一二三", "Ⅷ",
           "³⁄₄", "0.5e10", "100%", "$1.99", "#1", "1/2", "1:1", "1-1", "[1]", "(2)"]
    for _ in range(40):
        out.append(str(rng.randint(0, 10 ** rng.randint(1, 40))))
    return out


def contraction_cases() -> list[str]:
    base = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
    out = []
    for c in base:
        for w in ["it", "IT", "we", "x", "", " "]:
            out.append(w + c)
            out.append(w + c.upper())
            out.append(w + c + "x")
            out.append(w + c + " ok")
    out += ["I'd've", "y'all'd've", "'''s", "' s", "''", "''''", "don’t (curly)", "it`s"]
    return out


def random_mixes(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pool = WORDS + [c[:40] for c in CODE] + [u[:30] for u in UNICODE]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 14)):
            parts.append(rng.choice(pool))
            parts.append(rng.choice(SPACES))
        out.append("".join(parts))
    return out


def wikitext_cases(wikitext_dir: str) -> list[str]:
    out = []
    for name, n_lines, n_chunks, seed in [("test.txt", 800, 40, 1), ("valid.txt", 400, 20, 2)]:
        path = os.path.join(wikitext_dir, name)
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        rng = random.Random(seed)
        nonempty = [l for l in lines if l.strip() and len(l) < 2000]
        out += rng.sample(nonempty, min(n_lines, len(nonempty)))
        for _ in range(n_chunks):  # consecutive lines: blank lines, headings, newline runs
            i = rng.randrange(len(lines) - 6)
            out.append("".join(lines[i:i + rng.randint(2, 6)])[:3000])
    return out


def make_vocab_only_copy(src: str, pre: str, dst: str) -> None:
    """Copy src's metadata (no tensors) to dst with tokenizer.ggml.pre = pre."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = pre if key == "tokenizer.ggml.pre" else field.contents()
        vtype = gguf.GGUFValueType(field.types[0])
        sub = gguf.GGUFValueType(field.types[1]) if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tokenize_all(model_path: str, cases: list[tuple[str, bool]]) -> list[list[int]]:
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    return [llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
            for text, special in cases]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--wikitext", default=DEFAULT_WIKITEXT, help="folder with test.txt, valid.txt")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--gemma-model", default=DEFAULT_GEMMA)
    ap.add_argument("--gemma-out", default=DEFAULT_GEMMA_OUT)
    args = ap.parse_args()

    synthetic = (CODE + UNICODE + whitespace_cases() + number_cases() + contraction_cases()
                 + WORDS + [""] + random_mixes(700, 42))
    main_texts = wikitext_cases(args.wikitext) + synthetic
    main_cases = [(t, False) for t in main_texts]
    main_cases += [(t, True) for t in SPECIAL + random_mixes(150, 43) + CODE[:4] + [""]]
    main_cases += [(t, False) for t in SPECIAL]

    rows = []
    for (text, special), ids in zip(main_cases, tokenize_all(args.model, main_cases)):
        rows.append({"text": text, "special": special, "ids": ids})

    other_texts = (CODE + UNICODE + whitespace_cases() + number_cases() + contraction_cases()
                   + random_mixes(150, 44) + wikitext_cases(args.wikitext)[:20])
    other_cases = [(t, False) for t in other_texts] + [(t, True) for t in SPECIAL[:6]]
    with tempfile.TemporaryDirectory() as tmp:
        for pre in OTHER_PRES:
            path = os.path.join(tmp, f"vocab-{pre}.gguf")
            make_vocab_only_copy(args.model, pre, path)
            for (text, special), ids in zip(other_cases, tokenize_all(path, other_cases)):
                rows.append({"pre": pre, "text": text, "special": special, "ids": ids})

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n")
    n_main = len(main_cases)
    if args.gemma_model:
        gemma_cases = (main_cases + [(t, True) for t in GEMMA_SPECIAL] + [(t, False) for t in GEMMA_SPECIAL])
        llm = llama_cpp.Llama(model_path=args.gemma_model, vocab_only=True, verbose=False)
        with open(os.path.join(args.wikitext, "test.txt"), "rb") as f:
            data = f.read()
        if data.endswith(b"\n"):
            data = data[:-1]  # as llama.cpp's -f
        n_file = len(llm.tokenize(data, add_bos=True, special=False))
        with open(args.gemma_out, "w", encoding="utf-8") as f:
            f.write(json.dumps({"wikitext_test_tokens": n_file}) + "\n")
            for text, special in gemma_cases:
                ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
                f.write(json.dumps({"text": text, "special": special, "ids": ids}, ensure_ascii=True,
                                   separators=(",", ":")) + "\n")
        print(f"wrote {len(gemma_cases)} gemma3 goldens to {args.gemma_out}; wikitext test.txt = {n_file} tokens")
    print(f"wrote {len(rows)} goldens ({n_main} smollm, {len(rows) - n_main} for {OTHER_PRES}) "
          f"to {args.out} ({os.path.getsize(args.out) / 1e6:.2f} MB); "
          f"llama-cpp-python {llama_cpp.__version__}")


if __name__ == "__main__":
    main()
