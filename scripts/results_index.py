#!/usr/bin/env python3
"""Generates docs/results/INDEX.md: one row per results entry, read from the entries themselves.

An entry is a top-level file or folder of docs/results, or an entry of docs/results/raw/ (the same
entries tests/docs/results_refs_test.py requires a page to reference). Per entry:
  claim   a page's title (its first heading); a JSON file's own description (source / note / command)
          or its top-level fields; a text file's first line that is not `uptime` output; a folder's
          table.md title, else its first file's
  number  the first bold figure of a page (**…** with a digit), a JSON file's first numeric
          top-level field, a text file's first figure with a unit (tok/s, GB/s, ms, %, ×, PPL …)
  commit  the commit that last touched it (git log -1 --format=%h -- PATH), and its date (%cs)
  CPU     the processor the entry names, if it names one (a "cpu" field, or a CPU model in the text)
Nothing is measured here and nothing is looked up elsewhere: a row says only what its file says.

Usage: python3 scripts/results_index.py            writes docs/results/INDEX.md
       python3 scripts/results_index.py --check    exits 1 if INDEX.md differs from what it would write
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = "docs/results"
INDEX = RESULTS + "/INDEX.md"
MAX_CELL = 110
READ_BYTES = 400_000

# CPU models as the files write them; a name may end in one parenthesized group ("AMD EPYC (Zen 3)").
CPU_MODEL = re.compile(r"(?:Intel\(R\) Xeon\(R\)|AMD EPYC|AMD Ryzen)[^\"\n,;|()]*(?:\([^()\n]*\))?"
                       r"|Sapphire Rapids|Zen 4|Zen 3|Ice Lake")
UNIT_FIGURE = re.compile(
    r"[-+−]?\d[\d,.]*\s?(?:tok/s|t/s|tokens/s|GB/s|GiB/s|MB/s|%|×|(?:ms|µs|us|x|MiB|MB|KiB|KB|nats)\b)"
    r"|\b(?:PPL|ppl|KLD|KL|top-1)\b[ :=]*[-+−]?\d[\d.,]*")
# A JSON file's headline fields, in this order, before any other numeric field.
JSON_KEYS = ("ppl", "kl_mean", "top1_agree", "ratio", "open_over_closed", "base_ppl")


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def tracked():
    return [f for f in git("ls-files", "-z", "--", RESULTS).split("\0") if f]


def entries(files):
    out = set()
    for f in files:
        parts = f[len(RESULTS) + 1:].split("/")
        if parts[0] == "raw" and len(parts) > 1:
            out.add("raw/" + parts[1])
        elif f != INDEX:
            out.add(parts[0])
    return sorted(out)


def read(path):
    try:
        with open(os.path.join(ROOT, path), "rb") as fh:
            data = fh.read(READ_BYTES)
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def cell(text):
    text = re.sub(r"\s+", " ", text or "").strip()
    if len(text) > MAX_CELL:
        text = text[:MAX_CELL - 1].rstrip() + "…"
    if text.count("`") % 2:
        text = text.replace("`", "")
    return text.replace("|", "\\|")


def md_claim(text):
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def md_number(text):
    """The first bold span holding a figure with a unit, else the first such figure."""
    for m in re.finditer(r"\*\*([^*\n]{1,80})\*\*", text):
        if UNIT_FIGURE.search(m.group(1)):
            return m.group(1)
    m = UNIT_FIGURE.search(text)
    return m.group(0) if m else ""


def text_claim(text):
    for line in text.splitlines():
        s = line.strip()
        if s and not re.match(r"^\d\d:\d\d:\d\d up ", s):
            return s
    return ""


def text_number(text):
    m = UNIT_FIGURE.search(text)
    return m.group(0) if m else ""


def find_cpu(text):
    m = re.search(r'"cpu"\s*:\s*"([^"]+)"', text)
    if m:
        return m.group(1)
    m = re.search(r"\bcpu: ([^\n|,;]+)", text)
    if m:
        return m.group(1).strip()
    m = CPU_MODEL.search(text)  # the first one the file names
    return m.group(0).strip() if m else ""


def json_row(text):
    try:
        d = json.loads(text)
    except ValueError:
        return text_claim(text), text_number(text)
    if not isinstance(d, dict):
        return "JSON list of %d items" % len(d), ""
    claim = ""
    for k in ("source", "note", "command", "mode"):
        if isinstance(d.get(k), str) and d[k].strip():
            claim = d[k]
            break
    if not claim:
        claim = "JSON: " + ", ".join(list(d)[:8]) + (", …" if len(d) > 8 else "")
    numeric = [(k, v) for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    numeric.sort(key=lambda kv: JSON_KEYS.index(kv[0]) if kv[0] in JSON_KEYS else len(JSON_KEYS))
    number = ""
    if numeric:
        k, v = numeric[0]
        number = "%s = %s" % (k, ("%.6g" % v) if isinstance(v, float) else v)
    return claim, number


def jsonl_row(text):
    lines = [l for l in text.splitlines() if l.strip()]
    claim, number = "", "%d records" % len(lines)
    if lines:
        try:
            first = json.loads(lines[0])
            if isinstance(first, dict):
                claim = "JSON lines: " + ", ".join(list(first)[:8])
        except ValueError:
            claim = text_claim(text)
    return claim, number


def file_row(path):
    text = read(path)
    name = os.path.basename(path)
    if text is None:
        kind = os.path.splitext(name)[1].lstrip(".") or "binary"
        return "%s figure / binary: %s" % (kind.upper(), name), "", ""
    if name.endswith(".md"):
        claim, number = md_claim(text), md_number(text)
    elif name.endswith(".json"):
        claim, number = json_row(text)
    elif name.endswith(".jsonl"):
        claim, number = jsonl_row(text)
    else:
        claim, number = text_claim(text), text_number(text)
    return claim, number, find_cpu(text)


def dir_row(path, files):
    inside = sorted(f for f in files if f.startswith(path + "/"))
    lead = None
    for pick in ("table.md", "README.md", "summary.md"):
        if path + "/" + pick in inside:
            lead = path + "/" + pick
            break
    if lead is None:
        mds = [f for f in inside if f.endswith(".md")]
        lead = mds[0] if mds else (inside[0] if inside else None)
    claim, number, cpu = file_row(lead) if lead else ("", "", "")
    if not cpu:
        for f in inside:
            if f.endswith("machine.json") or f.endswith(".json"):
                t = read(f)
                cpu = find_cpu(t) if t else ""
                if cpu:
                    break
    lead_name = lead[len(path) + 1:] if lead else ""
    claim = "%s (%d files; %s)" % (claim, len(inside), lead_name) if claim else "%d files" % len(inside)
    return claim, number, cpu


def rows():
    files = tracked()
    out = []
    for e in entries(files):
        path = RESULTS + "/" + e
        is_dir = any(f.startswith(path + "/") for f in files)
        claim, number, cpu = dir_row(path, files) if is_dir else file_row(path)
        log = git("log", "-1", "--format=%h %cs", "--", path).split()
        commit, date = (log + ["", ""])[:2]
        link = "[%s](%s)" % (e + ("/" if is_dir else ""), e + ("/" if is_dir else ""))
        out.append((e.endswith(".md") and not is_dir, link, cell(claim), cell(number), commit, date, cell(cpu)))
    return out


def render():
    lines = [
        "# Results index",
        "",
        "Generated by `python3 scripts/results_index.py` from the files themselves; do not edit by hand.",
        "One row per entry of docs/results (and of docs/results/raw/): the claim is the page's title or",
        "the file's own first line, the number the first figure it states, the commit the last one that",
        "touched it (with that commit's date), the CPU the one it names. Each file is explained by the",
        "topic page that references it (tests/docs/results_refs_test.py).",
        "",
    ]
    all_rows = rows()
    for title, want_page in (("Pages", True), ("Data", False)):
        lines += ["## " + title, "", "| claim | number | file | commit | date | CPU |", "|---|---|---|---|---|---|"]
        for is_page, link, claim, number, commit, date, cpu in all_rows:
            if is_page == want_page:
                lines.append("| %s | %s | %s | %s | %s | %s |" % (claim, number, link, commit, date, cpu))
        lines.append("")
    return "\n".join(lines)


def main():
    text = render()
    target = os.path.join(ROOT, INDEX)
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        old = open(target, encoding="utf-8").read() if os.path.exists(target) else ""
        if old != text:
            print("%s is stale: run python3 scripts/results_index.py" % INDEX, file=sys.stderr)
            return 1
        return 0
    if len(sys.argv) > 1:
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(text)
    print("%s: %d entries" % (INDEX, text.count("\n| ") - 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
