#!/usr/bin/env bash
# Issue 19 item 2's case set, in shards that can be run (and committed) one at a time:
#   168 cases = 3 length bands (targets 1800-2200, 3000-3600, 4400-5000 tokens: ~2K-6K real)
#   x (4 corpora x 3 needle documents + 2 generated town articles) x 4 questions each,
#   seeds 31-33; each band's cases cut into 4 shards of whole documents ($CASES, default
#   build/needle-cases: regenerated from the corpora in seconds, the same bytes every time).
# Then every shard x config through scripts/needle_allocator_eval.sh (OUT/SHARD/CONFIG.json; a
# finished one is skipped, so the script resumes), and the summary over all of them (OUT/summary.txt).
#
#   scripts/needle_case_set.sh OUT [--cases-only] [--shards "a1 a2 ..."] [--configs "f16 kivi4 ..."]
#
# Needs build/corpora (python3 scripts/make_corpora.py build/corpora) and WikiText-2's test.txt at
# ../shared/data/wikitext-2/test.txt or $WIKI (docs/EVAL.md). Cost, SmolLM2 at 1 thread: about 50 s
# per case over the 5 default configs on an idle core (the cocktail configs take most of it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/needle_case_set.sh OUT [--cases-only] [--shards LIST] [--configs LIST]}
shift
cases_only=0 shards="" configs="f16 kivi4 tq4/tq3 cocktail-kivi:4:t348:k4 cocktail-paper"
while [ $# -gt 0 ]; do
  case "$1" in
    --cases-only) cases_only=1; shift ;;
    --shards) shards=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "needle_case_set.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
wiki=${WIKI:-../shared/data/wikitext-2/test.txt}
for f in "$wiki" build/corpora/chat.txt build/corpora/code.txt build/corpora/docs.txt; do
  [ -f "$f" ] || { echo "needle_case_set.sh: missing $f (see --help)" >&2; exit 1; }
done
cases=${CASES:-build/needle-cases}
mkdir -p "$cases" "$out"
band() {  # band NAME MIN MAX SEED
  local f="$cases/band-$1.jsonl"
  [ -s "$f" ] || python3 scripts/make_needle_cases.py "$f" --corpus wiki="$wiki" --corpus chat=build/corpora/chat.txt \
    --corpus code=build/corpora/code.txt --corpus docs=build/corpora/docs.txt --needle 3 --read 2 --questions 4 \
    --min-tokens "$2" --max-tokens "$3" --seed "$4"
  # 14 documents x 4 questions (consecutive lines) -> shards of 4, 4, 3, 3 documents
  python3 - "$f" "$cases" "$1" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
docs = []
for l in lines:
    d = json.loads(l)["document"]
    if not docs or docs[-1][0] != d: docs.append((d, []))
    docs[-1][1].append(l)
n = len(docs)
sizes = [n // 4 + (1 if i < n % 4 else 0) for i in range(4)]
i = 0
for k, s in enumerate(sizes):
    with open(f"{sys.argv[2]}/{sys.argv[3]}{k + 1}.jsonl", "w") as o:
        for _, ls in docs[i:i + s]: o.write("\n".join(ls) + "\n")
    i += s
PY
}
band a 1800 2200 31
band b 3000 3600 32
band c 4400 5000 33
[ "$cases_only" = 1 ] && { wc -l "$cases"/*.jsonl; exit 0; }
[ -n "$shards" ] || shards="a1 b1 c1 a2 b2 c2 a3 b3 c3 a4 b4 c4"
for s in $shards; do
  echo "== shard $s ($(wc -l < "$cases/$s.jsonl") cases), $(date -u +%T)"
  scripts/needle_allocator_eval.sh "$out/$s" "$cases/$s.jsonl" "$configs" > /dev/null
done
python3 scripts/results.py needle-allocator "$out"/*/*.json > "$out/summary.txt" || true
cat "$out/summary.txt"
