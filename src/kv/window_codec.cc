// Native-window row codecs (see window_codec.h). The SIMD rows (x86 AVX2 and better: hardware
// fp16 conversion, round to nearest even) give exactly the scalar reference's bits; other targets
// run the reference itself, so every build stores and reads the same window bytes.
#include "kv/window_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/fp16.h"  // F16ToF32, F32ToF16

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kv/window_codec.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef CHORUS_WINDOW_CODEC_ONCE
#define CHORUS_WINDOW_CODEC_ONCE
namespace chorus::window_ref {

constexpr float kF16Max = 65504.0f;
inline uint16_t ToF16(float x) { return F32ToF16(std::clamp(x, -kF16Max, kF16Max)); }  // finite (NaN stays NaN)

// One KV head's q8 row: scale = fp16(max|x| / 127) (NaN ignored, ±inf as 65504), codes
// round(x / scale) in [-127, 127] (NaN → -127); the f16 rows read by the attention are
// fp16(code · scale).
inline void EncodeQ8Head(const float* x, size_t hd, uint8_t* out, uint16_t* nat) {
  float absmax = 0;
  for (size_t c = 0; c < hd; ++c) absmax = std::max(absmax, std::min(std::abs(x[c]), kF16Max));
  const uint16_t scale16 = F32ToF16(absmax / 127.0f);
  std::memcpy(out, &scale16, 2);
  const float scale = F16ToF32(scale16);
  for (size_t c = 0; c < hd; ++c) {
    float r = scale > 0 ? std::nearbyint(std::clamp(x[c], -kF16Max, kF16Max) / scale) : 0.0f;
    if (!(r >= -127.0f)) r = -127.0f;  // also NaN
    r = std::min(r, 127.0f);
    const int8_t q = static_cast<int8_t>(r);
    out[2 + c] = static_cast<uint8_t>(q);
    nat[c] = ToF16(q * scale);
  }
}

inline void DecodeQ8Head(const uint8_t* in, size_t hd, uint16_t* nat) {
  uint16_t scale16;
  std::memcpy(&scale16, in, 2);
  const float scale = F16ToF32(scale16);
  for (size_t c = 0; c < hd; ++c) nat[c] = ToF16(static_cast<int8_t>(in[2 + c]) * scale);
}

// fn(element offset, stored byte offset) for each (row, KV head) of n q8 rows: the head's values
// start at x / nat + element offset, its scale and codes at stored + byte offset.
template <class Fn>
inline void ForQ8Heads(size_t n, size_t n_head_kv, size_t head_dim, const Fn& fn) {
  for (size_t j = 0; j < n; ++j)
    for (size_t h = 0; h < n_head_kv; ++h)
      fn((j * n_head_kv + h) * head_dim, (j * n_head_kv + h) * (2 + head_dim));
}

}  // namespace chorus::window_ref
#endif  // CHORUS_WINDOW_CODEC_ONCE

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // vcvtps2ph: round to nearest even, as F32ToF16
constexpr bool kSimdRows = true;
#else  // Highway's software fp16 demotion truncates: keep the reference's bits
constexpr bool kSimdRows = false;
#endif

using DF = hn::ScalableTag<float>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using DI = hn::RebindToSigned<DF>;
using D8 = hn::Rebind<int8_t, DF>;

// fp16 of x clamped to ±65504 (NaN lanes left as NaN, like the reference's std::clamp).
HWY_INLINE void StoreF16Clamped(DF df, hn::Vec<DF> x, uint16_t* out) {
  const auto lim = hn::Set(df, window_ref::kF16Max);
  const auto c = hn::IfThenElse(hn::Eq(x, x), hn::Min(hn::Max(x, hn::Neg(lim)), lim), x);
  hn::StoreU(hn::DemoteTo(DH(), c), DH(), reinterpret_cast<hwy::float16_t*>(out));
}

void EncodeQ8HeadSimd(const float* x, size_t hd, uint8_t* out, uint16_t* nat) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (hd % N != 0) return window_ref::EncodeQ8Head(x, hd, out, nat);
  const auto lim = hn::Set(df, window_ref::kF16Max);
  auto vmax = hn::Zero(df);
  for (size_t c = 0; c < hd; c += N) {
    const auto v = hn::LoadU(df, x + c);
    vmax = hn::Max(vmax, hn::IfThenElseZero(hn::Eq(v, v), hn::Min(hn::Abs(v), lim)));
  }
  const uint16_t scale16 = F32ToF16(hn::GetLane(hn::MaxOfLanes(df, vmax)) / 127.0f);
  std::memcpy(out, &scale16, 2);
  const float scale = F16ToF32(scale16);
  if (!(scale > 0)) {
    std::memset(out + 2, 0, hd);
    std::memset(nat, 0, hd * sizeof(uint16_t));
    return;
  }
  const auto vs = hn::Set(df, scale), lo = hn::Set(df, -127.0f), hi = hn::Set(df, 127.0f);
  for (size_t c = 0; c < hd; c += N) {
    const auto v = hn::LoadU(df, x + c);
    auto r = hn::Round(hn::Div(hn::Min(hn::Max(v, hn::Neg(lim)), lim), vs));
    r = hn::IfThenElse(hn::Eq(v, v), hn::Min(hn::Max(r, lo), hi), lo);  // NaN → -127
    const auto q = hn::ConvertTo(DI(), r);
    hn::StoreU(hn::DemoteTo(D8(), q), D8(), reinterpret_cast<int8_t*>(out + 2 + c));
    StoreF16Clamped(df, hn::Mul(hn::ConvertTo(df, q), vs), nat + c);  // from the integer: -0 codes are +0
  }
}

void DecodeQ8HeadSimd(const uint8_t* in, size_t hd, uint16_t* nat) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (hd % N != 0) return window_ref::DecodeQ8Head(in, hd, nat);
  uint16_t scale16;
  std::memcpy(&scale16, in, 2);
  const auto vs = hn::Set(df, F16ToF32(scale16));
  for (size_t c = 0; c < hd; c += N) {
    const auto q = hn::PromoteTo(DI(), hn::LoadU(D8(), reinterpret_cast<const int8_t*>(in + 2 + c)));
    StoreF16Clamped(df, hn::Mul(hn::ConvertTo(df, q), vs), nat + c);
  }
}

bool HasSimdRowsImpl() { return kSimdRows; }

void EncodeWindowRowsImpl(WindowFormat f, size_t n_head_kv, size_t head_dim, const float* x, size_t n,
                          uint8_t* stored, uint16_t* nat) {
  const size_t kv_dim = n_head_kv * head_dim;
  if (f == WindowFormat::kF16) {
    const DF df;
    const size_t N = hn::Lanes(df), total = n * kv_dim;
    size_t i = 0;
    if constexpr (kSimdRows)
      for (; i + N <= total; i += N) StoreF16Clamped(df, hn::LoadU(df, x + i), nat + i);
    for (; i < total; ++i) nat[i] = window_ref::ToF16(x[i]);
    if (stored != reinterpret_cast<uint8_t*>(nat)) std::memcpy(stored, nat, total * 2);
    return;
  }
  window_ref::ForQ8Heads(n, n_head_kv, head_dim, [&](size_t e, size_t b) {
    if constexpr (kSimdRows) EncodeQ8HeadSimd(x + e, head_dim, stored + b, nat + e);
    else window_ref::EncodeQ8Head(x + e, head_dim, stored + b, nat + e);
  });
}

void DecodeWindowRowsImpl(WindowFormat f, size_t n_head_kv, size_t head_dim, const uint8_t* stored, size_t n,
                          uint16_t* nat) {
  const size_t kv_dim = n_head_kv * head_dim;
  if (f == WindowFormat::kF16) {
    std::memcpy(nat, stored, n * kv_dim * 2);
    return;
  }
  window_ref::ForQ8Heads(n, n_head_kv, head_dim, [&](size_t e, size_t b) {
    if constexpr (kSimdRows) DecodeQ8HeadSimd(stored + b, head_dim, nat + e);
    else window_ref::DecodeQ8Head(stored + b, head_dim, nat + e);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(EncodeWindowRowsImpl);
HWY_EXPORT(DecodeWindowRowsImpl);
HWY_EXPORT(HasSimdRowsImpl);

bool WindowCodecHasSimdRows() { return HWY_DYNAMIC_DISPATCH(HasSimdRowsImpl)(); }

Result<WindowFormat> ParseWindowFormat(std::string_view name) {
  if (name == "f16") return WindowFormat::kF16;
  if (name == "q8") return WindowFormat::kQ8;
  return Status::Error("unknown window format '{}'; valid: f16, q8", name);
}

std::string_view WindowFormatName(WindowFormat f) { return f == WindowFormat::kQ8 ? "q8" : "f16"; }

size_t WindowRowBytes(WindowFormat f, size_t n_head_kv, size_t head_dim) {
  return f == WindowFormat::kQ8 ? n_head_kv * (2 + head_dim) : n_head_kv * head_dim * 2;
}

void EncodeWindowRows(WindowFormat f, size_t n_head_kv, size_t head_dim, const float* x, size_t n, uint8_t* stored,
                      uint16_t* nat) {
  if (n == 0) return;  // the buffers may be empty (null)
  HWY_DYNAMIC_DISPATCH(EncodeWindowRowsImpl)(f, n_head_kv, head_dim, x, n, stored, nat);
}

void DecodeWindowRows(WindowFormat f, size_t n_head_kv, size_t head_dim, const uint8_t* stored, size_t n,
                      uint16_t* nat) {
  if (n == 0) return;  // the buffers may be empty (null)
  HWY_DYNAMIC_DISPATCH(DecodeWindowRowsImpl)(f, n_head_kv, head_dim, stored, n, nat);
}

void EncodeWindowRowsRef(WindowFormat f, size_t n_head_kv, size_t head_dim, const float* x, size_t n, uint8_t* stored,
                         uint16_t* nat) {
  if (f == WindowFormat::kQ8) {
    window_ref::ForQ8Heads(n, n_head_kv, head_dim, [&](size_t e, size_t b) {
      window_ref::EncodeQ8Head(x + e, head_dim, stored + b, nat + e);
    });
    return;
  }
  const size_t total = n * n_head_kv * head_dim;
  for (size_t i = 0; i < total; ++i) nat[i] = window_ref::ToF16(x[i]);
  if (stored != reinterpret_cast<uint8_t*>(nat)) std::memcpy(stored, nat, total * 2);
}

void DecodeWindowRowsRef(WindowFormat f, size_t n_head_kv, size_t head_dim, const uint8_t* stored, size_t n,
                         uint16_t* nat) {
  if (f == WindowFormat::kQ8) {
    window_ref::ForQ8Heads(n, n_head_kv, head_dim,
                           [&](size_t e, size_t b) { window_ref::DecodeQ8Head(stored + b, head_dim, nat + e); });
    return;
  }
  std::memcpy(nat, stored, n * n_head_kv * head_dim * 2);
}

}  // namespace chorus
#endif  // HWY_ONCE
