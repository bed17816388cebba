#!/usr/bin/env python3
"""scripts/results.py against tables it printed before: each case runs one table on committed raw data in
docs/results and compares the output, byte for byte, with the committed table made from the same data
(a change of a number's format, a row's order or a pairing fails here). Then the schema check: a report
of another schema version, or of a kind the table does not read, stops the reader with its file's name.

Run from the repository root (ctest does). Exit 1 naming each case that failed.
"""
import glob
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
R = "docs/results"
# (table arguments, the committed output they must reproduce)
CASES = [
    (["speed-table", f"{R}/table-2026-12-05-xeon-amx"], f"{R}/table-2026-12-05-xeon-amx/table.md"),
    (["cpu-targets", f"{R}/cpu-targets-2026-12-01.jsonl"], f"{R}/cpu-targets-2026-12-01.md"),
    (["needle-allocator"] + sorted(glob.glob(f"{ROOT}/{R}/allocator/needle2/a1/*.json")),
     f"{R}/allocator/needle2/a1/summary.txt"),
    (["ab", f"{R}/raw/table-ab-2026-12-07-6rounds"], f"{R}/raw/table-ab-2026-12-07-6rounds/table.md"),
]


def run(args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "results.py")] + args, cwd=ROOT,
                          capture_output=True, text=True)


def main():
    errors = []
    for args, expected in CASES:
        r = run(args)
        want = (ROOT / expected).read_text()
        if r.returncode != 0 or r.stdout != want:
            got, exp = r.stdout.splitlines(), want.splitlines()
            first = next((i for i, (a, b) in enumerate(zip(got, exp)) if a != b), min(len(got), len(exp)))
            errors.append(f"results.py {args[0]}: output differs from {expected} at line {first + 1} "
                          f"(rc {r.returncode}; {r.stderr.strip()[-200:]})")
    run_file = f"{ROOT}/{R}/allocator/needle/f16.json"
    with tempfile.TemporaryDirectory() as tmp:
        doc = json.loads(pathlib.Path(run_file).read_text())
        for schema, kind, ok, needle in (("chorus.eval/1", "needle", True, ""),
                                         ("chorus.eval/2", "needle", False, "schema 'chorus.eval/2'"),
                                         ("chorus.eval/1", "kld", False, "kind 'kld'")):
            path = pathlib.Path(tmp) / "run.json"
            path.write_text(json.dumps(dict(doc, schema=schema, kind=kind)))
            r = run(["needle", str(path)])
            if ok and (r.returncode != 0 or r.stdout != run(["needle", run_file]).stdout):
                errors.append(f"a {schema} {kind} report is not read as its unversioned twin: {r.stderr.strip()}")
            if not ok and (r.returncode == 0 or needle not in r.stderr or str(path) not in r.stderr):
                errors.append(f"a {schema} {kind} report was not refused by name (rc {r.returncode}: "
                              f"{r.stderr.strip()!r})")
    for e in errors:
        print(e)
    print(f"results_reader: {'FAILED, ' + str(len(errors)) + ' problem(s)' if errors else 'ok'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
