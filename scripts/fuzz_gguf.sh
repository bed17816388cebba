#!/usr/bin/env bash
# Build the GGUF libFuzzer target with clang (ASan+UBSan) and fuzz the reader for SECONDS (default 300).
# Usage: scripts/fuzz_gguf.sh [SECONDS]   — crashes land in build-fuzz/gguf_artifacts/.
# Seeds: fuzz/corpus/gguf (committed, regenerate with build-fuzz/fuzz/make_gguf_seeds fuzz/corpus/gguf);
# new inputs found go to build-fuzz/gguf_corpus so the committed seeds stay small.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-300}
build="$root/build-fuzz"
cd "$root"
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCHORUS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" gguf_fuzz make_gguf_seeds
if [ -z "$(ls -A fuzz/corpus/gguf 2>/dev/null)" ]; then
  mkdir -p fuzz/corpus/gguf
  "$build/fuzz/make_gguf_seeds" fuzz/corpus/gguf
fi
mkdir -p "$build/gguf_corpus" "$build/gguf_artifacts"
"$build/fuzz/gguf_fuzz" "$build/gguf_corpus" fuzz/corpus/gguf \
  -dict=fuzz/gguf.dict -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -print_final_stats=1 -artifact_prefix="$build/gguf_artifacts/"
