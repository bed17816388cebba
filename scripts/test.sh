#!/usr/bin/env bash
# The whole test suite: dependencies + model (cached), the format of the changed C++ lines
# (scripts/check_format.sh), a Release build with every test; the unit tests and a real-model subset
# (label asan-model) under AddressSanitizer + UBSan; the engine and KV tests (label tsan) under TSan.
# Usage: scripts/test.sh [--no-format] [--no-asan] [--no-tsan]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
format=1
asan=1
tsan=1
for arg in "$@"; do
  case "$arg" in
    --no-format) format=0 ;;
    --no-asan) asan=0 ;;
    --no-tsan) tsan=0 ;;
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option: $arg (try --help)" >&2; exit 2 ;;
  esac
done
jobs=$(nproc 2>/dev/null || echo 2)
stage() { echo "==> $1 ($(date -u +%H:%M:%S), ${SECONDS}s so far)"; }

scripts/setup.sh --no-build
if [ "$format" = 1 ]; then
  stage "Format of the C++ lines changed since origin/main (or the last commit)"
  scripts/check_format.sh
fi
stage "Release build + all tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build
ctest --test-dir build --output-on-failure -j "$jobs"

# Sanitizer builds are optimized (RelWithDebInfo: -O2 -g) so the real-model tests run in minutes.
if [ "$asan" = 1 ]; then
  stage "ASan + UBSan build of the unit tests and the asan-model tests; run them"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_SANITIZE=address >/dev/null
  # Only what this pass runs (the CLI, benches and other real-model tests are covered by Release).
  ninja -C build-asan tests_unit tests_asan-model
  export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L asan-model
fi

if [ "$tsan" = 1 ]; then
  stage "ThreadSanitizer build of the tests labelled tsan (KV, CoMix, scheduler, server); run them"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_SANITIZE=thread >/dev/null
  ninja -C build-tsan tests_tsan
  # The real-model scheduler cases are slow under TSan (measured: 246 s and 161 s for the first two on 2
  # cores); one of them (concurrent shared prompts, the in-flight dedup) stands for the rest, which run the
  # same threads (the forward's pool) — engine_loop_test covers the loop on a tiny model. Release runs all.
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L tsan \
      -E 'ManyRequests|Scheduler\.(LaterRequests|PrefillIsChunked|BudgetQueues|CancelFrees)'
fi
stage "done"
