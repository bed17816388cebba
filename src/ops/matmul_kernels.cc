// Per-target MatMul (Highway foreach_target): picks the kernel family for the weight type.
// Invariant: the runtime type is dispatched once per call, never inside a kernel's loops; every
// family computes a row's result independently of n_tok (bit-identical batched and alone).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1  // compile the Ice Lake+ target (VNNI, VBMI) too
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "ops/cpu_target.h"         // AvxVnniEnabled, NeonDotprodEnabled
#include "ops/float_kernels-inl.h"  // MatMulF32Path
#include "ops/int8_neon-inl.h"      // neon::Int8Path (Arm targets)
#include "ops/int8_packed-inl.h"    // PackedInt8Path (AVX3_DL only)
#include "ops/repack.h"             // IsRepackableType
#include "ops/int8_ref.h"           // MatMulInt8Scalar
#include "ops/int8_x86-inl.h"       // maddubs::Int8Path (AVX2, AVX3), avxvnni::Int8Path (AVX2, AVX3_DL)
#include "ops/matmul_internal.h"    // MatMulDispatch
#include "ops/vnni_kernels-inl.h"   // MatMulVnniPath (AVX3_DL only)

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
using namespace mm;  // NOLINT: the kernels of the included -inl.h files

// ws[0, n) share type and cols; ys[j]: (n_tok, ws[j].rows).
void MatMulImpl(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok, ThreadPool& pool) {
  if (IsFloatType(ws[0].type)) {
    for (size_t j = 0; j < n; ++j) MatMulF32Path(ws[j], x, n_tok, ys[j], pool);
    return;
  }
#if HWY_TARGET == HWY_AVX3_DL
  if (HaveVnniVbmi()) {
    // Q4_0 / Q4_1 / Q5_0 / Q4_K / Q6_K: the 8-row kernels of int8_x86-inl.h (vpdpbusd on 256-bit
    // vectors, the scalar twin's bits). The 512-bit path unpacks Q5_0 / K-quants one row at a time per
    // 4-token pass, several times slower; its Q4_0 / Q4_1 stream kernels, gone, decoded a little faster
    // but prefilled much slower (docs/results/design-measurements.md, MatMulImpl on AVX3_DL).
    const GgmlType t = ws[0].type;
    // Q4_0 / Q4_1 / Q8_0 repacked at load (MatMulMany groups packed views apart from the others).
    if (ws[0].packed && IsRepackableType(t)) return PackedInt8Path(ws, ys, n, x, n_tok, pool);
    if (t == GgmlType::kQ5_0 || t == GgmlType::kQ4_K || t == GgmlType::kQ6_K || t == GgmlType::kQ4_0 ||
        t == GgmlType::kQ4_1)
      return avxvnni::Int8Path(ws, ys, n, x, n_tok, pool);
    return MatMulVnniPath(ws, ys, n, x, n_tok, pool);
  }
#elif HWY_TARGET == HWY_AVX2
  if (AvxVnniEnabled()) return avxvnni::Int8Path(ws, ys, n, x, n_tok, pool);
  return maddubs::Int8Path(ws, ys, n, x, n_tok, pool);
#elif HWY_TARGET == HWY_AVX3
  return maddubs::Int8Path(ws, ys, n, x, n_tok, pool);
#elif CHORUS_HAVE_NEON_INT8
  if (NeonDotprodEnabled()) return neon::Int8Path(ws, ys, n, x, n_tok, pool);
#endif
  ops_internal::MatMulInt8Scalar(ws, ys, n, x, n_tok, pool);
}

bool ReadsPackedImpl(GgmlType t) {
#if HWY_TARGET == HWY_AVX3_DL
  return HaveVnniVbmi() && IsRepackableType(t);
#else
  (void)t;
  return false;
#endif
}

const char* TargetNameImpl() {
#if HWY_TARGET == HWY_AVX3_DL
  return HaveVnniVbmi() ? "AVX-512 VNNI" : "scalar";
#elif HWY_TARGET == HWY_AVX2
  return AvxVnniEnabled() ? "AVX-VNNI" : "AVX2 int8 (maddubs)";
#elif HWY_TARGET == HWY_AVX3
  return "AVX2 int8 (maddubs)";
#elif CHORUS_HAVE_NEON_INT8
  return NeonDotprodEnabled() ? "NEON dotprod" : "scalar";
#else
  return "scalar";
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(MatMulImpl);
HWY_EXPORT(TargetNameImpl);
HWY_EXPORT(ReadsPackedImpl);

bool MatMulReadsPacked(GgmlType t) { return HWY_DYNAMIC_DISPATCH(ReadsPackedImpl)(t); }

namespace ops_internal {
void MatMulDispatch(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                    ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(ws, ys, n, x, n_tok, pool);
}
const char* MatMulTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }
int64_t MatMulCompiledTargets() { return HWY_TARGETS; }
}  // namespace ops_internal
}  // namespace chorus
#endif  // HWY_ONCE
