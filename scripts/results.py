#!/usr/bin/env python3
"""One reader of chorus's raw results: the tables of docs/results from the JSON of evals and benchmarks.

  results.py needle [--positions POS.json] RUN.json ...       `chorus eval needle --json` runs (seeds): per
                                                               config accuracy, agreement with f16, bytes,
                                                               sign tests, per-case answers, fact blocks
  results.py needle-nll RUN.json[:SUFFIX] ... [--reproduce OLD.json ...]
                                                               the same runs: gold-answer NLL, paired tests
  results.py needle-allocator RUN.json ... [--baselines kivi4,tq4/tq3]
                                                               needle runs of a cases file (issue 19 item 2):
                                                               per config and kind, paired tests, the goals
  results.py allocator DIR [DIR ...]                           `chorus eval kld --json` outputs CORPUS_*.json:
                                                               policy rows vs uniform at equal bytes
  results.py speed-table DIR                                   scripts/bench_table.sh's folder: the speed table
  results.py cpu-targets FILE.jsonl                            scripts/cpu_targets_bench.sh's JSON lines
  results.py ab-pp-tg FILE.jsonl                               scripts/ab_gemma_pp_tg.sh's JSON lines
  results.py ab DIR                                            scripts/bench_table_ab.sh's folder: B/A per row

Shared by every table: reading a file (JSON, or JSON lines), the schema check, the markdown table and the
exact paired tests (scripts/paired_tests.py). A report of the eval library carries "schema": "chorus.eval/1"
and "kind" (src/eval/report.h): a file with another schema, or a kind the table does not read, stops the
reader with its name; files written before the schema (most of docs/results) carry neither and are read
as they are. Standard library only.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_tests import sign_p, wilcoxon_p  # noqa: E402

SCHEMA = "chorus.eval/1"


# --- shared: reading, checking, printing --------------------------------------------------------------------


def check(doc, path, kinds):
    """doc itself, or exit naming the file when it carries another schema or a kind not in kinds."""
    if isinstance(doc, dict) and "schema" in doc:
        if doc["schema"] != SCHEMA:
            sys.exit(f"{path}: schema {doc['schema']!r}, this reader reads {SCHEMA!r}")
        if kinds and doc.get("kind") not in kinds:
            sys.exit(f"{path}: kind {doc.get('kind')!r}, this table reads {' or '.join(map(repr, kinds))}")
    return doc


def read_json(path, kinds=(), missing_ok=False):
    """One JSON document (None for an empty file; None for a missing or unparsable one if missing_ok)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        if missing_ok:
            return None
        sys.exit(f"cannot read {path}: {e.strerror}")
    if not text.strip():
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        if missing_ok:
            return None
        sys.exit(f"{path}: not JSON ({e})")
    return check(doc, path, kinds)


def read_optional(path, kinds=()):
    """One JSON document, or None when the file is missing, empty or not JSON (a step that failed)."""
    return read_json(path, kinds, missing_ok=True)


def read_json_lines(path, kinds=()):
    """Every line of a JSON-lines file, each checked (a line that wraps a report is checked as one)."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                rows.append(check(json.loads(line), f"{path} line {n}", kinds))
            except json.JSONDecodeError as e:
                sys.exit(f"{path} line {n}: not JSON ({e})")
    return rows


def md_table(header, rows):
    """A markdown table: the header, the |---| rule, one line per row (cells as given)."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


def median2(v):
    """The median of v, the mean of the two middle values for an even count."""
    s = sorted(v)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


# --- needle: accuracy, agreement with f16, bytes, per case --------------------------------------------------


def needle_runs(files, suffixes=False):
    """config -> {(seed, case index): case} over runs of `chorus eval needle --json` (empty files skipped)."""
    data = defaultdict(dict)
    for f in files:
        f, suffix = (f.partition(":")[0], f.partition(":")[2]) if suffixes else (f, "")
        d = read_json(f, ("needle",))
        if d is None:
            continue
        for c in d["configs"]:
            for i, r in enumerate(c["cases"]):
                data[c["config"] + suffix][(d["seed"], i)] = r
    return data


def cmd_needle(args):
    data = needle_runs(args.runs)
    f16 = data.get("f16", {})
    order = ["f16", "kivi4", "kivi2", "cocktail", "cocktail:0.4:0.2", "cocktail:0.1:0.1"]
    names = [n for n in order + sorted(k for k in data if k not in order) if n in data]
    rows = []
    for n in names:
        recs = data[n]
        keys = sorted(recs)
        corr = sum(recs[k]["correct"] for k in keys)
        agree = sum(recs[k]["output"] == f16[k]["output"] for k in keys if k in f16)
        nagree = sum(1 for k in keys if k in f16)
        b = sum(recs[k]["bytes"] for k in keys if k in f16)
        bb = sum(f16[k]["bytes"] for k in keys if k in f16)
        tok = sum(recs[k]["tokens"] for k in keys)
        s = sum(recs[k]["search_seconds"] for k in keys)
        p = sum(recs[k]["prefill_seconds"] for k in keys)
        dec = sum(recs[k]["decode_tokens_per_s"] for k in keys) / len(keys)
        rows.append((n, len(keys), f"{corr}/{len(keys)}", f"{agree}/{nagree}", f"{100 * b / bb:.1f} %",
                     f"{16 * b / bb:.2f}", f"{1000 * s / tok:.3f}", f"{1000 * p / tok:.2f}", f"{dec:.1f}"))
    md_table(("config", "cases", "exact answer", "agree with f16", "bytes / f16 (measured)", "bits/element",
              "search s/1K", "prefill s/1K", "decode tok/s"), rows)

    def paired(a, b):
        ks = sorted(set(data[a]) & set(data[b]))
        only_a = [k for k in ks if data[a][k]["correct"] and not data[b][k]["correct"]]
        only_b = [k for k in ks if data[b][k]["correct"] and not data[a][k]["correct"]]
        ca = sum(data[a][k]["correct"] for k in ks)
        cb = sum(data[b][k]["correct"] for k in ks)
        print(f"{a} vs {b}: {len(ks)} paired cases, {ca} vs {cb} correct; only {a}: {len(only_a)} {only_a}; "
              f"only {b}: {len(only_b)} {only_b}; sign test p = {sign_p(len(only_a), len(only_b)):.3f}")

    print()
    for a in names:
        for b in ("f16", "kivi4"):
            if a != b and b in data and a.startswith("cocktail"):
                paired(a, b)
    for a in ("kivi4", "kivi2"):
        if a in data and "f16" in data:
            paired(a, "f16")
    print()
    keys = sorted(set().union(*[set(v) for v in data.values()]))
    print("per case: seed case tokens depth answer | " + " ".join(names))
    for k in keys:
        any_r = next(data[n][k] for n in names if k in data[n])
        row = []
        for n in names:
            r = data[n].get(k)
            row.append("-" if r is None else ("OK" if r["correct"] else
                                              ("".join(ch for ch in r["output"] if ch.isdigit())[:5] or "x")))
        print(k[0], k[1], any_r["tokens"], f"{any_r['depth']:.2f}", any_r["answer"], "|", " ".join(row))
    print()
    # The asked fact's blocks in Cocktail maps (exact token positions from scripts/needle_fact_blocks.py).
    fp = read_json(args.positions) if args.positions else None
    print("asked fact's block precision (sentence start block .. code block): config: case:chars(+ ok/- miss)")
    for n in names:
        if fp is None or not n.startswith("cocktail"):
            continue
        out = []
        tally = defaultdict(lambda: [0, 0])
        for k in sorted(data[n]):
            r = data[n][k]
            m = r["map"]
            if not m:
                continue
            chars = "".join(m[x] for x in sorted(set(fp[f"{k[0]}/{k[1]}"]["blocks"])))
            out.append(f"{k[0]}/{k[1]}:{chars}{'+' if r['correct'] else '-'}")
            cls = "F" if set(chars) <= {"F", "S"} else ("2" if "2" in chars else "4")
            tally[cls][0] += r["correct"]
            tally[cls][1] += 1
        cnt = defaultdict(int)
        for k in data[n]:
            for ch in data[n][k]["map"]:
                cnt[ch] += 1
        print(n, " ".join(out))
        print("   fact all-F:", tally["F"], " some INT4 (no INT2):", tally["4"], " some INT2:", tally["2"],
              " (correct, cases)  block counts", dict(cnt))


# --- needle-nll: the gold answer's likelihood, paired -------------------------------------------------------


def cmd_needle_nll(args):
    data = needle_runs(args.runs, suffixes=True)
    f16 = data.get("f16", {})

    def bytes_ratio(n, keys):
        ks = [k for k in keys if k in f16]
        b = sum(data[n][k]["bytes"] for k in ks)
        bb = sum(f16[k]["bytes"] for k in ks)
        return b / bb if bb else float("nan")

    def fp(x):
        return f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"

    order = ["f16", "kivi4", "kivi4@w16", "kivi2", "cocktail:0.1:0.1", "cocktail:0.1:0.1@w16", "cocktail:0.15:0.1",
             "cocktail:0.1:0.05"]
    names = [n for n in order if n in data] + sorted(n for n in data if n not in order)
    subsets = [("all cases", lambda k: True)]
    if f16:
        subsets.append(("cases f16 answers exactly", lambda k: k in f16 and f16[k]["correct"]))
    for title, keep in subsets:
        print(f"### {title}\n")
        rows = []
        for n in names:
            ks = sorted(k for k in data[n] if keep(k))
            if not ks:
                continue
            nll = [data[n][k]["answer_nll"] for k in ks]
            corr = sum(data[n][k]["correct"] for k in ks)
            pa = sum(math.exp(-data[n][k]["answer_nll"]) for k in ks) / len(ks)
            rows.append((n, len(ks), f"{corr}/{len(ks)}", f"{sum(sorted(nll)) / len(ks):.3f}", f"{median2(nll):.3f}",
                         f"{pa:.3f}", f"{100 * bytes_ratio(n, ks):.1f} %"))
        md_table(("config", "cases", "exact answer", "mean answer NLL (nats)", "median answer NLL", "mean P(answer)",
                  "bytes / f16 (measured)"), rows)
        print()
        pairs = [(a, b) for a in names if a.startswith("cocktail") for b in names if not b.startswith("cocktail")]
        pairs += [(a, "f16") for a in names if not a.startswith("cocktail") and a != "f16" and "f16" in data]
        rows = []
        for a, b in pairs:
            ks = sorted(k for k in set(data[a]) & set(data[b]) if keep(k))
            if not ks:
                continue
            d = [data[a][k]["answer_nll"] - data[b][k]["answer_nll"] for k in ks]
            lo, hi = sum(x < 0 for x in d), sum(x > 0 for x in d)
            wp, wplus = wilcoxon_p(d)
            rows.append((f"{a} vs {b}", len(ks),
                         f"{100 * bytes_ratio(a, ks):.1f} % vs {100 * bytes_ratio(b, ks):.1f} %",
                         f"{sum(d) / len(d):+.3f}", f"{median2(d):+.3f}", f"{lo} / {hi} / {len(d) - lo - hi}",
                         fp(sign_p(lo, hi)), f"{fp(wp)} ({wplus:g})"))
        md_table(("A vs B", "paired cases", "bytes/f16 A vs B", "mean NLL A - B (nats)", "median A - B",
                  "A lower / higher / equal", "sign test p", "Wilcoxon p (W+)"), rows)
        print()

    print("per case answer NLL: seed/case answer | " + " ".join(names))
    for k in sorted(set().union(*[set(v) for v in data.values()])):
        any_r = next(data[n][k] for n in names if k in data[n])
        cells = []
        for n in names:
            r = data[n].get(k)
            cells.append("-" if r is None else f"{r['answer_nll']:.3f}{'' if r['correct'] else '*'}")
        print(f"{k[0]}/{k[1]} {any_r['answer']} | " + " ".join(cells))
    print("(* = exact answer missed)")

    if args.reproduce:
        old = needle_runs(args.reproduce, suffixes=True)
        print("\nreproduction of older outputs (same seed/case, output text equal):")
        for n in names:
            ks = sorted(set(data[n]) & set(old.get(n.split("@")[0], {})))
            if not ks:
                continue
            o = old[n.split("@")[0]]
            diff = [f"{k[0]}/{k[1]}: {o[k]['output']!r} -> {data[n][k]['output']!r}" for k in ks
                    if o[k]["output"] != data[n][k]["output"]]
            print(f"{n}: {len(ks) - len(diff)}/{len(ks)} equal" + (" — " + "; ".join(diff) if diff else ""))


# --- needle-allocator: a cases file's runs, per kind, paired, the goals ---------------------------------------


def cmd_needle_allocator(args):
    data = defaultdict(dict)  # config -> (kind, answer, context tokens, depth) -> case
    for f in args.runs:
        if not os.path.isfile(f):
            sys.exit(f"no such run file: {f}")
        d = read_json(f, ("needle",))
        if d is None:
            continue
        try:
            configs = d["configs"]
            for c in configs:
                for r in c["cases"]:
                    lacks = [k for k in ("answer", "tokens", "depth", "answer_nll", "correct", "bytes") if k not in r]
                    if lacks:
                        sys.exit(f"{f}: config {c['config']}: a case has no {', '.join(lacks)} (a run before "
                                 f"`eval needle` reported the answer's NLL?)")
                    data[c["config"]][(r.get("kind", ""), r["answer"], r["tokens"], r["depth"])] = r
        except (KeyError, TypeError) as e:
            sys.exit(f"{f}: not the JSON of `chorus eval needle --json` ({type(e).__name__}: {e})")
    if "f16" not in data:
        sys.exit("no f16 config in the runs: bytes and the goals are relative to it")
    f16 = data["f16"]
    keys = sorted(set.intersection(*(set(v) for v in data.values())))
    if not keys:
        sys.exit("no case is in every config")
    uniform = [n for n in data if not n.startswith(("cocktail", "comix"))]
    names = sorted(uniform, key=lambda n: (n != "f16", n)) + sorted(n for n in data if n not in uniform)
    base = [b for b in args.baselines.split(",") if b in data]

    def ratio(n, ks):
        return sum(data[n][k]["bytes"] for k in ks) / sum(f16[k]["bytes"] for k in ks)

    def acc(n, ks):
        return sum(data[n][k]["correct"] for k in ks)

    toks = [f16[k]["tokens"] for k in keys]
    kinds = sorted({k[0] for k in keys})
    print(f"{len(keys)} cases in every config ({', '.join(f'{sum(k[0] == kd for k in keys)} {kd}' for kd in kinds)}); "
          f"context tokens {min(toks)}-{max(toks)} (mean {statistics.mean(toks):.0f})\n")
    a16 = acc("f16", keys)
    rows = []
    for n in names:
        nll = [data[n][k]["answer_nll"] for k in keys]
        a = acc(n, keys)
        rows.append((n, f"{a}/{len(keys)} ({100 * a / len(keys):.1f} %)", f"{100 * a / a16:.1f} %",
                     f"{statistics.mean(nll):.3f}", f"{statistics.median(nll):.3f}", f"{100 * ratio(n, keys):.1f} %"))
    md_table(("config", "exact answer", "% of f16's", "mean answer NLL", "median", "bytes / f16 (measured)"), rows)

    groups = sorted({k[0].split(":")[0] for k in keys})
    multi = [kd for kd in kinds if sum(k2.split(":")[0] == kd.split(":")[0] for k2 in kinds) > 1]  # kinds of a group
    for g in groups + multi:
        ks = [k for k in keys if k[0] == g or k[0].split(":")[0] == g]
        print(f"\n#### {g} ({len(ks)} cases)\n")
        md_table(("config", "exact answer", "mean answer NLL", "bytes / f16"),
                 [(n, f"{acc(n, ks)}/{len(ks)}", f"{statistics.mean(data[n][k]['answer_nll'] for k in ks):.3f}",
                   f"{100 * ratio(n, ks):.1f} %") for n in names])

    def pair(a, b, ks):
        d = [data[a][k]["answer_nll"] - data[b][k]["answer_nll"] for k in ks]
        p, _ = wilcoxon_p(d)
        only_a = sum(data[a][k]["correct"] and not data[b][k]["correct"] for k in ks)
        only_b = sum(data[b][k]["correct"] and not data[a][k]["correct"] for k in ks)
        return dict(mean=statistics.mean(d), median=statistics.median(d), lo=sum(x < 0 for x in d),
                    hi=sum(x > 0 for x in d), p=p, only_a=only_a, only_b=only_b, sp=sign_p(only_a, only_b),
                    ra=ratio(a, ks), rb=ratio(b, ks), acc_a=acc(a, ks), acc_b=acc(b, ks))

    def pair_row(a, b, r, flag=""):
        return (f"{a} vs {b}", f"{100 * r['ra']:.1f} % vs {100 * r['rb']:.1f} %{flag}", f"{r['mean']:+.3f}",
                f"{r['median']:+.3f}", f"{r['lo']} / {r['hi']}", f"{r['p']:.2g}", f"{r['acc_a']} vs {r['acc_b']}",
                f"{r['only_a']} / {r['only_b']}", f"{r['sp']:.2g}")

    pair_header = ("A vs B", "bytes/f16 A vs B", "mean Δ NLL", "median", "A lower / higher", "Wilcoxon p",
                   "exact A vs B", "only A / only B", "sign p")
    mixed = [n for n in names if n not in uniform]
    print("\n### Paired: mixed precision vs the uniform baselines (answer NLL A − B; exact answers)\n")
    results, rows = {}, []
    for a in mixed:
        for b in base + (["f16"] if a != "f16" else []):
            r = results[(a, b)] = pair(a, b, keys)
            rows.append(pair_row(a, b, r, "" if r["ra"] <= r["rb"] + 1e-9 else " (A more bytes)"))
    md_table(pair_header, rows)

    # Item 3: one context made for all of a document's questions (`--shared-questions`, "X@shared") against the
    # same config made per question (X), and against the baselines (in the table above).
    shared = [(n, n[: -len("@shared")]) for n in names if n.endswith("@shared") and n[: -len("@shared")] in data]
    if shared:
        print("\n### Shared contexts: one context for all of a document's questions vs one per question\n")
        md_table(pair_header, [pair_row(a, b, pair(a, b, keys)) for a, b in shared])

    print("\n### Goals of issue 19, item 2 (set for SmolLM2-135M; checked here on the model of these runs)\n")
    if "kivi4" in data:
        rk = ratio("kivi4", keys)
        for a in mixed:
            r = results[(a, "kivi4")]
            if r["ra"] > rk + 1e-9:
                print(f"- {a}: {100 * r['ra']:.1f} % of f16's bytes > kivi4's {100 * rk:.1f} %: "
                      "not eligible for goal 1")
                continue
            met = r["mean"] < 0 and r["lo"] > r["hi"] and r["p"] < 0.01 and r["acc_a"] >= r["acc_b"]
            print("- goal 1 (≤ kivi4's bytes: lower gold NLL than kivi4 at p < 0.01 and ≥ its exact answers) — "
                  f"{a}: {'MET' if met else 'not met'} (Δ NLL {r['mean']:+.3f}, {r['lo']}/{r['hi']}, "
                  f"p {r['p']:.2g}; exact {r['acc_a']} vs {r['acc_b']})")
    for n in names:
        rn = ratio(n, keys)
        if n == "f16" or rn > 0.25 + 1e-9:
            continue
        a = acc(n, keys)
        print(f"- goal 2 (≤ 25 % of f16's bytes: ≥ 90 % of f16's exact answers) — {n} at {100 * rn:.1f} %: "
              f"{'MET' if a >= 0.9 * a16 else 'not met'} ({a} vs f16 {a16} = {100 * a / a16:.1f} %)")


# --- allocator: CoMix/Cocktail rows vs uniform at equal bytes, per corpus ------------------------------------


def wilcoxon_chunks(x, y):
    """Two-sided Wilcoxon signed-rank p-value of paired samples x, y (zero differences dropped): exact for
    n <= 25 without tied ranks, else the normal approximation with tie correction (allocator.md's tables)."""
    d = [a - b for a, b in zip(x, y) if a != b]
    n = len(d)
    if n == 0:
        return 1.0, 0.0
    order = sorted(range(n), key=lambda i: abs(d[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:  # average ranks over ties of |d|
        j = i
        while j + 1 < n and abs(d[order[j + 1]]) == abs(d[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    w_plus = sum(r for r, v in zip(ranks, d) if v > 0)
    if n <= 25 and all(r == int(r) for r in ranks):
        total = n * (n + 1) // 2  # exact: the number of subsets of {1..n} with rank sum s
        counts = [1] + [0] * total
        for r in range(1, n + 1):
            for s in range(total, r - 1, -1):
                counts[s] += counts[s - r]
        w = min(w_plus, total - w_plus)
        return min(1.0, 2 * sum(counts[: int(w) + 1]) / 2 ** n), w_plus
    mean = n * (n + 1) / 4
    ties = defaultdict(int)
    for r in ranks:
        ties[r] += 1
    var = n * (n + 1) * (2 * n + 1) / 24 - sum(t ** 3 - t for t in ties.values()) / 48
    z = (w_plus - mean) / math.sqrt(var) if var > 0 else 0.0
    return min(1.0, math.erfc(abs(z) / math.sqrt(2))), w_plus


def policy_family(name):
    if name.startswith(("comix-", "cocktail-")) and not name.startswith("cocktail-paper"):
        return name.split("-")[1].split(":")[0]
    parts = name.split("/")
    for fam in ("kivi", "tq"):
        if any(p.startswith(fam) for p in parts):
            return fam
    return None


def cmd_allocator(args):
    """DIR holds `chorus eval kld --json` outputs named CORPUS_*.json (one uniform run with --configs, one run
    per policy row), merged per corpus by config name; every run's f16 base must agree (same chunks, same base
    PPL). Each policy row is paired with each uniform row of its family whose measured bytes are within
    [0.97, 1.12]x of the policy's (the policy never 1 % above): mean-KLD and PPL differences and a Wilcoxon
    signed-rank test over the chunks (per-chunk mean KLD; per-chunk NLL)."""
    corpora = defaultdict(dict)  # corpus -> name -> config
    base = {}
    for d in args.dirs:
        for f in sorted(Path(d).glob("*.json")):
            corpus = f.stem.split("_")[0]
            j = read_json(f, ("kld",))
            if j is None:
                sys.exit(f"{f}: empty (a `chorus eval kld --json` output that did not finish?)")
            if not all(k in j for k in ("chunks", "ctx", "base_ppl", "base_chunk_nll", "configs")):
                sys.exit(f"{f}: not the JSON of `chorus eval kld --json` (no chunks, ctx, base_ppl, base_chunk_nll "
                         f"or configs)")
            key = (j["chunks"], j["ctx"], round(j["base_ppl"], 6))
            if corpus in base and base[corpus] != key:
                sys.exit(f"{f}: base run differs from the corpus' first ({key} vs {base[corpus]})")
            base[corpus] = key
            for c in j["configs"]:
                mixed = c["k"] == c["v"] and ("comix" in c["k"] or "cocktail" in c["k"])
                c["base_chunk_nll"] = j["base_chunk_nll"]
                corpora[corpus][c["k"] if mixed else f'{c["k"]}/{c["v"]}'] = c
    wins = defaultdict(lambda: [0, 0])
    for corpus in sorted(corpora):
        cfgs = corpora[corpus]
        chunks, ctx, ppl = base[corpus]
        print(f"\n## {corpus}: {chunks} chunks of {ctx} tokens, f16 PPL {ppl:.4f}\n")
        print(f"{'config':34s} {'bits':>5s} {'peak KiB':>9s} {'meanKLD':>8s} {'dPPL%':>7s}")
        for name, c in sorted(cfgs.items(), key=lambda kv: (policy_family(kv[0]) or "", kv[1]["bits_per_element"])):
            print(f"{name:34s} {c['bits_per_element']:5.2f} {c.get('kv_peak_bytes', c['kv_bytes']) / 1024:9.1f} "
                  f"{c['kld_mean']:8.5f} {c['ppl_delta_pct']:+7.3f}")
        print(f"\n{'policy':34s} {'vs uniform':14s} {'bytes':>6s} {'dKLD':>9s} {'KLD%':>6s} {'p(KLD)':>8s} "
              f"{'dPPL pts':>8s} {'p(NLL)':>8s}  chunks better")
        for name, c in cfgs.items():
            if "comix" not in name and "cocktail" not in name:
                continue
            fam = policy_family(name)
            pb = c.get("kv_peak_bytes", c["kv_bytes"])
            for un, u in cfgs.items():
                if "comix" in un or "cocktail" in un or policy_family(un) != fam:
                    continue
                ub = u.get("kv_peak_bytes", u["kv_bytes"])
                ratio = pb / ub
                if not (0.97 <= ub / pb <= 1.12) or ratio > 1.01:
                    continue
                p_kld, _ = wilcoxon_chunks(c["chunk_kld"], u["chunk_kld"])
                p_nll, _ = wilcoxon_chunks(c["chunk_nll"], u["chunk_nll"])
                better = sum(a < b for a, b in zip(c["chunk_kld"], u["chunk_kld"]))
                dk = c["kld_mean"] - u["kld_mean"]
                print(f"{name:34s} {un:14s} {ratio:6.3f} {dk:+9.5f} {100 * dk / u['kld_mean']:+6.1f} {p_kld:8.4f} "
                      f"{c['ppl_delta_pct'] - u['ppl_delta_pct']:+8.3f} {p_nll:8.4f}  {better}/{len(c['chunk_kld'])}")
                w = wins[(name.split(":")[0] + ":" + ":".join(name.split(":")[1:]), un)]
                w[0] += dk < 0 and c["ppl_delta_pct"] <= u["ppl_delta_pct"]
                w[1] += 1
    print("\n## policy vs uniform: corpora where the policy has lower mean KLD and no higher PPL\n")
    for (p, u), (n_win, n) in sorted(wins.items()):
        print(f"{p:34s} vs {u:14s} {n_win}/{n}")


# --- speed-table: scripts/bench_table.sh's folder ------------------------------------------------------------


def fmt_rate(x, digits=1):
    return "n/a" if not x else f"{x:,.{digits}f}"


def fmt_ratio(a, b):
    return "n/a" if not a or not b else f"{a / b:.2f}×"


def fmt_spread(s, digits=1):
    return "" if not s or not s[0] else f" ({s[0]:,.{digits}f}–{s[1]:,.{digits}f})"


def cmd_speed_table(args):
    """Rows: pp512, tg128, decode at depth 0 / 4096 (f16 and tq4/tq3 KV), 1 and 15 agents decoding over one
    4096-token shared document (aggregate tok/s), the document's prefill — per thread count, chorus beside
    llama.cpp's best (its winning settings named), the ratio, and chorus's % of the roofline where the
    benchmark printed one. Only what the files hold is printed; a missing file or peer is "n/a"."""
    d = args.dir
    if not os.path.isdir(d):
        sys.exit("usage: results.py speed-table DIR (the --out folder of scripts/bench_table.sh)")

    def load(name, kinds):  # a file of the folder
        return read_optional(os.path.join(d, name), kinds)

    rows = []  # (threads, workload, chorus, peer, settings, ratio, roof%)
    machine = load("machine.json", ("machine",))
    pptg = load("pptg.json", ("speed",))
    if pptg:
        for t, c in sorted(pptg.get("chorus", {}).items()):
            peer = pptg.get("llama_cpp", {}).get("threads", {}).get(t, {})
            roof = pptg.get("roofline", {}).get(t, {})
            for k, name in (("pp", f"pp{pptg['pp_tokens']}"), ("tg", f"tg{pptg['tg_tokens']}")):
                rows.append((t, name, f"{fmt_rate(c[k])}{fmt_spread(c.get(k + '_spread'))}",
                             f"{fmt_rate(peer.get(k))}{fmt_spread(peer.get(k + '_spread'))}",
                             peer.get(k + "_settings", ""), fmt_ratio(c[k], peer.get(k)),
                             roof.get(k, {}).get("percent_of_roof")))
    for path in sorted(glob.glob(os.path.join(d, "depth-t*.json"))):
        j = read_optional(path, ("depth",))
        if not j:
            continue
        t = str(j["threads"])
        for row in j.get("rows", []):
            peer = row.get("llama_cpp", {})
            best_kv = max(peer, key=peer.get) if peer else None
            for kv, c in row.get("chorus", {}).items():
                rows.append((t, f"decode at depth {row['depth']}, KV {kv}", fmt_rate(c["tg"]),
                             fmt_rate(peer.get(best_kv)) if best_kv else "n/a",
                             f"KV {best_kv}: {row.get('llama_cpp_settings', {}).get(best_kv, '')}" if best_kv else "",
                             fmt_ratio(c["tg"], peer.get(best_kv)) if best_kv else "n/a",
                             c.get("roofline", {}).get("percent_of_roof")))
    for path in sorted(glob.glob(os.path.join(d, "agents-t*.json"))):
        j = read_optional(path, ("agents",))
        if not j:
            continue
        t, doc = str(j["threads"]), j.get("doc_tokens", "?")
        peer = load(f"agents-peer-t{t}.json", ()) or {}
        pa = peer.get("agents", {})
        for n, r in sorted(j.get("rows", {}).items(), key=lambda x: int(x[0])):
            p = pa.get(n, {})
            for kv, c in r.get("chorus", {}).items():
                rows.append((t, f"{n} agent(s), {doc}-token shared document, KV {kv}",
                             f"{fmt_rate(c['decode_tokens_per_s'])}{fmt_spread(c.get('spread'))}",
                             f"{fmt_rate(p.get('decode_tokens_per_s'))}{fmt_spread(p.get('spread'))}",
                             p.get("settings", ""), fmt_ratio(c["decode_tokens_per_s"], p.get("decode_tokens_per_s")),
                             c.get("roofline", {}).get("percent_of_roof")))
        # The peer's fastest prefill: the best median of any variant and agent count (each prefills the
        # document once); before 2026-12-05 the table took the first agent count's decode winner's.
        first = pa.get(min(pa, key=int)) if pa else {}
        pre = [(s["prefill_seconds"], rec["settings"]) for rec in peer.get("variants", [])
               for s in rec.get("agents", {}).values() if "prefill_seconds" in s]
        best = ({"seconds": min(pre)[0], "settings": min(pre)[1]} if pre else
                {"seconds": first.get("prefill_seconds"), "settings": first.get("settings", "")})
        for kv, c in j.get("chorus", {}).items():
            pre, pp = c.get("prefill_seconds"), best.get("seconds")
            rows.append((t, f"{doc}-token document prefill (seconds: lower is better), KV {kv}",
                         f"{fmt_rate(pre, 2)}{fmt_spread(c.get('prefill_spread'), 2)}", fmt_rate(pp, 2),
                         best.get("settings", ""), fmt_ratio(pp, pre), None))
    print(f"Raw outputs: {d}/ (JSON per row group; the human tables and load averages in the .log files)\n")
    if machine and machine.get("cpu"):
        print(f"CPU: {machine['cpu']}\n")
    if machine:
        md_table(("threads", "read GB/s", "f32 GFLOP/s", "int8 GOP/s", "AMX int8 GOP/s"),
                 [(m["threads"], f"{m['read_bytes_per_s'] * 1e-9:.1f}", f"{m['f32_flops_per_s'] * 1e-9:.1f}",
                   f"{m['int8_ops_per_s'] * 1e-9:.1f}",
                   f"{m['amx_int8_ops_per_s'] * 1e-9:.1f}" if m.get("amx_int8_ops_per_s", 0) else "none")
                  for m in machine.get("machine", [])])
        print()
    md_table(("threads", "workload", "chorus tok/s (spread)", "llama.cpp best (spread)", "peer settings", "ratio",
              "chorus % of roof"),
             [(t, w, c, p, s, r, "" if roof is None else f"{roof:.0f} %")
              for t, w, c, p, s, r, roof in sorted(rows, key=lambda x: int(x[0]))])


# --- cpu-targets: pp/tg per model, threads and kernel path ---------------------------------------------------


def cmd_cpu_targets(args):
    rates = defaultdict(list)  # (model, threads, who, target, test) -> [tok/s]
    loads = []
    for r in read_json_lines(args.file):
        key = (os.path.basename(r["model"]), r["threads"], r["who"], r["target"])
        loads.append(float(r["load"]))
        if r["who"] == "chorus":
            res = check(r["result"], args.file, ("speed",))
            c = res["chorus"][str(r["threads"])]
            rates[key + ("pp",)].append(c["pp"])
            rates[key + ("tg",)].append(c["tg"])
            rates[key + ("path",)] = res.get("kernel_path", "?")
        else:
            for t in r["result"]:
                rates[key + ("pp" if t["n_prompt"] > 0 else "tg",)].append(t["avg_ts"])

    def cell(v):
        return "-" if not v else f"{statistics.median(v):.1f} ({min(v):.0f}-{max(v):.0f}, n={len(v)})"

    print(f"load average while measuring: {min(loads):.1f}-{max(loads):.1f}\n")
    keys = sorted({k[:4] for k in rates})
    rows = []
    for model, threads, who, target in keys:
        pp, tg = rates[(model, threads, who, target, "pp")], rates[(model, threads, who, target, "tg")]
        peer = [k for k in keys if k[0] == model and k[1] == threads and k[2] == "llama.cpp"]
        ratio = ["-", "-"]
        if who == "chorus" and peer:
            for i, test in enumerate(("pp", "tg")):
                p, mine = rates[peer[0] + (test,)], rates[(model, threads, who, target, test)]
                if p and mine:
                    ratio[i] = f"{statistics.median(mine) / statistics.median(p):.2f}x"
        path = rates.get((model, threads, who, target, "path"), f"llama.cpp {target}")
        rows.append((model, threads, path, cell(pp), cell(tg), ratio[0], ratio[1]))
    md_table(("model", "threads", "path", "pp tok/s", "tg tok/s", "pp vs llama.cpp", "tg vs llama.cpp"), rows)


# --- ab-pp-tg: interleaved A/B (and llama.cpp) medians per thread count ---------------------------------------


def cmd_ab_pp_tg(args):
    rows = read_json_lines(args.file)

    def build_name(path):  # .cache/peer/build-0.3.36-native/bin/llama-bench -> build-0.3.36-native
        return os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(path))))

    # Several llama.cpp builds (LLAMA_BENCH a:b): each as L:<build dir>, and L = the best build per rep and test.
    peers = sorted({r["peer"] for r in rows if r["who"] == "L" and "peer" in r})
    if len(peers) > 1:
        best = {}
        for r in rows:
            if r["who"] != "L":
                continue
            for k in ("pp", "tg"):
                if k in r:
                    key = (r["t"], r["rep"], k)
                    best[key] = max(best.get(key, 0), r[k])
            r["who"] = "L:" + build_name(r["peer"])
        rows += [{"who": "L", "t": t, "rep": rep, k: v} for (t, rep, k), v in best.items()]  # derived: no load
    whos = ["A", "B"] + ["L:" + build_name(p) for p in peers if len(peers) > 1] + ["L"]
    for t in sorted({r["t"] for r in rows}):
        for k in ("pp", "tg"):
            med, out = {}, []
            for who in whos:
                v = [r[k] for r in rows if r["t"] == t and r["who"] == who and k in r]
                if v:
                    med[who] = statistics.median(v)
                    out.append(f"{who} {med[who]:.1f} ({min(v):.1f}-{max(v):.1f})")
            ratio = f"  B/A {med['B'] / med['A']:.3f}" if "A" in med and "B" in med else ""
            if "L" in med:
                ratio += "".join(f"  {w}/L {med[w] / med['L']:.3f}" for w in ("A", "B") if w in med)
            print(f"t={t} {k}: " + " | ".join(out) + ratio)
    loads = [r["load"] for r in rows if "load" in r]
    print(f"load average {min(loads):.1f}-{max(loads):.1f}")
    for t in sorted({r["t"] for r in rows}):
        p = [r["int8"] / 1e9 for r in rows if r["t"] == t and "int8" in r]
        b = [r["read_bw"] / 1e9 for r in rows if r["t"] == t and "read_bw" in r]
        if p:
            print(f"t={t} probe: int8 {min(p):.0f}-{max(p):.0f} G ops/s, read {min(b):.1f}-{max(b):.1f} GB/s")


# --- ab: scripts/bench_table_ab.sh's folder, two binaries per row --------------------------------------------


def ab_rows(doc, group):
    """(row, value, higher is better) of one bench JSON of bench_table_ab.sh's row group."""
    if group == "pptg":
        for t, c in doc["chorus"].items():
            yield f"pp{doc['pp_tokens']} t{t}", c["pp"], True
            yield f"tg{doc['tg_tokens']} t{t}", c["tg"], True
    elif group == "depth":
        for row in doc["rows"]:
            for kv, c in row["chorus"].items():
                yield f"decode at depth {row['depth']} {kv}", c["tg"], True
    else:
        for kv, c in doc["chorus"].items():
            yield f"prefill of the {doc['doc_tokens']}-token document {kv} (s)", c["prefill_seconds"], False
        for n, row in doc["rows"].items():
            for kv, c in row["chorus"].items():
                yield f"{n} agent(s) decode {kv}", c["decode_tokens_per_s"], True


def cmd_ab(args):
    kinds = {"pptg": ("speed",), "depth": ("depth",), "agents": ("agents",)}
    vals, loads = {}, []
    for f in sorted(Path(args.dir).glob("*-r*.json")):
        m = re.fullmatch(r"([AB])-(pptg|depth|agents)-r(\d+)\.json", f.name)
        doc = read_optional(f, kinds[m.group(2)]) if m else None
        if doc is None:  # not a run's file, or a run that failed or was stopped
            continue
        loads += [doc[k] for k in ("load_average_before", "load_average_after") if k in doc]
        for name, v, higher in ab_rows(doc, m.group(2)):
            vals.setdefault(name, {"A": [], "B": [], "higher": higher})[m.group(1)].append(v)
    if not vals:
        sys.exit(f"{args.dir}: no runs of scripts/bench_table_ab.sh")
    rows = []
    for name, r in vals.items():
        a, b, higher = r["A"], r["B"], r["higher"]
        if not a or not b:
            continue
        slower = max(b) < min(a) if higher else min(b) > max(a)
        faster = min(b) > max(a) if higher else max(b) < min(a)
        verdict = "B slower beyond the spread" if slower else "B faster beyond the spread" if faster else "within"
        fmt = lambda v: f"{median2(v):.1f} ({min(v):.1f}–{max(v):.1f})"
        rows.append([name, len(a), fmt(a), fmt(b), f"{median2(b) / median2(a):.3f}", verdict])
    md_table(["row", "runs", "A median (min–max)", "B median (min–max)", "B/A", "verdict"], rows)
    if loads:
        print(f"\nload average {min(loads):.1f}–{max(loads):.1f}")


def main():
    ap = argparse.ArgumentParser(description="The tables of docs/results from chorus's raw JSON results.")
    sub = ap.add_subparsers(dest="table", required=True, metavar="TABLE")
    p = sub.add_parser("needle", help="needle runs: accuracy, agreement with f16, bytes, per case")
    p.add_argument("--positions", help="the asked facts' block positions (scripts/needle_fact_blocks.py)")
    p.add_argument("runs", nargs="+")
    p.set_defaults(run=cmd_needle)
    p = sub.add_parser("needle-nll", help="needle runs: the gold answer's NLL, paired (RUN.json[:SUFFIX])")
    p.add_argument("runs", nargs="+")
    p.add_argument("--reproduce", nargs="*", default=[], help="older runs whose outputs should be equal")
    p.set_defaults(run=cmd_needle_nll)
    p = sub.add_parser("needle-allocator", help="needle runs of a cases file: per kind, paired, issue 19's goals")
    p.add_argument("runs", nargs="+")
    p.add_argument("--baselines", default="kivi4,tq4/tq3")
    p.set_defaults(run=cmd_needle_allocator)
    p = sub.add_parser("allocator", help="eval kld outputs CORPUS_*.json: policy vs uniform at equal bytes")
    p.add_argument("dirs", nargs="+", metavar="DIR")
    p.set_defaults(run=cmd_allocator)
    p = sub.add_parser("speed-table", help="scripts/bench_table.sh's folder: the markdown speed table")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(run=cmd_speed_table)
    p = sub.add_parser("cpu-targets", help="scripts/cpu_targets_bench.sh's JSON lines")
    p.add_argument("file", metavar="FILE.jsonl")
    p.set_defaults(run=cmd_cpu_targets)
    p = sub.add_parser("ab-pp-tg", help="scripts/ab_gemma_pp_tg.sh's JSON lines")
    p.add_argument("file", metavar="FILE.jsonl")
    p.set_defaults(run=cmd_ab_pp_tg)
    p = sub.add_parser("ab", help="scripts/bench_table_ab.sh's folder: two binaries per row, B/A")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(run=cmd_ab)
    args = ap.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
