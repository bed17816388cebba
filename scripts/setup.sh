#!/usr/bin/env bash
# Fresh-machine setup for chorus (idempotent: safe to run again; finished steps are cheap).
#
# Usage: scripts/setup.sh [--no-build] [--with-peer] [-h|--help]
#   1. apt-get update (once per run) + apt-get install -y of the Debian build/test packages
#   2. python3 -m pip install numpy openai selenium matplotlib openai-agents (reference oracles; the server tests' real
#      client; the dashboard's browser test, with apt chromium + chromium-driver; scripts/plot_results.py)
#   3. scripts/fetch_model.sh  → models/SmolLM2-135M-Instruct.Q4_1.gguf (cached)
#      scripts/fetch_model.sh gemma3-270m → models/gemma-3-270m-q4_k_m.gguf (cached, sha256-verified)
#      scripts/fetch_encoder.sh → models/all-MiniLM-L6-v2/ (sentence encoder, cached)
#      scripts/fetch_xgrammar.sh → .cache/xgrammar-0.2.9/ (the grammar engine's source, PyPI sdist,
#      sha256-verified; the build needs it, so this step runs with --no-build too)
#      scripts/fetch_hiredis.sh → .cache/hiredis-3.5.0/ (the block store's Redis client with TLS, the
#      C sources vendored in the hiredis PyPI sdist, sha256-verified; the build needs it too)
#   4. cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C build
#
#   --no-build   skip step 4
#   --with-peer  also pip install llama-cpp-python (the reference peer for scripts/ref/;
#                it compiles llama.cpp, ~15 min on 2 cores; never part of CI)
#   env BUILD_DIR (default build) and BUILD_TYPE (default Release) change step 4
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build=1
peer=0
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    --with-peer) peer=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option: $arg (try --help)" >&2; exit 2 ;;
  esac
done

step() { printf '\n==> %s\n' "$*"; }
run() { printf '    $ %s\n' "$*"; "$@"; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "setup.sh: not root and no sudo; apt steps will likely fail" >&2
  fi
fi

apt_pkgs=(build-essential cmake ninja-build g++ clang clang-format libgtest-dev libgmock-dev
          libbenchmark-dev libhwy-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          libxxhash-dev libpcre2-dev libcpp-httplib-dev python3 python3-pip
          redis-server haproxy  # the replicas' block store (--kv-store) and its tests
          libssl-dev  # the block store's keyed MAC (src/remote/value_mac.h) and TLS (hiredis_ssl)
          chromium chromium-driver)  # the dashboard's browser test (tests/server/dashboard_browser_test.py)

# ---- 1. Debian packages ------------------------------------------------------------------
step "1/4 Debian packages"
missing=()
for p in "${apt_pkgs[@]}"; do
  # Installed for this machine's architecture (or arch-independent): with Debian multiarch (the
  # :arm64 libraries of scripts/cross_arm.sh) dpkg lists one status per architecture.
  if ! dpkg-query -W -f='${Architecture} ${Status}\n' "$p" 2>/dev/null |
       grep -qE "^($(dpkg --print-architecture)|all) install ok installed$"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "    all ${#apt_pkgs[@]} packages already installed"
else
  echo "    missing: ${missing[*]}"
  run $sudo apt-get update
  installable=()
  for p in "${missing[@]}"; do
    # 'Candidate: (none)' or no output means the package does not exist in the configured repos.
    cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
      echo "    WARNING: no apt candidate for '$p' — skipped" >&2
    else
      installable+=("$p")
    fi
  done
  if [ ${#installable[@]} -gt 0 ]; then
    run $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${installable[@]}"
  fi
fi

# pip into whichever python3 is first on PATH; Debian's system python is "externally
# managed" (PEP 668), so retry with --break-system-packages there.
pip_install() {
  if ! python3 -m pip install "$@"; then
    echo "    retrying with --break-system-packages" >&2
    run python3 -m pip install --break-system-packages "$@"
  fi
}

# ---- 2. Python packages ----------------------------------------------------------------------
step "2/4 python3 numpy (reference oracles), openai (the server tests drive chorus serve with it), selenium (the dashboard's browser test), matplotlib (scripts/plot_results.py)"
for pkg in numpy openai selenium matplotlib jsonschema; do
  if python3 -c "import $pkg" 2>/dev/null; then
    echo "    $pkg $(python3 -c "import $pkg; print($pkg.__version__)") already installed"
  else
    echo "    $ python3 -m pip install --quiet $pkg"
    pip_install --quiet "$pkg"
  fi
done

# The OpenAI Agents SDK: a real agent framework the tools test runs unchanged (pip name openai-agents).
if python3 -c "import agents" 2>/dev/null; then
  echo "    openai-agents already installed"
else
  echo "    $ python3 -m pip install --quiet openai-agents"
  pip_install --quiet openai-agents
fi

if [ "$peer" -eq 1 ]; then
  step "2b/4 llama-cpp-python (reference peer; compiles llama.cpp, ~15 min)"
  if python3 -c 'import llama_cpp' 2>/dev/null; then
    echo "    llama-cpp-python $(python3 -c 'import llama_cpp; print(llama_cpp.__version__)') already installed"
  else
    jobs=$(nproc 2>/dev/null || echo 2)
    echo "    $ CMAKE_BUILD_PARALLEL_LEVEL=$jobs python3 -m pip install llama-cpp-python"
    CMAKE_BUILD_PARALLEL_LEVEL=$jobs pip_install llama-cpp-python
  fi
fi

# ---- 3. model ------------------------------------------------------------------------------
step "3/4 model, encoder, xgrammar and hiredis sources"
echo "    $ scripts/fetch_model.sh"
model=$("$root/scripts/fetch_model.sh")
echo "    model: $model ($(stat -c %s "$model") bytes)"
echo "    $ scripts/fetch_model.sh gemma3-270m"
model=$("$root/scripts/fetch_model.sh" gemma3-270m)
echo "    model: $model ($(stat -c %s "$model") bytes)"
echo "    $ scripts/fetch_encoder.sh"
encoder=$("$root/scripts/fetch_encoder.sh")
echo "    encoder: $encoder ($(du -sb "$encoder" | cut -f1) bytes)"
echo "    $ scripts/fetch_xgrammar.sh"
xgrammar=$("$root/scripts/fetch_xgrammar.sh")
echo "    xgrammar source: $xgrammar"
echo "    $ scripts/fetch_hiredis.sh"
hiredis=$("$root/scripts/fetch_hiredis.sh")
echo "    hiredis source: $hiredis"

# ---- 4. build ------------------------------------------------------------------------------
if [ "$build" -eq 1 ]; then
  build_dir=${BUILD_DIR:-build}
  build_type=${BUILD_TYPE:-Release}
  step "4/4 configure + build ($build_type, $build_dir/)"
  run cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type"
  run ninja -C "$build_dir"
else
  step "4/4 build skipped (--no-build)"
fi

step "done"
