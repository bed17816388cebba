#!/usr/bin/env bash
# The whole test suite: dependencies + model (cached), a Release build with every test, then the
# unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: scripts/test.sh [--no-asan]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
asan=1
for arg in "$@"; do
  case "$arg" in
    --no-asan) asan=0 ;;
    -h|--help) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option: $arg (try --help)" >&2; exit 2 ;;
  esac
done
jobs=$(nproc 2>/dev/null || echo 2)

scripts/setup.sh --no-build
echo "==> Release build + all tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
ctest --test-dir build --output-on-failure -j "$jobs"

if [ "$asan" = 1 ]; then
  echo "==> ASan + UBSan build + unit tests (tests labelled 'model' run on the real model and are skipped here)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCHORUS_SANITIZE=ON >/dev/null
  ninja -C build-asan
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE model
fi
