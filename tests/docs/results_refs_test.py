"""Every results file is referenced: a test that fails on an orphan in docs/results.

An entry is a top-level file or folder of docs/results, or an entry of docs/results/raw/ (raw data kept
for a per-topic summary). It is referenced when its name, or its path relative to docs/results, appears
in a tracked file outside itself: a page (any .md, docs/results/*.md included), README.md, scripts/,
tests/, src/, tools/, bench/. Not counted as references:
  - docs/results/INDEX.md: it lists every entry (scripts/results_index.py), so counting it would make
    this test pass on any file;
  - this test (its examples are names);
  - the other raw files of docs/results (.json, .txt, .log ...): a log naming its own output is not a
    page that explains it.
A folder counts as referenced when `NAME/` or `results/NAME` appears; the files inside it are covered
by that reference.

Fix an orphan by naming it on the results page of its topic (a raw JSON next to the summary that
quotes it), or by moving superseded raw data under docs/results/raw/TOPIC/ (git mv) and naming that
folder on the topic's page.

Run: python3 tests/docs/results_refs_test.py   (ctest runs it: results_refs)
"""
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = "docs/results"
INDEX = RESULTS + "/INDEX.md"
SELF = "tests/docs/results_refs_test.py"


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    return [f for f in out.decode("utf-8").split("\0") if f and os.path.isfile(os.path.join(ROOT, f))]


def results_entries(files):
    """Paths relative to docs/results: top-level entries and raw/'s entries (raw itself is a folder)."""
    entries = set()
    for f in files:
        if not f.startswith(RESULTS + "/"):
            continue
        parts = f[len(RESULTS) + 1:].split("/")
        if parts[0] == "raw" and len(parts) > 1:
            entries.add("raw/" + parts[1])
        else:
            entries.add(parts[0])
    return sorted(entries)


def is_source(f):
    """Whether f may hold a reference (see the module's comment)."""
    if f in (INDEX, SELF):
        return False
    if f.startswith(RESULTS + "/"):
        return f.endswith(".md")
    return True


def read_text(f):
    with open(os.path.join(ROOT, f), "rb") as fh:
        data = fh.read()
    if b"\0" in data:
        return None  # binary (PNG ...)
    return data.decode("utf-8", errors="replace")


def patterns(entry, is_dir):
    """Regular expressions that count as a reference to entry."""
    name = entry.rsplit("/", 1)[-1]
    before = r"(?<![\w.-])"
    after = r"(?![\w-])"
    if is_dir:
        pats = [before + re.escape(name) + "/", r"results/" + re.escape(entry) + after]
        if entry != name:
            pats.append(before + re.escape(entry) + after)
        return [re.compile(p) for p in pats]
    return [re.compile(before + re.escape(name) + r"(?![\w-])(?!\.\w)")]


def orphans(files=None):
    files = tracked_files() if files is None else files
    texts = {}
    for f in files:
        if is_source(f):
            t = read_text(f)
            if t is not None:
                texts[f] = t
    result = []
    for entry in results_entries(files):
        own = RESULTS + "/" + entry
        is_dir = os.path.isdir(os.path.join(ROOT, own))
        pats = patterns(entry, is_dir)
        found = False
        for f, t in texts.items():
            if f == own or f.startswith(own + "/"):
                continue
            if any(p.search(t) for p in pats):
                found = True
                break
        if not found:
            result.append(entry)
    return result


class ResultsReferences(unittest.TestCase):
    def test_every_results_entry_is_referenced(self):
        found = orphans()
        self.assertEqual(found, [], "\n%d results entr%s referenced by nothing but INDEX.md (name each on its "
                         "topic's results page, or git mv superseded raw data under docs/results/raw/TOPIC/ and "
                         "name that folder there):\n  %s" % (len(found), "y" if len(found) == 1 else "ies",
                                                              "\n  ".join(found)))

    def test_patterns_need_the_whole_name(self):
        (p,) = patterns("x-speed.md", False)
        self.assertTrue(p.search("see `x-speed.md`."))
        self.assertTrue(p.search("docs/results/x-speed.md)"))
        self.assertFalse(p.search("model-x-speed.md"))
        self.assertFalse(p.search("x-speed.md.bak"))
        (p,) = patterns("x-run.json", False)
        self.assertFalse(p.search("x-run.jsonl"))
        dir_pats = patterns("table-x", True)
        self.assertTrue(any(q.search("docs/results/table-x/table.md") for q in dir_pats))
        self.assertTrue(any(q.search("--out docs/results/table-x") for q in dir_pats))
        self.assertFalse(any(q.search("docs/results/table-x2/table.md") for q in dir_pats))
        self.assertFalse(any(q.search("the table-x run") for q in dir_pats))
        raw_pats = patterns("raw/x-needle", True)
        self.assertTrue(any(q.search("(in `raw/x-needle/`)") for q in raw_pats))

    def test_index_is_not_a_reference(self):
        self.assertFalse(is_source(INDEX))
        self.assertFalse(is_source(SELF))
        self.assertFalse(is_source(RESULTS + "/scale-out.json"))
        self.assertTrue(is_source(RESULTS + "/scale-out.md"))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--list":
        print("\n".join(orphans()))
        sys.exit(0)
    unittest.main()
