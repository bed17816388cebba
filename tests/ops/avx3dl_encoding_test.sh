#!/usr/bin/env bash
# The VEX (AVX-VNNI) vpdpbusd / vpdpwssd encodings may appear only in the AVX2 target's avxvnni
# kernels, which run only where the CPU reports AVX-VNNI. Anywhere else they are a SIGILL on CPUs
# with AVX-512 VNNI but no AVX-VNNI (AMD Zen 4, Intel Ice Lake): Highway 1.0.3's AVX3_DL target
# string enables "avxvnni", so GCC picks the VEX form for 256-bit intrinsics unless told otherwise
# (src/ops/int8_x86-inl.h forces EVEX there). Seen on a Zen 4 VM: every K-quant matmul crashed.
# usage: avx3dl_encoding_test.sh BINARY...
set -euo pipefail
command -v objdump >/dev/null || { echo "avx3dl_encoding_test: objdump not found (binutils)" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
bad=0
for bin in "$@"; do
  # A build of only some targets (scripts/cross_arm.sh builds the *_test executables, not the chorus
  # tool) has nothing here to check -> ctest's skip code; the Release build of scripts/test.sh has all.
  [ -f "$bin" ] || { echo "skip $bin: not built"; exit 77; }
  # x86-64 binaries only (scripts/cross_arm.sh's aarch64 build: nothing to check) -> ctest's skip code.
  if ! objdump -f "$bin" 2>/dev/null | grep -q 'x86-64'; then echo "skip $bin: not an x86-64 binary"; exit 77; fi
  # One pass over the disassembly: a line per VEX-encoded vpdp* instruction (the function it sits in,
  # then the instruction), and last the number of AVX2 AVX-VNNI kernel functions seen.
  out=$(objdump -d --no-show-raw-insn -C "$bin" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $0; if (fn ~ /N_AVX2::mm::avxvnni::/) ++kernels; next }
    /\{vex\} *vpdp/ { print fn " :: " $0 }
    END { print "kernels " kernels + 0 }')
  kernels=${out##*kernels }
  hits=$(sed '$d' <<< "$out")
  total=$(printf '%s' "$hits" | grep -c . || true)
  wrong=$(printf '%s' "$hits" | grep -v 'N_AVX2::mm::avxvnni::' || true)
  # The AVX2 target's AVX-VNNI kernels always hold VEX vpdpbusd: none marked means this objdump does not
  # print the {vex} prefix, and the check above would pass blind.
  if [ "$total" = 0 ] && [ "$kernels" -gt 0 ]; then
    echo "FAIL $bin: objdump marks no instruction {vex}, so VEX and EVEX vpdpbusd cannot be told apart" >&2
    bad=1
  elif [ -n "$wrong" ]; then
    echo "FAIL $bin: VEX-encoded vpdp* outside the AVX2 avxvnni kernels:" >&2
    head -n 5 <<< "$wrong" >&2
    echo "  ... $(grep -c . <<< "$wrong") in all" >&2
    bad=1
  else
    echo "ok $bin: $total VEX vpdp* instructions, all in N_AVX2::mm::avxvnni"
  fi
done
exit $bad
