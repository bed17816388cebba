#!/usr/bin/env bash
# Formatting check of the C++ lines changed since a base commit: clang-format --dry-run --Werror with
# the repository's .clang-format, on the changed line ranges of each changed C++ file (tracked files of
# the working tree against BASE, so uncommitted edits count). Untouched lines are not checked: the tree
# is not reformatted wholesale, a file takes the house style where it is edited (STYLE.md).
# Usage: scripts/check_format.sh [BASE]
#   BASE defaults to `git merge-base HEAD origin/main` when origin/main exists, else HEAD~1.
# Exit status: 0 formatted (or no C++ line changed), 1 a changed line is not, 2 a usage or setup error.
# Fix: `git clang-format BASE` reformats exactly the changed lines.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
if [ $# -gt 1 ]; then
  echo "check_format.sh: expected at most one argument (a base commit), got $#: $*" >&2
  exit 2
fi

if [ $# -eq 1 ]; then
  base=$1
elif git rev-parse -q --verify origin/main >/dev/null; then
  base=$(git merge-base HEAD origin/main)
elif git rev-parse -q --verify HEAD~1 >/dev/null; then
  base=HEAD~1
else
  echo "check_format.sh: no origin/main and no parent commit to compare with: nothing to check"
  exit 0
fi
if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
  echo "check_format.sh: '$base' is not a commit (give a branch, tag or hash)" >&2
  exit 2
fi

clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format.sh: $clang_format not found: install clang-format (scripts/setup.sh does)," \
       "or skip this stage with scripts/test.sh --no-format" >&2
  exit 2
fi

# Changed line ranges per file, from a zero-context diff: "FILE START:END" (added or modified lines only).
ranges=$(git diff -U0 --no-color --no-ext-diff --diff-filter=ACMR "$base" -- \
           '*.cc' '*.h' '*.inc' '*.cpp' '*.hpp' |
         awk '/^\+\+\+ / { file = substr($0, 7); next }
              /^@@ / {
                split($3, a, ",");            # +START[,COUNT]
                start = substr(a[1], 2); count = (2 in a) ? a[2] : 1;
                if (count > 0) print file, start ":" (start + count - 1);
              }')
if [ -z "$ranges" ]; then
  echo "check_format.sh: no C++ lines changed since $(git rev-parse --short "$base")"
  exit 0
fi

status=0
checked=0
for file in $(printf '%s\n' "$ranges" | awk '{print $1}' | sort -u); do
  lines=()
  while read -r f r; do
    [ "$f" = "$file" ] && lines+=("--lines=$r")
  done <<<"$ranges"
  checked=$((checked + 1))
  if ! "$clang_format" --style=file --dry-run --Werror "${lines[@]}" "$file"; then
    status=1
  fi
done
if [ "$status" -ne 0 ]; then
  echo "check_format.sh: changed lines above are not formatted (.clang-format); fix them with:" \
       "git clang-format $(git rev-parse --short "$base")" >&2
else
  echo "check_format.sh: the changed lines of $checked C++ file(s) since $(git rev-parse --short "$base") are formatted"
fi
exit "$status"
