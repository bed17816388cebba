#!/usr/bin/env bash
# Builds llama.cpp's own tools (llama-server, llama-bench, llama-batched-bench, llama-perplexity,
# llama-quantize, llama-cli) from the llama.cpp sources vendored in the llama-cpp-python sdist: the
# peer of every speed comparison. Once, outside CI (~20 min on 2 cores); cached.
#
# Usage: scripts/build_peer.sh [--variant native|noamx|avx2] [--print-dir] [-h|--help]
#   --variant native  -DGGML_NATIVE=ON (the peer at its best on this machine; default)
#   --variant noamx   -DGGML_NATIVE=ON with AMX off (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16): the
#                     best build that runs on a CPU whose AMX path crashes (ggml_backend_amx_mul_mat
#                     SIGSEGV seen here on a Sapphire Rapids VM, every model)
#   --variant avx2    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#                     -DGGML_BMI2=ON, every AVX-512 / AVX-VNNI option OFF (an AVX2-only CPU)
#   --print-dir       print the bin/ directory of the variant (build it first if missing)
#   env CHORUS_PEER_DIR (default .cache/peer) holds the sdist, sources and builds;
#   env LLAMA_CPP_PYTHON_VERSION (default 0.3.36) pins the sdist; env CHORUS_PEER_VARIANT sets the default
#   variant (what `chorus bench` and scripts/bench_table.sh use through --print-dir).
# Prints the bin/ directory on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
variant=${CHORUS_PEER_VARIANT:-native}
print_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant=${2:?--variant needs native, noamx or avx2}; shift ;;
    --print-dir) print_only=1 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_peer.sh: unknown option: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$variant" in
  native) flags=(-DGGML_NATIVE=ON) ;;
  noamx) flags=(-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
                "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16") ;;
  avx2) flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
               -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
               -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF) ;;
  *) echo "build_peer.sh: --variant must be native, noamx or avx2, got '$variant'" >&2; exit 2 ;;
esac

ver=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
dir=${CHORUS_PEER_DIR:-$root/.cache/peer}
src="$dir/llama_cpp_python-$ver/vendor/llama.cpp"
out="$dir/build-$ver-$variant"
tools=(llama-server llama-bench llama-batched-bench llama-perplexity llama-quantize llama-cli)
have_all() { for t in "${tools[@]}"; do [ -x "$out/bin/$t" ] || return 1; done; }
if have_all; then echo "$out/bin"; exit 0; fi
[ "$print_only" = 1 ] && echo "build_peer.sh: $variant peer not built yet, building it now" >&2

mkdir -p "$dir"
if [ ! -d "$src" ]; then
  echo "==> pip download --no-binary :all: --no-deps llama-cpp-python==$ver" >&2
  python3 -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$ver" -d "$dir" >&2
  tar -xzf "$dir/llama_cpp_python-$ver.tar.gz" -C "$dir"
fi
[ -f "$src/CMakeLists.txt" ] || { echo "build_peer.sh: no llama.cpp sources in $src" >&2; exit 1; }
echo "==> cmake $src ($variant: ${flags[*]})" >&2
cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
  "${flags[@]}" >&2
echo "==> ninja ${tools[*]} (about 20 min on 2 cores)" >&2
ninja -C "$out" "${tools[@]}" >&2
have_all || { echo "build_peer.sh: build finished without every tool in $out/bin" >&2; exit 1; }
echo "$out/bin"
