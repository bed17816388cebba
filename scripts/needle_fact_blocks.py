#!/usr/bin/env python3
"""Token position of the asked fact in `chorus eval needle --dump` cases (for reading Cocktail maps).

For each case: the context's token count (chat header + document, as the benchmark prefills it),
the token index where the asked fact sentence " The access code for the {key} is {code}." starts,
where its code starts, where it ends, and the 32-token blocks of those three positions.
Tokenizes with llama.cpp (llama-cpp-python, vocab only). The header is SmolLM2's chat template
before the user content (what `ChatFrame` gives); check that "tokens" equals the benchmark's.

Usage: python3 scripts/needle_fact_blocks.py [--model PATH] SEED:CASES.jsonl ... > positions.json
Needs: pip install llama-cpp-python
"""
import argparse, json, sys

import llama_cpp

HEADER = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
          "<|im_start|>user\n")
ap = argparse.ArgumentParser()
ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
ap.add_argument("dumps", nargs="+", help="SEED:PATH of a --dump JSONL")
a = ap.parse_args()
llm = llama_cpp.Llama(model_path=a.model, vocab_only=True, verbose=False)
n_tok = lambda s: len(llm.tokenize(s.encode(), add_bos=False, special=True))
out = {}
for arg in a.dumps:
    seed, path = arg.split(":", 1)
    for i, line in enumerate(open(path)):
        c = json.loads(line)
        text = HEADER + c["document"]
        key = c["question"][len("What is the access code for the "):-1]
        sent = f" The access code for the {key} is {c['answer']}."
        p = text.find(sent)
        if p < 0: sys.exit(f"{seed}/{i}: asked fact not found")
        t0, tc, t1 = n_tok(text[:p]), n_tok(text[:p + sent.index(c["answer"])]), n_tok(text[:p + len(sent)])
        out[f"{seed}/{i}"] = {"tokens": n_tok(text), "start": t0, "code": tc, "end": t1,
                              "blocks": [t0 // 32, tc // 32, (t1 - 1) // 32]}
json.dump(out, sys.stdout, indent=0)
print()
