// Randomized Hadamard rotation R = H·D/sqrt(d) of the rotated KV formats (orthonormal, d a power of two).
// Invariant: D is a fixed ±1 sign vector from a fixed seed, identical in every build and process.
#pragma once
#include <cstddef>
#include <cstdint>

namespace chorus {

inline constexpr uint64_t kHadamardSignSeed = 0x63686f7275734b56ull;  // "chorusKV"

// True for 1, 2, 4, ... (the transform sizes supported).
constexpr bool IsPowerOfTwo(size_t d) { return d != 0 && (d & (d - 1)) == 0; }

// The sign D_i (+1 or -1) of coordinate i < kMaxHeadDim: bit i of the SplitMix64 stream
// seeded with kHadamardSignSeed (bit i%64 of output i/64; a set bit means -1).
float HadamardSign(size_t i);

// x ← R x = H·D·x / sqrt(d); d a power of two ≤ kMaxHeadDim. H is the Sylvester (natural order)
// Walsh–Hadamard matrix, H[i][j] = (-1)^popcount(i & j).
void HadamardRotate(float* x, size_t d);
// x ← Rᵀ x = D·H·x / sqrt(d) (the inverse: R is orthonormal).
void HadamardRotateInverse(float* x, size_t d);
// x ← H x (unnormalized fast Walsh–Hadamard transform), d a power of two: on the best target this CPU
// runs (hadamard_simd.cc), bit for bit the scalar reference FastWalshHadamardRef.
void FastWalshHadamard(float* x, size_t d);
void FastWalshHadamardRef(float* x, size_t d);

}  // namespace chorus
