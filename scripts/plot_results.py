#!/usr/bin/env python3
"""Plots of the committed results: reads docs/results/*.json|md (nothing is measured here) and writes
PNGs beside them, which the results pages embed.

  kv-bytes-vs-agents.png     KV bytes vs agents: chorus (measured peak) vs an fp16 copy per agent vs
                             llama.cpp's KV buffer (agents-speed-t2.json; serve-t1-2026-12-01.json)
  tok-s-vs-agents.png        aggregate decode tok/s vs agents, chorus beside llama.cpp (agents-speed-t2.json,
                             agents-speed-t1.json; serve-t1-2026-12-01.json for chorus serve vs llama-server)
  tok-s-vs-depth.png         decode tok/s vs context depth per KV format (kv-speed-depth.json)
  comix-bits-heatmap.png     CoMix bits per (agent, layer), K and V (the heat map in comix.md)
  cocktail-chunk-map.png     Cocktail chunk maps (the maps printed in cocktail.md)
  defaults-bytes-vs-kld.png  KV bytes (% of f16, measured) vs mean KLD against f16 KV for every configuration
                             measured for the default, per model and corpus at 2K and 8K, with llama.cpp's
                             q8_0 / q4_0 KV beside them (defaults/*.json, defaults/peer.json)
  segments-curve.png         segment reuse: answer KLD and time to first token vs the repair fraction, per
                             model and corpus, the full prefill's own distance to f16 as a line
                             (segments/eval-*-seed41.json)

Usage: python3 scripts/plot_results.py [--out docs/results]   (pip install matplotlib: scripts/setup.sh)
"""
import argparse
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RES = os.path.join(ROOT, "docs", "results")
MIB = 2 ** 20
# What an fp16 KV holds per token for SmolLM2-135M (30 layers x 3 KV heads x 64 x K and V x 2 bytes):
# Engine::Fp16Bytes(1), reported by GET /v1/state as fp16.bytes_per_token.
FP16_BYTES_PER_TOKEN = 23040


def load(name):
    with open(os.path.join(RES, name)) as f:
        return json.load(f)


def read(name):
    with open(os.path.join(RES, name)) as f:
        return f.read()


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("wrote", os.path.relpath(path, ROOT))


def agents_rows(d):
    return sorted(d["rows"], key=int)


def kv_bytes_vs_agents(out):
    d = load("agents-speed-t2.json")
    ns = agents_rows(d)
    x = [int(n) for n in ns]
    doc, tg = d["doc_tokens"], d["tg"]
    fig, ax = plt.subplots(figsize=(9, 4))
    for cfg, style in (("tq4/tq3", "o-"), ("f16/f16", "s-")):
        ax.plot(x, [d["rows"][n]["chorus"][cfg]["peak_kv_bytes"] / MIB for n in ns], style,
                label=f"chorus {cfg} (measured peak)")
    ax.plot(x, [int(n) * (doc + tg) * FP16_BYTES_PER_TOKEN / MIB for n in ns], "k--",
            label="an fp16 copy per agent (document + answer)")
    raw = d["llama_cpp_raw"]
    for t in ("f16", "q8_0"):
        ax.plot(x, [raw[t]["agents"][n]["kv_log"]["KV_buffer_mib"] for n in ns], "^:", label=f"llama.cpp KV buffer ({t})")
    s = load("serve-t1-2026-12-01.json")
    sx = [r["agents"] for r in s["rows"] if r["server"] == "chorus"]
    ax.plot(sx, [r["kv_mib"] for r in s["rows"] if r["server"] == "chorus"], "D-", label="chorus serve (measured peak)")
    ax.plot(sx, [r["kv_mib"] for r in s["rows"] if r["server"] == "llama-server"][:len(sx)], "v:",
            label="llama-server f16 (allocated)")
    ax.set_yscale("log")
    ax.set_xlabel("agents sharing one 4,096-token document")
    ax.set_ylabel("KV MiB (log)")
    ax.set_title("KV bytes vs agents (SmolLM2-135M)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    save(fig, out, "kv-bytes-vs-agents.png")


def tok_s_vs_agents(out):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, name, title in ((axes[0], "agents-speed-t2.json", "chorus bench, 2 threads (idle machine)"),
                            (axes[1], "agents-speed-t1.json", "chorus bench, 1 thread (other core busy)")):
        d = load(name)
        ns = agents_rows(d)
        x = [int(n) for n in ns]
        for cfg, style in (("tq4/tq3", "o-"), ("f16/f16", "s-")):
            ax.plot(x, [d["rows"][n]["chorus"][cfg]["decode_tokens_per_s"] for n in ns], style, label=f"chorus {cfg}")
        for t in ("f16", "q8_0", "q4_0"):
            ax.plot(x, [d["rows"][n]["llama_cpp"][t] for n in ns], "^:", label=f"llama.cpp {t}")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("agents")
        ax.set_ylabel("aggregate decode tok/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    s = load("serve-t1-2026-12-01.json")
    for server, style in (("chorus", "D-"), ("llama-server", "v:")):
        rows = [r for r in s["rows"] if r["server"] == server and r["tok_s"] is not None]
        axes[1].plot([r["agents"] for r in rows], [r["tok_s"] for r in rows], style, label=f"{server} serve (tokens / wall, prefill included)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Aggregate decode tok/s vs agents on one 4,096-token document (128 tokens each)", fontsize=10)
    save(fig, out, "tok-s-vs-agents.png")


def tok_s_vs_depth(out):
    d = load("kv-speed-depth.json")
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for series in d["series"]:
        pts = [(p, v) for p, v in zip(d["depths"], series["tok_s"]) if v is not None]
        ax.plot([p for p, _ in pts], [v for _, v in pts], "o-" if series["engine"] == "chorus" else "^:",
                label=f"{series['engine']} {series['kv']}")
    ax.set_xlabel("context depth (tokens)")
    ax.set_ylabel("decode tok/s (1 agent)")
    ax.set_title("Decode tok/s vs context depth per KV format, 2 threads", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, out, "tok-s-vs-depth.png")


def comix_heatmap(out):
    text = read("comix.md")
    # The heat map block: "agent N   K 2444..." then "          V 2333...".
    rows, labels = [], []
    agent = None
    for line in text.splitlines():
        m = re.match(r"\s*agent (\d+)\s+K ([234]{10,})\s*$", line)
        if m:
            agent = m.group(1)
            rows.append([int(c) for c in m.group(2)])
            labels.append(f"agent {agent} K")
            continue
        m = re.match(r"\s+V ([234]{10,})\s*$", line)
        if m and agent:
            rows.append([int(c) for c in m.group(1)])
            labels.append(f"agent {agent} V")
            agent = None
    if not rows:
        raise SystemExit("comix.md: no heat map found")
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    im = ax.imshow(rows, cmap=ListedColormap(["#fee0d2", "#fc9272", "#de2d26"]), vmin=1.5, vmax=4.5, aspect="auto")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("layer")
    ax.set_title("CoMix bits per (agent, layer), K and V (comix-kivi:3, 3 agents; comix.md)", fontsize=9)
    cb = fig.colorbar(im, ax=ax, ticks=[2, 3, 4])
    cb.set_label("bits")
    save(fig, out, "comix-bits-heatmap.png")


def cocktail_chunk_map(out):
    text = read("cocktail.md")
    maps = [(f"eval ppl chunk {m.group(1)}", m.group(2))
            for m in re.finditer(r"^\s*chunk (\d+)\s+([SF42]{8,})\s+similarity", text, re.M)]
    m = re.search(r"cocktail chunk map \((\d+) chunks.*\n\s*([SF42]{8,})", text)
    if m:
        maps.append(("generate (Boulter, 27 chunks)", m.group(2)))
    if not maps:
        raise SystemExit("cocktail.md: no chunk map found")
    code = {"S": 3, "F": 2, "4": 1, "2": 0}
    width = max(len(s) for _, s in maps)
    grid = [[code[c] for c in s] + [float("nan")] * (width - len(s)) for _, s in maps]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(maps) + 1.3))
    cmap = ListedColormap(["#e5f5e0", "#41ab5d", "#2171b5", "#08306b"])
    cmap.set_bad("white")
    im = ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=3.5, aspect="auto")
    ax.set_yticks(range(len(maps)), [n for n, _ in maps], fontsize=8)
    ax.set_xlabel("32-token block")
    ax.set_title("Cocktail chunk maps (query-relevant chunks kept at higher precision; cocktail.md)", fontsize=9)
    cb = fig.colorbar(im, ax=ax, ticks=[0, 1, 2, 3])
    cb.ax.set_yticklabels(["int2", "int4", "fp16", "sink f16"])
    save(fig, out, "cocktail-chunk-map.png")


def segments_curve(out):
    d = os.path.join(RES, "segments")
    # `chorus eval segments` reports at the default formats (eval-MODEL-CORPUS-seedN.json)
    runs = sorted(f for f in os.listdir(d) if f.startswith("eval-") and f.endswith("seed41.json")) if os.path.isdir(d) else []
    if not runs:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name in runs:
        r = load(os.path.join("segments", name))
        label = name[:-5]
        pts = [p for p in r["points"] if p["repair"] >= 0]
        full = [p for p in r["points"] if p["repair"] < 0][0]
        x = [100 * p["repair"] for p in pts]
        line = axes[0].plot(x, [p["mean_kld"] for p in pts], marker="o", label=label)[0]
        axes[1].plot(x, [p["mean_kld_f16"] for p in pts], marker="o", color=line.get_color(), label=label)
        axes[1].axhline(full["mean_kld_f16"], color=line.get_color(), ls=":", lw=1)
        axes[2].plot(x + [100], [p["mean_ttft_ms"] for p in pts] + [full["mean_ttft_ms"]], marker="o",
                     color=line.get_color(), label=label)
    axes[0].set_title("answer KLD vs the full prefill (same formats)")
    axes[1].set_title("answer KLD vs an f16 full prefill\n(dotted: the full prefill's own)")
    axes[2].set_title("time to first token (100 % = full prefill)")
    for ax in axes:
        ax.set_xlabel("repair: % of each reused span recomputed")
        ax.grid(alpha=0.3)
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(bottom=0)
    axes[0].set_ylabel("mean KLD per answer token (nats)")
    axes[1].set_ylabel("mean KLD per answer token (nats)")
    axes[2].set_ylabel("ms")
    axes[0].legend(fontsize=7)
    save(fig, out, "segments-curve.png")


def defaults_bytes_vs_kld(out):
    d = os.path.join(RES, "defaults")
    runs = sorted(f for f in os.listdir(d) if f.endswith(".json") and f != "peer.json") if os.path.isdir(d) else []
    if not runs:
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    marks = {"wiki": "o", "code": "s", "docs": "^", "chat": "D"}
    colors = {}
    for name in runs:  # MODEL-CORPUS-cCTX.json (`chorus eval kld --json`)
        model, corpus, ctx = name[:-5].split("-")
        ax = axes[0 if model == "smol" else 1]
        for r in load(os.path.join("defaults", name))["configs"]:
            cfg = r.get("policy") or (r["k"] if r["k"] == r["v"] and "-" in r["k"] else f'{r["k"]}/{r["v"]}')
            c = colors.setdefault(cfg, f"C{len(colors)}")
            ax.scatter(100 * r["bits_per_element"] / 16, r["kld_mean"], color=c, marker=marks.get(corpus, "x"),
                       s=28 if ctx == "c2048" else 60, facecolors="none" if ctx != "c2048" else c)
    if os.path.exists(os.path.join(d, "peer.json")):
        for r in load(os.path.join("defaults", "peer.json"))["rows"]:  # llama.cpp: its corpus's marker, outlined
            c = colors.setdefault("llama.cpp " + r["kv"], f"C{len(colors)}")
            axes[0].scatter(100 * r["bits_per_element"] / 16, r["kld_mean"], color=c,
                            marker=marks.get(r.get("corpus", "wiki"), "x"), s=90, edgecolors="black", linewidths=1.2)
    for cfg, c in colors.items():
        axes[0].scatter([], [], color=c, label=cfg)
    axes[0].set_title("SmolLM2-135M (filled: 2K, hollow: 8K; black outline: llama.cpp, 2K)\n"
                      "o wiki, square code, triangle docs, diamond chat")
    axes[1].set_title("Gemma 3 270M (2K)\no wiki, square code, triangle docs, diamond chat")
    for ax in axes:
        ax.set_xlabel("KV bytes, % of f16 (measured)")
        ax.set_ylabel("mean KLD vs f16 KV (nats)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    save(fig, out, "defaults-bytes-vs-kld.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=RES)
    a = ap.parse_args()
    for f in (kv_bytes_vs_agents, tok_s_vs_agents, tok_s_vs_depth, comix_heatmap, cocktail_chunk_map, segments_curve,
              defaults_bytes_vs_kld):
        f(a.out)


if __name__ == "__main__":
    main()
