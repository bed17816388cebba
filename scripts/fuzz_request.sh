#!/usr/bin/env bash
# Build the OpenAI request-parser libFuzzer target with clang (ASan+UBSan) and fuzz it for SECONDS
# (default 300). Usage: scripts/fuzz_request.sh [SECONDS] — crashes land in build-fuzz/request_artifacts/.
# Seeds: fuzz/corpus/request (committed); new inputs go to build-fuzz/request_corpus.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-300}
build="$root/build-fuzz"
cd "$root"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCHORUS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" request_fuzz
mkdir -p "$build/request_corpus" "$build/request_artifacts"
"$build/fuzz/request_fuzz" "$build/request_corpus" fuzz/corpus/request \
  -dict=fuzz/request.dict -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$build/request_artifacts/"
