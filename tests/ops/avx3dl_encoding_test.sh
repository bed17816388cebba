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
  [ -f "$bin" ] || { echo "avx3dl_encoding_test: no such binary: $bin" >&2; exit 1; }
  # One line per VEX-encoded vpdp* instruction: the function it sits in, then the instruction.
  hits=$(objdump -d --no-show-raw-insn -C "$bin" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $0; next }
    /\{vex\} *vpdp/ { print fn " :: " $0 }')
  total=$(printf '%s' "$hits" | grep -c . || true)
  wrong=$(printf '%s' "$hits" | grep -v 'N_AVX2::mm::avxvnni::' || true)
  if [ -n "$wrong" ]; then
    echo "FAIL $bin: VEX-encoded vpdp* outside the AVX2 avxvnni kernels:" >&2
    head -n 5 <<< "$wrong" >&2
    echo "  ... $(grep -c . <<< "$wrong") in all" >&2
    bad=1
  else
    echo "ok $bin: $total VEX vpdp* instructions, all in N_AVX2::mm::avxvnni"
  fi
done
exit $bad
