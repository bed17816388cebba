#!/usr/bin/env bash
# The installed library from outside the tree: `cmake --install BUILD` into a temporary prefix,
# examples/hello_chorus configured and built against it alone (find_package(chorus), no path into
# this checkout but the example's own sources), then run on the real SmolLM2 model with
# examples/du_fu.txt and one question; an answer must come out. Catches: a public header that needs
# src/ or a package the config does not find, a library missing from the install or from
# chorus::chorus's link line. Usage: hello_chorus_test.sh BUILD_DIR CXX_COMPILER [LAUNCHER]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$1 cxx=$2 launcher=${3:-}
model=$root/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ]; then
  echo "hello_chorus_test: no model at $model (scripts/fetch_model.sh fetches it)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# The example is copied out first: nothing of the checkout is reachable from its folder.
cp -r "$root/examples/hello_chorus" "$work/src"
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} >/dev/null
cmake --build "$work/build"
question="Which poet was Du Fu's friend?"
out=$("$work/build/hello_chorus" "$model" "$root/examples/du_fu.txt" "$question")
echo "$out"
answer=${out#*A: }
if [[ "$out" != *"A: "* || -z "${answer//[[:space:]]/}" ]]; then
  echo "hello_chorus_test: no answer in the output above" >&2
  exit 1
fi
echo "hello_chorus_test: ok"
