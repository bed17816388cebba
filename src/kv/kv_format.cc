// KV block formats: traits, validation, sizes, scalar encode and reference decode.
#include "kv/kv_format.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kv/hadamard.h"           // HadamardRotate, HadamardRotateInverse
#include "kv/kv_format_layout.h"   // structs, size formulas, packing, codebooks
#include "util/check.h"            // CHORUS_CHECK
#include "util/fp16.h"             // F16ToF32, F32ToF16

namespace chorus {
namespace {

using namespace kv_layout;  // NOLINT: the layout vocabulary of this file

constexpr KvFormatTraits kTraits[] = {
    {KvFormat::kF16, "f16", 16, false},      {KvFormat::kQ8, "q8", 8, false},
    {KvFormat::kKivi4, "kivi4", 4, false},   {KvFormat::kKivi3, "kivi3", 3, false},
    {KvFormat::kKivi2, "kivi2", 2, false},   {KvFormat::kTq4, "tq4", 4, true},
    {KvFormat::kTq3, "tq3", 3, true},        {KvFormat::kTq2, "tq2", 2, true},
    {KvFormat::kPolyKvPaper, "polykv-paper", 8, false},
};
static_assert(std::size(kTraits) == std::size(kAllKvFormats));
constexpr bool TraitsInOrder() {
  for (size_t i = 0; i < std::size(kTraits); ++i) {
    if (static_cast<size_t>(kTraits[i].format) != i || kAllKvFormats[i] != kTraits[i].format) return false;
  }
  return true;
}
static_assert(TraitsInOrder(), "kTraits must be indexed by the enum value");

constexpr float kF16Max = 65504.0f;
float ClampF16(float x) { return std::clamp(x, -kF16Max, kF16Max); }
uint16_t ToF16(float x) { return F32ToF16(ClampF16(x)); }

// Round half to even (the current rounding mode) and clamp to [lo, hi].
int RoundClamp(float x, int lo, int hi) {
  const float r = std::nearbyint(x);
  if (!(r >= lo)) return lo;  // also NaN -> lo
  if (r > hi) return hi;
  return static_cast<int>(r);
}

// ---- Per-head encoders. x(j, c) = src[j * row_stride + c]: token j, channel c of this head. ----

// Where value (token j, channel c) of a row format's per-element array lives: values token-major,
// keys channel-major (kv_format_layout.h).
size_t RowIndex(KvSide side, uint32_t d, size_t j, size_t c) {
  return side == KvSide::kKey ? c * kBlockTokens + j : j * d + c;
}

void EncodeF16(KvSide side, const float* x, size_t row_stride, uint32_t d, uint8_t* tile) {
  uint16_t* out = reinterpret_cast<uint16_t*>(tile);
  for (size_t j = 0; j < kBlockTokens; ++j) {
    for (size_t c = 0; c < d; ++c) out[RowIndex(side, d, j, c)] = ToF16(x[j * row_stride + c]);
  }
}

void EncodeQ8(KvSide side, const float* x, size_t row_stride, uint32_t d, uint8_t* tile) {
  const bool key = side == KvSide::kKey;
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const float* row = x + j * row_stride;
    float absmax = 0;
    for (size_t c = 0; c < d; ++c) absmax = std::max(absmax, std::abs(ClampF16(row[c])));
    const uint16_t scale16 = ToF16(absmax / 127.0f);
    std::memcpy(key ? tile + 2 * j : tile + j * Q8RowBytes(d), &scale16, 2);
    uint8_t* q = key ? tile + KeyColumnsOffset(KvFormat::kQ8) : tile + j * Q8RowBytes(d) + 2;
    const float scale = F16ToF32(scale16);
    for (size_t c = 0; c < d; ++c) {
      const int v = scale > 0 ? RoundClamp(ClampF16(row[c]) / scale, -127, 127) : 0;
      q[key ? c * kBlockTokens + j : c] = static_cast<uint8_t>(static_cast<int8_t>(v));
    }
  }
}

void EncodePolyKvPaper(KvSide side, const float* x, size_t row_stride, uint32_t d, float scale, uint8_t* tile) {
  for (size_t j = 0; j < kBlockTokens; ++j) {
    for (size_t c = 0; c < d; ++c) {
      const int q = scale > 0 ? RoundClamp(x[j * row_stride + c] / scale, -127, 127) : 0;
      tile[RowIndex(side, d, j, c)] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

// One KIVI group of 32 values v[i * stride] -> group g of the tile.
void EncodeKiviGroup(uint32_t bits, const float* v, size_t stride, uint32_t d, size_t g, uint8_t* tile) {
  float mn = kF16Max, mx = -kF16Max;
  for (size_t i = 0; i < kGroupCodes; ++i) {
    const float x = ClampF16(v[i * stride]);
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  const int qmax = (1 << bits) - 1;
  const uint16_t scale16 = ToF16((mx - mn) / qmax), min16 = ToF16(mn);
  std::memcpy(tile + 2 * g, &scale16, 2);
  std::memcpy(tile + KiviMinOffset(d) + 2 * g, &min16, 2);
  const float scale = F16ToF32(scale16), m = F16ToF32(min16);
  uint8_t codes[kGroupCodes];
  for (size_t i = 0; i < kGroupCodes; ++i) {
    codes[i] = static_cast<uint8_t>(scale > 0 ? RoundClamp((ClampF16(v[i * stride]) - m) / scale, 0, qmax) : 0);
  }
  PackGroup(bits, codes, tile + KiviCodesOffset(d) + g * PackedGroupBytes(bits));
}

void EncodeKivi(uint32_t bits, KvSide side, const float* x, size_t row_stride, uint32_t d,
                uint8_t* tile) {
  if (side == KvSide::kKey) {  // group c = channel c over the 32 tokens
    for (size_t c = 0; c < d; ++c) EncodeKiviGroup(bits, x + c, row_stride, d, c, tile);
  } else {  // group cg * 32 + j = channels [32 cg, 32 cg + 32) of token j
    for (size_t cg = 0; cg < d / kGroupCodes; ++cg) {
      for (size_t j = 0; j < kBlockTokens; ++j) {
        EncodeKiviGroup(bits, x + j * row_stride + cg * kGroupCodes, 1, d, cg * kBlockTokens + j, tile);
      }
    }
  }
}

void EncodeTq(uint32_t bits, KvSide side, const float* x, size_t row_stride, uint32_t d, uint8_t* tile) {
  const LloydMaxCodebook& cb = Codebook(bits);
  const float sqrt_d = std::sqrt(static_cast<float>(d));
  const bool key = side == KvSide::kKey;
  float y[kMaxHeadDim];
  uint8_t codes[kBlockTokens][kMaxHeadDim];
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const float* row = x + j * row_stride;
    double sum_sq = 0;
    for (size_t c = 0; c < d; ++c) sum_sq += static_cast<double>(row[c]) * row[c];
    const float norm = static_cast<float>(std::sqrt(sum_sq));
    const uint16_t norm16 = ToF16(norm);
    std::memcpy(key ? tile + 2 * j : tile + j * TqRowBytes(bits, d), &norm16, 2);
    const float inv = norm > 0 ? sqrt_d / norm : 0.0f;  // fold sqrt(d) of z = sqrt(d)·y
    for (size_t c = 0; c < d; ++c) y[c] = row[c] * inv;
    HadamardRotate(y, d);
    for (size_t c = 0; c < d; ++c) {  // k = #{thresholds < z}: binary search, `bits` steps
      uint32_t k = 0;
      for (uint32_t step = 1u << (bits - 1); step != 0; step >>= 1) {
        if (y[c] > cb.threshold[k + step - 1]) k += step;
      }
      codes[j][c] = static_cast<uint8_t>(k);
    }
    if (!key) {
      for (size_t g = 0; g < d / kGroupCodes; ++g) {
        PackGroup(bits, codes[j] + g * kGroupCodes, tile + j * TqRowBytes(bits, d) + 2 + g * PackedGroupBytes(bits));
      }
    }
  }
  if (key) {  // group c = channel c over the 32 tokens
    uint8_t column[kBlockTokens];
    for (size_t c = 0; c < d; ++c) {
      for (size_t j = 0; j < kBlockTokens; ++j) column[j] = codes[j][c];
      PackGroup(bits, column, tile + KeyColumnsOffset(KvFormat::kTq2) + c * PackedGroupBytes(bits));
    }
  }
}

// ---- Per-head reference decoders into dst (32, d), the kernel domain. ----

void DecodeHead(KvFormat f, KvSide side, uint32_t d, const uint8_t* block, const uint8_t* tile,
                float* dst) {
  switch (f) {
    case KvFormat::kF16: {
      const uint16_t* in = reinterpret_cast<const uint16_t*>(tile);
      for (size_t j = 0; j < kBlockTokens; ++j) {
        for (size_t c = 0; c < d; ++c) dst[j * d + c] = F16ToF32(in[RowIndex(side, d, j, c)]);
      }
      return;
    }
    case KvFormat::kQ8:
      for (size_t j = 0; j < kBlockTokens; ++j) {
        const bool key = side == KvSide::kKey;
        const uint8_t* row = tile + j * Q8RowBytes(d);
        uint16_t s16;
        std::memcpy(&s16, key ? tile + 2 * j : row, 2);
        const float scale = F16ToF32(s16);
        const uint8_t* q = key ? tile + KeyColumnsOffset(f) : row + 2;
        for (size_t c = 0; c < d; ++c) dst[j * d + c] = static_cast<int8_t>(q[key ? c * kBlockTokens + j : c]) * scale;
      }
      return;
    case KvFormat::kPolyKvPaper: {
      PolyKvPaperHeader h;
      std::memcpy(&h, block, sizeof(h));
      for (size_t j = 0; j < kBlockTokens; ++j) {
        for (size_t c = 0; c < d; ++c) dst[j * d + c] = static_cast<int8_t>(tile[RowIndex(side, d, j, c)]) * h.scale;
      }
      return;
    }
    case KvFormat::kKivi4: case KvFormat::kKivi3: case KvFormat::kKivi2: {
      const uint32_t bits = KiviBits(f);
      for (size_t g = 0; g < d; ++g) {
        uint16_t s16, m16;
        std::memcpy(&s16, tile + 2 * g, 2);
        std::memcpy(&m16, tile + KiviMinOffset(d) + 2 * g, 2);
        const float scale = F16ToF32(s16), m = F16ToF32(m16);
        const uint8_t* grp = tile + KiviCodesOffset(d) + g * PackedGroupBytes(bits);
        for (size_t i = 0; i < kGroupCodes; ++i) {
          const float v = static_cast<float>(UnpackCode(bits, grp, i)) * scale + m;
          if (side == KvSide::kKey) {
            dst[i * d + g] = v;  // group g = channel g, i = token
          } else {               // group g = (channel group g / 32, token g % 32), i = channel
            dst[(g % kBlockTokens) * d + (g / kBlockTokens) * kGroupCodes + i] = v;
          }
        }
      }
      return;
    }
    case KvFormat::kTq4: case KvFormat::kTq3: case KvFormat::kTq2: {
      const uint32_t bits = TqBits(f);
      const LloydMaxCodebook& cb = Codebook(bits);
      const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
      const bool key = side == KvSide::kKey;
      for (size_t j = 0; j < kBlockTokens; ++j) {
        const uint8_t* row = tile + j * TqRowBytes(bits, d);
        uint16_t n16;
        std::memcpy(&n16, key ? tile + 2 * j : row, 2);
        const float w = F16ToF32(n16) * inv_sqrt_d;
        for (size_t c = 0; c < d; ++c) {
          const uint32_t code =
              key ? UnpackCode(bits, tile + KeyColumnsOffset(f) + c * PackedGroupBytes(bits), j)
                  : UnpackCode(bits, row + 2 + (c / kGroupCodes) * PackedGroupBytes(bits), c % kGroupCodes);
          dst[j * d + c] = w * cb.centroid[code];
        }
      }
      return;
    }
  }
}

}  // namespace

const KvFormatTraits& GetKvFormatTraits(KvFormat format) {
  const size_t i = static_cast<size_t>(format);
  CHORUS_CHECK(i < std::size(kTraits));
  return kTraits[i];
}

Result<KvFormat> ParseKvFormat(std::string_view name) {
  std::string valid;
  for (const auto& t : kTraits) {
    if (t.name == name) return t.format;
    valid += valid.empty() ? "" : ", ";
    valid += t.name;
  }
  return Status::Error("unknown KV format '{}'; valid formats: {}", name, valid);
}

std::string_view KvFormatName(KvFormat format) { return GetKvFormatTraits(format).name; }
std::string_view KvSideName(KvSide side) { return side == KvSide::kKey ? "keys" : "values"; }
bool KvFormatIsRotated(KvFormat format) { return GetKvFormatTraits(format).rotated; }

Status CheckKvFormat(KvFormat format, KvSide side, const KvGeometry& g) {
  const size_t fi = static_cast<size_t>(format);
  if (fi >= std::size(kTraits)) return Status::Error("invalid KV format id {}", fi);
  const std::string_view name = kTraits[fi].name;
  if (g.n_head_kv < 1 || g.n_head_kv > kMaxKvHeads) {
    return Status::Error("{}: n_head_kv must be in [1, {}], got {}", name, kMaxKvHeads, g.n_head_kv);
  }
  if (g.head_dim < 1 || g.head_dim > kMaxHeadDim) {
    return Status::Error("{}: head_dim must be in [1, {}], got {}", name, kMaxHeadDim, g.head_dim);
  }
  if (kTraits[fi].rotated) {
    if (!IsPowerOfTwo(g.head_dim)) {
      return Status::Error("{} needs a power-of-two head_dim, got {}", name, g.head_dim);
    }
    if (g.head_dim < kGroupCodes) {
      return Status::Error("{} needs head_dim >= {} (one group of codes), got {}", name, kGroupCodes, g.head_dim);
    }
  }
  if (KiviBits(format) != 0 && side == KvSide::kValue && g.head_dim % kGroupCodes != 0) {
    return Status::Error("{} values need a head_dim that is a multiple of {} (groups of {} channels), got {}",
                         name, kGroupCodes, kGroupCodes, g.head_dim);
  }
  return Status::Ok();
}

size_t KvHeadTileBytes(KvFormat format, KvSide side, uint32_t head_dim) {
  return TileBytes(format, head_dim);
}

size_t KvHeadTileOffset(KvFormat format, KvSide side, const KvGeometry& g, uint32_t kv_head) {
  return HeaderBytes(format) + size_t{kv_head} * TileBytes(format, g.head_dim);
}

size_t KvBlockBytes(KvFormat format, KvSide side, const KvGeometry& g) {
  return HeaderBytes(format) + size_t{g.n_head_kv} * TileBytes(format, g.head_dim);
}

double KvNominalBits(KvFormat format, KvSide side, const KvGeometry& g) {
  return 8.0 * static_cast<double>(KvBlockBytes(format, side, g)) /
         (static_cast<double>(kBlockTokens) * g.n_head_kv * g.head_dim);
}

Status EncodeKvBlock(KvFormat format, KvSide side, const KvGeometry& g, const float* src,
                     uint8_t* dst, const KvEncodeParams& params) {
  CHORUS_RETURN_IF_ERROR(CheckKvFormat(format, side, g));
  const size_t row_stride = size_t{g.n_head_kv} * g.head_dim;
  float poly_scale = 0;
  if (format == KvFormat::kPolyKvPaper) {
    const float a = params.layer_absmax;
    if (!std::isfinite(a) || a < 0) {
      return Status::Error("polykv-paper: layer_absmax must be finite and >= 0, got {}", a);
    }
    if (a == 0) {
      float block_max = 0;
      for (size_t i = 0; i < kBlockTokens * row_stride; ++i) block_max = std::max(block_max, std::abs(src[i]));
      if (block_max > 0) {
        return Status::Error(
            "polykv-paper needs KvEncodeParams.layer_absmax (max |K| over the layer); got 0 for a "
            "block with max |x| = {}", block_max);
      }
    }
    poly_scale = a / 127.0f;
    const PolyKvPaperHeader header{poly_scale};
    std::memcpy(dst, &header, sizeof(header));
  }
  for (uint32_t h = 0; h < g.n_head_kv; ++h) {
    const float* x = src + size_t{h} * g.head_dim;
    uint8_t* tile = dst + KvHeadTileOffset(format, side, g, h);
    switch (format) {
      case KvFormat::kF16: EncodeF16(side, x, row_stride, g.head_dim, tile); break;
      case KvFormat::kQ8: EncodeQ8(side, x, row_stride, g.head_dim, tile); break;
      case KvFormat::kPolyKvPaper: EncodePolyKvPaper(side, x, row_stride, g.head_dim, poly_scale, tile); break;
      case KvFormat::kKivi4: case KvFormat::kKivi3: case KvFormat::kKivi2:
        EncodeKivi(KiviBits(format), side, x, row_stride, g.head_dim, tile);
        break;
      case KvFormat::kTq4: case KvFormat::kTq3: case KvFormat::kTq2:
        EncodeTq(TqBits(format), side, x, row_stride, g.head_dim, tile);
        break;
    }
  }
  return Status::Ok();
}

void DecodeKvHeadRef(KvFormat format, KvSide side, const KvGeometry& g, const uint8_t* block,
                     uint32_t kv_head, float* dst) {
  CHORUS_CHECK(CheckKvFormat(format, side, g).ok() && kv_head < g.n_head_kv);
  DecodeHead(format, side, g.head_dim, block, block + KvHeadTileOffset(format, side, g, kv_head), dst);
}

void DecodeKvBlockRef(KvFormat format, KvSide side, const KvGeometry& g, const uint8_t* src,
                      float* dst) {
  const uint32_t d = g.head_dim;
  const size_t row_stride = size_t{g.n_head_kv} * d;
  std::vector<float> tile(kBlockTokens * d);  // (token, channel) of one head
  for (uint32_t h = 0; h < g.n_head_kv; ++h) {
    DecodeKvHeadRef(format, side, g, src, h, tile.data());
    for (size_t j = 0; j < kBlockTokens; ++j) {
      float* out = dst + j * row_stride + size_t{h} * d;
      std::memcpy(out, tile.data() + j * d, d * sizeof(float));
      if (KvFormatIsRotated(format)) HadamardRotateInverse(out, d);
    }
  }
}

}  // namespace chorus
