// KV block formats: names, sizes, encode and reference decode of one 32-token block side (K or V).
// Invariant: a block side is exactly KvBlockBytes(format, side, geometry) bytes, self-contained
// (all scales/norms inside), laid out head-major as written in docs/FORMATS.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/status.h"  // Status, Result

namespace chorus {

inline constexpr uint32_t kBlockTokens = 32;   // tokens per block
inline constexpr uint32_t kMaxHeadDim = 1024;  // head_dim limit of every format
inline constexpr uint32_t kMaxKvHeads = 1024;  // n_head_kv limit of every format

enum class KvFormat : uint8_t {
  kF16,          // fp16 as is
  kQ8,           // int8, one fp16 absmax scale per (token, head)
  kKivi4,        // KIVI asymmetric min-max, groups of 32 (K per channel, V per token)
  kKivi3,
  kKivi2,
  kTq4,          // TurboQuant-MSE: fp16 norm + randomized Hadamard + Lloyd-Max codes
  kTq3,
  kTq2,
  kPolyKvPaper,  // int8 with one absmax scale for the whole layer (PolyKV's keys)
};
inline constexpr KvFormat kAllKvFormats[] = {
    KvFormat::kF16, KvFormat::kQ8,  KvFormat::kKivi4, KvFormat::kKivi3,      KvFormat::kKivi2,
    KvFormat::kTq4, KvFormat::kTq3, KvFormat::kTq2,   KvFormat::kPolyKvPaper};

enum class KvSide : uint8_t { kKey, kValue };

struct KvGeometry {
  uint32_t n_head_kv;  // KV heads of the layer
  uint32_t head_dim;   // elements per (token, head) vector
};

struct KvEncodeParams {
  // polykv-paper only: max |K| over every token of the layer (the caller's reduction). The
  // block stores s = layer_absmax / 127; values beyond layer_absmax saturate at ±127·s.
  float layer_absmax = 0;
};

// The constexpr traits row of a format.
struct KvFormatTraits {
  KvFormat format;
  std::string_view name;
  uint32_t code_bits;  // bits of one stored code (16 for f16)
  bool rotated;        // kernels work in the Hadamard-rotated domain
};
const KvFormatTraits& GetKvFormatTraits(KvFormat format);

// "tq3" -> KvFormat::kTq3; an unknown name is an error listing every valid name.
Result<KvFormat> ParseKvFormat(std::string_view name);
std::string_view KvFormatName(KvFormat format);
std::string_view KvSideName(KvSide side);
bool KvFormatIsRotated(KvFormat format);

// Whether `format` can store `side` blocks of `geometry`; the message names the limit.
Status CheckKvFormat(KvFormat format, KvSide side, const KvGeometry& geometry);

// Exact bytes of one block side, metadata included (geometry must pass CheckKvFormat).
size_t KvBlockBytes(KvFormat format, KvSide side, const KvGeometry& geometry);
// Bytes of one head's tile inside a block, and where tile `kv_head` starts.
size_t KvHeadTileBytes(KvFormat format, KvSide side, uint32_t head_dim);
size_t KvHeadTileOffset(KvFormat format, KvSide side, const KvGeometry& geometry,
                        uint32_t kv_head);
// = 8 * KvBlockBytes / (32 * n_head_kv * head_dim): stored bits per element, metadata included.
double KvNominalBits(KvFormat format, KvSide side, const KvGeometry& geometry);

// src: (32, n_head_kv * head_dim) f32 row-major (token-major, heads adjacent in a row);
// dst: KvBlockBytes bytes. Fails on a geometry CheckKvFormat rejects or bad params.
// Inputs beyond the fp16 range (|x| > 65504) saturate.
Status EncodeKvBlock(KvFormat format, KvSide side, const KvGeometry& geometry, const float* src,
                     uint8_t* dst, const KvEncodeParams& params = {});

// Reference decode (tests, tools): dst (32, n_head_kv * head_dim) f32 in the original domain
// (rotated formats are rotated back).
void DecodeKvBlockRef(KvFormat format, KvSide side, const KvGeometry& geometry,
                      const uint8_t* src, float* dst);
// Reference decode of one head tile in the *kernel* domain: dst (32, head_dim); for rotated
// formats the rotated vectors R·v̂ (what Score/Accumulate see), else the same as above.
void DecodeKvHeadRef(KvFormat format, KvSide side, const KvGeometry& geometry,
                     const uint8_t* block, uint32_t kv_head, float* dst);

}  // namespace chorus
