#!/usr/bin/env python3
"""Chat-template goldens for tests/model/chat_template_test.cc.

Writes tests/model/testdata/chat_template_golden.json:
  {"templates": {name: template text}, "cases": [{"template", "messages", "add_generation_prompt",
   "expected", "source"}]}
References:
  - SmolLM2's own tokenizer.chat_template (read from the GGUF) rendered by Jinja2 the way
    Hugging Face transformers does (sandboxed, trim_blocks, lstrip_blocks): source "jinja2".
  - Llama-2 / Mistral / Llama-3 / Gemma 3 templates (official texts below) and family names rendered by
    llama.cpp's llama_chat_apply_template (via llama-cpp-python): source "llama.cpp".
    For Llama-3 the Jinja2 rendering (bos_token = "") is checked to agree.

Usage: python3 scripts/ref_chat_template_goldens.py [--model PATH] [--out PATH]
Needs: pip install jinja2 gguf llama-cpp-python
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

import gguf
from jinja2.sandbox import ImmutableSandboxedEnvironment

try:
    import llama_cpp
except ImportError:
    sys.exit("llama-cpp-python is not installed: pip install llama-cpp-python")

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(REPO, "tests", "model", "testdata", "chat_template_golden.json")

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA2_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
    "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}"
    "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
MISTRAL_V02 = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% endif %}{% endfor %}")
MISTRAL_V1 = (
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}"
    "\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}"
    "\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}"
    "\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n    {%- endif %}\n{%- endfor %}\n")
# A Gemma-3-style template (<start_of_turn> turns; the 270M base GGUF carries none, chorus then uses
# the family name "gemma"); rendered by llama.cpp like the other non-SmolLM2 templates.
GEMMA3 = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]"
    "['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix"
    " = \"\" -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = \"model\" -%}{%- else -%}{%- set role = "
    "message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first"
    " else \"\") }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}")
MISTRAL_V7 = (
    "{{- bos_token }}{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{{- '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{%- elif message['role'] == "
    "'user' %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- else %}"
    "{{- ' ' + message['content'] + eos_token }}{%- endif %}{%- endfor %}")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hi"}],
    [  # llama.cpp's test-chat-template conversation
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "user", "content": "日本語\n\nemoji 😀 and <tags> {{ not jinja }}\ttab\n"}],
    [{"role": "user", "content": ""}],
    [],
    [{"role": "assistant", "content": "I speak first."}, {"role": "user", "content": "ok"}],
    [{"role": "user", "content": "a"}, {"role": "system", "content": "late system"}],
]


def render_jinja(template: str, messages, add_generation_prompt: bool, **extra) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages,
                                            add_generation_prompt=add_generation_prompt, **extra)


def render_llama_cpp(template: str, messages, add_generation_prompt: bool) -> str:
    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
    arr = (llama_cpp.llama_chat_message * max(1, len(keep)))()
    for i, (r, c) in enumerate(keep):
        arr[i].role, arr[i].content = r, c
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(template.encode(), arr, len(keep),
                                                add_generation_prompt, buf, size)
        if n < 0:
            raise RuntimeError(f"llama.cpp does not know template {template[:40]!r}")
        if n <= size:
            return buf.raw[:n].decode("utf-8")
        size = n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    smollm2 = gguf.GGUFReader(args.model).fields["tokenizer.chat_template"].contents()
    templates = {"smollm2": smollm2, "llama3": LLAMA3, "llama2-chat": LLAMA2_CHAT,
                 "mistral-v0.2": MISTRAL_V02, "mistral-v1": MISTRAL_V1, "mistral-v7": MISTRAL_V7,
                 "name:chatml": "chatml", "name:llama3": "llama3", "name:llama2-sys": "llama2-sys",
                 "name:mistral-v3": "mistral-v3", "name:mistral-v3-tekken": "mistral-v3-tekken",
                 "name:mistral-v7-tekken": "mistral-v7-tekken", "name:gemma": "gemma",
                 "gemma3": GEMMA3}
    cases = []
    for name, text in templates.items():
        for messages in CONVERSATIONS:
            for gen in (False, True):
                if name == "smollm2":
                    expected, source = render_jinja(text, messages, gen), "jinja2"
                else:
                    expected, source = render_llama_cpp(text, messages, gen), "llama.cpp"
                if name == "llama3":
                    jinja = render_jinja(text, messages, gen, bos_token="")
                    assert jinja == expected, (messages, jinja, expected)
                cases.append({"template": name, "messages": messages, "add_generation_prompt": gen,
                              "expected": expected, "source": source})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"templates": templates, "cases": cases}, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} chat-template goldens for {len(templates)} templates to {args.out}")


if __name__ == "__main__":
    main()
