// Test helpers for the weight kernels: random GGML blocks with valid scales, an element-by-element
// decoder written independently of src/ops (from the layout description), and per-element bounds.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gguf/ggml_types.h"  // GgmlType, GgmlTraitsOf

namespace chorus::test {

// Half → float from the IEEE definition (sign, 5-bit exponent, 10-bit mantissa, subnormals).
inline float HalfBits(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(1024 + man), exp - 25);
  }
  return sign ? -v : v;
}

// Nearest half of v (|v| within the normal range): by search over the exponent, not bit tricks.
inline uint16_t ToHalfBits(float v) {
  uint16_t best = 0;
  float best_err = INFINITY;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  const float a = std::fabs(v);
  for (int exp = 1; exp < 31; ++exp) {
    const float man = std::round(std::ldexp(a, 25 - exp)) - 1024;
    if (man < 0 || man > 1023) continue;
    const uint16_t h = static_cast<uint16_t>(exp << 10 | static_cast<int>(man));
    const float err = std::fabs(HalfBits(h) - a);
    if (err < best_err) best_err = err, best = h;
  }
  return sign | best;
}

inline uint16_t Rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
inline float RdHalf(const uint8_t* p) { return HalfBits(Rd16(p)); }

// 6-bit scale / min number j of a Q4_K/Q5_K super-block, from the 12-byte description:
// bytes 0-3 low 6 bits: scales 0-3; bytes 4-7 low 6 bits: mins 0-3; bytes 8-11: low nibble = low
// 4 bits of scale 4+i, high nibble = low 4 bits of min 4+i; top 2 bits of bytes 0-3 / 4-7 = the
// high 2 bits of scales / mins 4-7.
inline int KScale(const uint8_t* s, int j, bool min) {
  if (j < 4) return s[j + (min ? 4 : 0)] & 63;
  const int lo = min ? (s[8 + j - 4] >> 4) : (s[8 + j - 4] & 15);
  const int hi = s[j - 4 + (min ? 4 : 0)] >> 6;
  return lo + 16 * hi;
}

struct ElemDecode {
  float value;  // the weight
  float scale;  // |dw|: the weight of one code step
  float min;    // |m| with w = dw * q + m, q ≥ 0
  int qmax;     // largest code
};

// Element e of a row, decoded from first principles.
inline ElemDecode DecodeElem(GgmlType type, const uint8_t* row, size_t e) {
  const auto& tr = GgmlTraitsOf(type);
  const uint8_t* b = row + (e / tr.block_elems) * tr.block_bytes;
  const int i = static_cast<int>(e % tr.block_elems);
  auto nib = [](const uint8_t* qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; };
  auto bit = [](const uint8_t* qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; };
  switch (type) {
    case GgmlType::kF32: { float f; std::memcpy(&f, row + 4 * e, 4); return {f, 0, 0, 0}; }
    case GgmlType::kF16: return {RdHalf(row + 2 * e), 0, 0, 0};
    case GgmlType::kBF16: {
      const uint32_t w = static_cast<uint32_t>(Rd16(row + 2 * e)) << 16;
      float f; std::memcpy(&f, &w, 4); return {f, 0, 0, 0};
    }
    case GgmlType::kQ4_0: { const float d = RdHalf(b); return {(nib(b + 2, i) - 8) * d, std::fabs(d), 8 * std::fabs(d), 15}; }
    case GgmlType::kQ4_1: { const float d = RdHalf(b), m = RdHalf(b + 2); return {nib(b + 4, i) * d + m, std::fabs(d), std::fabs(m), 15}; }
    case GgmlType::kQ5_0: {
      const float d = RdHalf(b);
      const int q = nib(b + 6, i) | bit(b + 2, i) << 4;
      return {(q - 16) * d, std::fabs(d), 16 * std::fabs(d), 31};
    }
    case GgmlType::kQ5_1: {
      const float d = RdHalf(b), m = RdHalf(b + 2);
      const int q = nib(b + 8, i) | bit(b + 4, i) << 4;
      return {q * d + m, std::fabs(d), std::fabs(m), 31};
    }
    case GgmlType::kQ8_0: { const float d = RdHalf(b); return {static_cast<int8_t>(b[2 + i]) * d, std::fabs(d), 128 * std::fabs(d), 255}; }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = type == GgmlType::kQ5_K;
      const float d = RdHalf(b), dmin = RdHalf(b + 2);
      const int j = i / 32, chunk = i / 64, l = i % 32;
      const uint8_t* qs = b + (five ? 48 : 16);
      const int byte = qs[32 * chunk + l];
      int q = (i % 64 < 32) ? byte & 15 : byte >> 4;
      if (five) q |= ((b[16 + l] >> j) & 1) << 4;
      const float dl = d * KScale(b + 4, j, false), ml = dmin * KScale(b + 4, j, true);
      return {dl * q - ml, std::fabs(dl), std::fabs(ml), five ? 31 : 15};
    }
    case GgmlType::kQ6_K: {
      const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
      const int byte = b[64 * h + l + (quarter & 1) * 32];
      const int lo = quarter < 2 ? byte & 15 : byte >> 4;
      const int q = lo | ((b[128 + 32 * h + l] >> (2 * quarter)) & 3) << 4;
      const float dl = RdHalf(b + 208) * static_cast<int8_t>(b[192 + i / 16]);
      return {dl * (q - 32), std::fabs(dl), 32 * std::fabs(dl), 63};
    }
    default: return {NAN, 0, 0, 0};
  }
}

// n_blocks random blocks: random code bits, scales drawn from realistic ranges (finite halves).
inline std::vector<uint8_t> RandomRow(GgmlType type, size_t n_blocks, std::mt19937& rng) {
  const auto& tr = GgmlTraitsOf(type);
  std::vector<uint8_t> out(n_blocks * tr.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : out) v = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto put_half = [](uint8_t* p, float v) { const uint16_t h = ToHalfBits(v); p[0] = h & 255; p[1] = h >> 8; };
  auto scale = [&](float lo, float hi) { return (u(rng) < 0 ? -1.0f : 1.0f) * (lo + (hi - lo) * std::fabs(u(rng))); };
  for (size_t k = 0; k < n_blocks; ++k) {
    uint8_t* b = out.data() + k * tr.block_bytes;
    switch (type) {
      case GgmlType::kF32: { const float f = u(rng) * 2.0f; std::memcpy(b, &f, 4); break; }
      case GgmlType::kF16: put_half(b, u(rng) * 2.0f); break;
      case GgmlType::kBF16: { const float f = u(rng) * 2.0f; uint32_t w; std::memcpy(&w, &f, 4); b[0] = (w >> 16) & 255; b[1] = w >> 24; break; }
      case GgmlType::kQ4_0: case GgmlType::kQ5_0: case GgmlType::kQ8_0:
        put_half(b, scale(1e-3f, 0.05f));
        break;
      case GgmlType::kQ4_1: case GgmlType::kQ5_1:
        put_half(b, std::fabs(scale(1e-3f, 0.05f)));
        put_half(b + 2, scale(0.0f, 0.5f));
        break;
      case GgmlType::kQ4_K: case GgmlType::kQ5_K:
        put_half(b, std::fabs(scale(1e-4f, 2e-3f)));
        put_half(b + 2, std::fabs(scale(1e-4f, 2e-3f)));
        break;
      case GgmlType::kQ6_K: put_half(b + 208, scale(1e-4f, 2e-3f)); break;
      default: break;
    }
  }
  return out;
}

inline const GgmlType kAllTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                                     GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

}  // namespace chorus::test
