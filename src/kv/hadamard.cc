// Randomized Hadamard rotation: the fixed sign table (computed at compile time) and the in-place FWHT.
#include "kv/hadamard.h"

#include <array>
#include <cmath>
#include <cstring>

#include "kv/kv_format.h"  // kMaxHeadDim
#include "util/check.h"    // CHORUS_CHECK

namespace chorus {
namespace {

constexpr std::array<uint64_t, kMaxHeadDim / 64> MakeSignBits() {
  std::array<uint64_t, kMaxHeadDim / 64> bits{};
  uint64_t state = kHadamardSignSeed;
  for (auto& w : bits) {  // SplitMix64
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    w = z ^ (z >> 31);
  }
  return bits;
}
constexpr std::array<uint64_t, kMaxHeadDim / 64> kSignBits = MakeSignBits();

// The sign bit to flip per element (0 or 0x80000000): a negation is the flip of the sign bit, so one
// xor per element without a data-dependent branch (the bits are random: a branch per element
// mispredicted half the time).
constexpr std::array<uint32_t, kMaxHeadDim> MakeSignMasks() {
  std::array<uint32_t, kMaxHeadDim> m{};
  for (size_t i = 0; i < kMaxHeadDim; ++i) m[i] = static_cast<uint32_t>((kSignBits[i >> 6] >> (i & 63)) & 1) << 31;
  return m;
}
constexpr std::array<uint32_t, kMaxHeadDim> kSignMasks = MakeSignMasks();

void ApplySigns(float* x, size_t d) {
  for (size_t i = 0; i < d; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    u ^= kSignMasks[i];
    std::memcpy(x + i, &u, 4);
  }
}

}  // namespace

float HadamardSign(size_t i) {
  CHORUS_CHECK(i < kMaxHeadDim);
  return ((kSignBits[i >> 6] >> (i & 63)) & 1) ? -1.0f : 1.0f;
}

void FastWalshHadamardRef(float* x, size_t d) {
  CHORUS_CHECK(IsPowerOfTwo(d));
  for (size_t h = 1; h < d; h *= 2) {
    for (size_t i = 0; i < d; i += 2 * h) {
      for (size_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

void HadamardRotate(float* x, size_t d) {
  CHORUS_CHECK(IsPowerOfTwo(d) && d <= kMaxHeadDim);
  ApplySigns(x, d);
  FastWalshHadamard(x, d);
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  for (size_t i = 0; i < d; ++i) x[i] *= s;
}

void HadamardRotateInverse(float* x, size_t d) {
  CHORUS_CHECK(IsPowerOfTwo(d) && d <= kMaxHeadDim);
  FastWalshHadamard(x, d);
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  for (size_t i = 0; i < d; ++i) x[i] *= s;
  ApplySigns(x, d);
}

}  // namespace chorus
