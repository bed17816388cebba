// fp16 / bf16 <-> fp32 conversion (IEEE half with subnormals, round-to-nearest-even).
#pragma once
#include <cstdint>
#include <cstring>

namespace chorus {

inline float Fp32FromBits(uint32_t w) { float f; std::memcpy(&f, &w, 4); return f; }
inline uint32_t Fp32ToBits(float f) { uint32_t w; std::memcpy(&w, &f, 4); return w; }

// Half -> float, exact (the method of FP16 by Maratyszcza, written out).
inline float F16ToF32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = Fp32FromBits(0x7800000u);  // 2^-112
  const float normalized = Fp32FromBits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = Fp32FromBits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denorm_cutoff = 1u << 27;
  const uint32_t result = sign | (two_w < denorm_cutoff ? Fp32ToBits(denormalized)
                                                         : Fp32ToBits(normalized));
  return Fp32FromBits(result);
}

// Float -> half, round to nearest even; overflow -> inf, NaN stays NaN.
inline uint16_t F32ToF16(float f) {
  const float scale_to_inf = Fp32FromBits(0x77800000u);   // 2^112
  const float scale_to_zero = Fp32FromBits(0x08800000u);  // 2^-110
  float base = (f < 0 ? -f : f) * scale_to_inf;
  base *= scale_to_zero;
  const uint32_t w = Fp32ToBits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = Fp32FromBits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = Fp32ToBits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) |
                               (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float Bf16ToF32(uint16_t h) { return Fp32FromBits(static_cast<uint32_t>(h) << 16); }

inline uint16_t F32ToBf16(float f) {
  uint32_t w = Fp32ToBits(f);
  if ((w & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((w >> 16) | 64);  // quiet NaN
  w += 0x7fffu + ((w >> 16) & 1u);
  return static_cast<uint16_t>(w >> 16);
}

}  // namespace chorus
