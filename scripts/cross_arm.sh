#!/usr/bin/env bash
# The unit tests on aarch64: installs Debian's cross compiler (g++-aarch64-linux-gnu), qemu-user
# and the :arm64 builds of the libraries (Debian multiarch), cross-compiles every unit test and
# runs them under qemu-aarch64 (its default CPU has NEON with dotprod, SVE and SVE2: the Arm
# Highway targets and the NEON dotprod int8 kernels all run). Tests labelled `model` (real
# model, slow under emulation) are excluded, as in the sanitizer pass.
#
# Usage: scripts/cross_arm.sh [--no-install] [-R REGEX]
#   --no-install  skip the apt step (packages already there)
#   -R REGEX      only the tests matching REGEX (ctest -R)
#   env BUILD_DIR (default build-arm64)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
install=1
regex=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-install) install=0 ;;
    -R) regex="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cross_arm.sh: unknown option: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
bdir=${BUILD_DIR:-build-arm64}
jobs=$(nproc 2>/dev/null || echo 2)
sudo=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi
start=$(date +%s)

arm_libs=(libhwy-dev libgtest-dev libgmock-dev libfmt-dev libxxhash-dev libpcre2-dev libssl-dev)
if [ "$install" = 1 ]; then
  echo "==> Debian packages: g++-aarch64-linux-gnu qemu-user ${arm_libs[*]/%/:arm64}"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then $sudo dpkg --add-architecture arm64; fi
  $sudo apt-get update -qq
  # --no-remove: never trade a host package for an arm64 one (versions must match: multiarch).
  $sudo apt-get install -y -qq --no-remove g++-aarch64-linux-gnu qemu-user "${arm_libs[@]/%/:arm64}"
fi

echo "==> cross build ($bdir)"
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$root/scripts/aarch64-linux-gnu.cmake" >/dev/null
# The unit-test executables only: not the chorus tool (the cli_* tests that run it are labelled
# `model` and excluded below) nor the benchmarks.
mapfile -t tests < <(ninja -C "$bdir" -t targets all | sed -n 's/^\([a-z0-9_]*_test\): phony$/\1/p' | grep -v '^cli_')
ninja -C "$bdir" "${tests[@]}"
built=$(date +%s)

echo "==> unit tests under qemu-aarch64 ($(qemu-aarch64 --version | head -1))"
args=(--test-dir "$bdir" --output-on-failure -j "$jobs" -LE model)
if [ -n "$regex" ]; then args+=(-R "$regex"); fi
ctest "${args[@]}"
end=$(date +%s)
echo "cross_arm.sh: build $((built - start)) s, tests $((end - built)) s, total $((end - start)) s"
