// Native-window row codecs (see window_codec.h).
#include "kv/window_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/fp16.h"  // F16ToF32, F32ToF16

namespace chorus {
namespace {

constexpr float kF16Max = 65504.0f;
uint16_t ToF16(float x) { return F32ToF16(std::clamp(x, -kF16Max, kF16Max)); }  // finite (NaN stays NaN)

// One KV head's q8 row: scale = fp16(max|x| / 127), codes round(x / scale) in [-127, 127]; the f16
// rows read by the attention are fp16(code · scale).
void EncodeQ8Head(const float* x, size_t hd, uint8_t* out, uint16_t* nat) {
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

void DecodeQ8Head(const uint8_t* in, size_t hd, uint16_t* nat) {
  uint16_t scale16;
  std::memcpy(&scale16, in, 2);
  const float scale = F16ToF32(scale16);
  for (size_t c = 0; c < hd; ++c) nat[c] = ToF16(static_cast<int8_t>(in[2 + c]) * scale);
}

}  // namespace

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
  const size_t kv_dim = n_head_kv * head_dim;
  if (n == 0) return;  // the buffers may be empty (null)
  if (f == WindowFormat::kF16) {
    for (size_t i = 0; i < n * kv_dim; ++i) nat[i] = ToF16(x[i]);
    if (stored != reinterpret_cast<uint8_t*>(nat)) std::memcpy(stored, nat, n * kv_dim * 2);
    return;
  }
  const size_t row_bytes = WindowRowBytes(f, n_head_kv, head_dim);
  for (size_t j = 0; j < n; ++j) {
    for (size_t h = 0; h < n_head_kv; ++h) {
      EncodeQ8Head(x + j * kv_dim + h * head_dim, head_dim, stored + j * row_bytes + h * (2 + head_dim),
                   nat + j * kv_dim + h * head_dim);
    }
  }
}

void DecodeWindowRows(WindowFormat f, size_t n_head_kv, size_t head_dim, const uint8_t* stored, size_t n,
                      uint16_t* nat) {
  const size_t kv_dim = n_head_kv * head_dim;
  if (n == 0) return;  // the buffers may be empty (null)
  if (f == WindowFormat::kF16) {
    std::memcpy(nat, stored, n * kv_dim * 2);
    return;
  }
  const size_t row_bytes = WindowRowBytes(f, n_head_kv, head_dim);
  for (size_t j = 0; j < n; ++j) {
    for (size_t h = 0; h < n_head_kv; ++h)
      DecodeQ8Head(stored + j * row_bytes + h * (2 + head_dim), head_dim, nat + j * kv_dim + h * head_dim);
  }
}

}  // namespace chorus
