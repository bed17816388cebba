// Per-target MatMul (Highway foreach_target): picks the kernel family for the weight type and n_tok.
// Invariant: the runtime type is dispatched once per call, never inside a kernel's loops.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1  // compile the Ice Lake+ target (VNNI, VBMI) too
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "ops/float_kernels-inl.h"  // MatMulF32Path
#include "ops/matmul_internal.h"    // MatMulDispatch
#include "ops/unpack-inl.h"         // UnpackBlocks
#include "ops/vnni_kernels-inl.h"   // MatMulVnniPath (AVX3_DL only)

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
using namespace mm;  // NOLINT: the kernels of the included -inl.h files

// ws[0, n) share type and cols; ys[j]: (n_tok, ws[j].rows).
void MatMulImpl(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok, ThreadPool& pool) {
#if HWY_TARGET == HWY_AVX3_DL
  if (!IsFloatType(ws[0].type) && HaveVnniVbmi()) return MatMulVnniPath(ws, ys, n, x, n_tok, pool);
#endif
  for (size_t j = 0; j < n; ++j) MatMulF32Path(ws[j], x, n_tok, ys[j], pool);
}

const char* TargetNameImpl() {
#if HWY_TARGET == HWY_AVX3_DL
  return "AVX3_DL (AVX-512 VNNI int8 for quantized types, f32 FMA for float types)";
#else
  return hwy::TargetName(HWY_TARGET);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(MatMulImpl);
HWY_EXPORT(TargetNameImpl);

namespace ops_internal {
void MatMulDispatch(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                    ThreadPool& pool) {
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(ws, ys, n, x, n_tok, pool);
}
const char* MatMulTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }
}  // namespace ops_internal
}  // namespace chorus
#endif  // HWY_ONCE
