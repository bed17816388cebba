// Per-target SIMD helpers of the KV kernels (Highway): unpack code groups into lanes, Lloyd-Max
// centroid lookup, fp16/int8 row loads. Invariant: vectors hold at most 16 lanes, so a 32-code
// group always spans whole vectors and a lane chunk never straddles two packed words.

// Per-target include guard (the Highway convention for -inl.h files).
#if defined(CHORUS_KV_KV_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_KV_KV_KERNELS_INL_H_
#undef CHORUS_KV_KV_KERNELS_INL_H_
#else
#define CHORUS_KV_KV_KERNELS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>  // vpermps, vblendvps, vpmultishiftqb (CentroidTable::Decode)
#endif

#include "kv/kv_format_layout.h"  // LoadLE32, Codebook, PackedGroupBytes

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;  // the kernels' float vectors (≤ 16 lanes)
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

// Codes i0 .. i0+N-1 (N = Lanes) of the packed 32-code group `g` as u32 lanes; i0 % N == 0.
template <uint32_t kBits>
HWY_INLINE VU UnpackCodes(DU du, const uint8_t* g, size_t i0) {
  if constexpr (kBits == 4) {  // byte k: code k (low nibble), code k+16 (high nibble)
    const hn::Rebind<uint8_t, DU> d8;
    const VU b = hn::PromoteTo(du, hn::LoadU(d8, g + (i0 & 15)));
    return hn::And(hn::ShiftRightSame(b, (i0 & 16) ? 4 : 0), hn::Set(du, 15u));
  } else if constexpr (kBits == 2) {  // LE u32 word w: codes 16w.., 2 bits each
    const VU w = hn::Set(du, kv_layout::LoadLE32(g + 4 * (i0 >> 4)));
    const VU shift = hn::ShiftLeft<1>(hn::Iota(du, static_cast<uint32_t>(i0 & 15)));
    return hn::And(hn::operator>>(w, shift), hn::Set(du, 3u));
  } else {  // 3: 2-bit group of the low bits, then one LE u32 of the high bits
    static_assert(kBits == 3, "2, 3 or 4 bits");
    const VU lo = UnpackCodes<2>(du, g, i0);
    const VU w = hn::Set(du, kv_layout::LoadLE32(g + 8));
    const VU hi = hn::And(hn::operator>>(w, hn::Iota(du, static_cast<uint32_t>(i0))), hn::Set(du, 1u));
    return hn::Or(lo, hn::ShiftLeft<2>(hi));
  }
}

// Integer codes as floats.
HWY_INLINE VF CodesToFloat(DF df, VU codes) {
  return hn::ConvertTo(df, hn::BitCast(DI(), codes));
}

// AVX2's vpermps reads only bits [2:0] of each index and vblendvps only the sign bit of its
// selector, so CentroidTable::Decode masks no code there: an index may carry a neighbouring code's
// bits above its own (a 4-entry table is stored twice so bit 2 picks the same entry), and a 3- or
// 4-bit code's top bit, shifted to bit 31, blends two 8-entry permutes. Same centroids, fewer ops.
#undef CHORUS_KV_AVX2_LOOKUP
#if HWY_TARGET == HWY_AVX2
#define CHORUS_KV_AVX2_LOOKUP 1
#else
#define CHORUS_KV_AVX2_LOOKUP 0
#endif

// AVX-512 (16 lanes): vpermps reads only bits [3:0] of each index, so a 4-bit code needs no mask
// (the high nibble above it is ignored) and a 3-bit code none either when its 8 centroids are stored
// twice (bit 3 then picks the same entry). With VBMI (AVX3_DL) a 3-bit code is gathered by two
// vpmultishiftqb — its 2 low bits from the broadcast 64-bit word, its high bit from the broadcast
// 32-bit word, each straight into the low byte of its lane — and one vpternlogd: 4 operations per 16
// codes instead of 8. Same centroids, so the same floats meet the same FMAs: bit-identical results.
#undef CHORUS_KV_AVX512_LOOKUP
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define CHORUS_KV_AVX512_LOOKUP 1
#else
#define CHORUS_KV_AVX512_LOOKUP 0
#endif
#undef CHORUS_KV_VBMI_LOOKUP
#if HWY_TARGET == HWY_AVX3_DL
#define CHORUS_KV_VBMI_LOOKUP 1
#else
#define CHORUS_KV_VBMI_LOOKUP 0
#endif

#if CHORUS_KV_VBMI_LOOKUP
// vpmultishiftqb controls of a 3-bit group's lanes i0 .. i0+15 (i0 = 0 or 16): lane m's low byte takes
// the 8 bits from offset 2i (low bits of code i = i0 + m) resp. (i - 2) mod 64 (its high bit lands in
// bit 2). The other bytes select bit 0 (ignored by vpermps).
struct alignas(64) MultishiftControls {
  uint8_t lo[2][64];
  uint8_t hi[2][64];
};
constexpr MultishiftControls MakeMultishiftControls() {
  MultishiftControls c{};
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 16; ++m) {
      const int i = 16 * h + m;
      c.lo[h][4 * m] = static_cast<uint8_t>(2 * i);
      c.hi[h][4 * m] = static_cast<uint8_t>((i - 2) & 63);
    }
  return c;
}
alignas(64) inline constexpr MultishiftControls kTq3Controls = MakeMultishiftControls();
#endif

// The 2^kBits Lloyd-Max centroids held in registers: one table vector when it fits in a vector,
// else consecutive chunks of N entries selected by the high index bits (AVX2: see above).
template <uint32_t kBits>
class CentroidTable {
 public:
  static constexpr size_t kSize = size_t{1} << kBits;
  static constexpr size_t kN = hn::MaxLanes(DF());
  static constexpr size_t kChunks = CHORUS_KV_AVX2_LOOKUP ? (kBits == 2 ? 1 : 2) : kSize > kN ? kSize / kN : 1;

  HWY_INLINE CentroidTable() {
    const DF df;
    const float* cb = kv_layout::Codebook(kBits).centroid;
#if CHORUS_KV_AVX2_LOOKUP
    for (size_t k = 0; k < kChunks; ++k) t_[k] = kBits == 4 ? hn::LoadU(df, cb + 8 * k) : hn::LoadDup128(df, cb + 4 * k);
#else
    for (size_t k = 0; k < kChunks; ++k) t_[k] = hn::LoadU(df, cb + k * kN);
#if CHORUS_KV_AVX512_LOOKUP
    if constexpr (kBits == 3) {  // 8 centroids twice: index bit 3 picks the same one
      HWY_ALIGN float twice[16];
      for (size_t k = 0; k < 16; ++k) twice[k] = cb[k & 7];
      t_[0] = hn::Load(df, twice);
    }
#endif
#endif
  }

  // The centroids of codes i0 .. i0+N-1 of the packed 32-code group g (i0 % N == 0).
  HWY_INLINE VF Decode(const uint8_t* g, size_t i0) const {
#if CHORUS_KV_AVX2_LOOKUP
    const DU du;
    hn::Vec<DU> idx, sel;  // index in bits [2:0] (garbage above), the top code bit in bit 31
    if constexpr (kBits == 4) {  // the byte (low nibble: the high one is garbage) or the byte >> 4
      const hn::Rebind<uint8_t, DU> d8;
      idx = hn::ShiftRightSame(hn::PromoteTo(du, hn::LoadU(d8, g + (i0 & 15))), (i0 & 16) ? 4 : 0);
      sel = hn::ShiftLeft<28>(idx);
    } else {  // the 2-bit word shifted to the lane's code (the next code's bits above)
      const VU w = hn::Set(du, kv_layout::LoadLE32(g + 4 * (i0 >> 4)));
      idx = hn::operator>>(w, hn::ShiftLeft<1>(hn::Iota(du, static_cast<uint32_t>(i0 & 15))));
      if constexpr (kBits == 2) return VF{_mm256_permutevar8x32_ps(t_[0].raw, idx.raw)};
      const VU hi = hn::Set(du, kv_layout::LoadLE32(g + 8));  // bit i0 + lane → bit 31
      sel = hn::operator<<(hi, hn::Sub(hn::Set(du, 31u), hn::Iota(du, static_cast<uint32_t>(i0))));
    }
    return VF{_mm256_blendv_ps(_mm256_permutevar8x32_ps(t_[0].raw, idx.raw), _mm256_permutevar8x32_ps(t_[1].raw, idx.raw),
                               _mm256_castsi256_ps(sel.raw))};
#else
#if CHORUS_KV_AVX512_LOOKUP
    if constexpr (kBits == 4) {  // the byte (high nibble ignored) or the byte >> 4, no mask
      const DU du;
      const hn::Rebind<uint8_t, DU> d8;
      const VU idx = hn::ShiftRightSame(hn::PromoteTo(du, hn::LoadU(d8, g + (i0 & 15))), (i0 & 16) ? 4 : 0);
      return VF{_mm512_permutexvar_ps(idx.raw, t_[0].raw)};
    }
#endif
#if CHORUS_KV_VBMI_LOOKUP
    if constexpr (kBits == 3) {
      uint64_t lo_word;
      std::memcpy(&lo_word, g, 8);
      const __m512i lo = _mm512_set1_epi64(static_cast<long long>(lo_word));
      const __m512i hi = _mm512_set1_epi32(static_cast<int>(kv_layout::LoadLE32(g + 8)));
      const size_t h = (i0 >> 4) & 1;
      const __m512i lo_bits = _mm512_multishift_epi64_epi8(_mm512_load_si512(kTq3Controls.lo[h]), lo);
      const __m512i hi_bits = _mm512_multishift_epi64_epi8(_mm512_load_si512(kTq3Controls.hi[h]), hi);
      // bits [1:0] from lo_bits, the rest from hi_bits: (lo & 3) | (hi & ~3)
      const __m512i idx = _mm512_ternarylogic_epi32(lo_bits, hi_bits, _mm512_set1_epi32(3), 0xE4);
      return VF{_mm512_permutexvar_ps(idx, t_[0].raw)};
    }
#endif
    return Lookup(UnpackCodes<kBits>(DU(), g, i0));
#endif
  }

 private:
#if !CHORUS_KV_AVX2_LOOKUP
  HWY_INLINE VF Lookup(VU codes) const {
    const DF df;
    const DU du;
    if constexpr (kChunks == 1) {
      return hn::TableLookupLanes(t_[0], hn::IndicesFromVec(df, hn::BitCast(DI(), codes)));
    } else {
      const auto idx = hn::IndicesFromVec(df, hn::BitCast(DI(), hn::And(codes, hn::Set(du, uint32_t{kN - 1}))));
      VF r = hn::TableLookupLanes(t_[0], idx);
      for (size_t k = 1; k < kChunks; ++k) {
        const auto in_chunk = hn::RebindMask(df, hn::Eq(hn::ShiftRightSame(codes, kLog2N), hn::Set(du, uint32_t(k))));
        r = hn::IfThenElse(in_chunk, hn::TableLookupLanes(t_[k], idx), r);
      }
      return r;
    }
  }
  static constexpr int Log2(size_t n) { return n <= 1 ? 0 : 1 + Log2(n / 2); }
  static constexpr int kLog2N = Log2(kN);
#endif
  VF t_[kChunks];
};

// One fp16 value converted with the target's conversion (F16C where present).
HWY_INLINE float LoadF16One(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

// N fp16 values at p (unaligned) as floats.
HWY_INLINE VF LoadF16(DF df, const uint8_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

// N int8 values at p as floats.
HWY_INLINE VF LoadI8(DF df, const uint8_t* p) {
  const hn::Rebind<int8_t, DF> d8;
  return hn::ConvertTo(df, hn::PromoteTo(DI(), hn::LoadU(d8, reinterpret_cast<const int8_t*>(p))));
}

HWY_INLINE float ReduceSum(DF df, VF v) { return hn::GetLane(hn::SumOfLanes(df, v)); }

#if HWY_TARGET != HWY_SCALAR  // the targets with ≥ 4 float lanes

// Adds the 128-bit blocks of v together: 4 lanes.
template <class D>
HWY_INLINE auto FoldTo128(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    return v;
  } else {
    const hn::Half<D> dh;
    return FoldTo128(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// {Σ lanes of a, Σ b, Σ c, Σ e} as one 4-lane vector (a transposing reduction: 6 shuffles and
// 3 adds for four sums, then the block fold). Needs vectors of at least 4 lanes.
HWY_INLINE auto Sum4(DF df, VF a, VF b, VF c, VF e) {
  const hn::RepartitionToWide<DF> d64;
  const VF ab = hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));  // a02 b02 a13 b13
  const VF ce = hn::Add(hn::InterleaveLower(df, c, e), hn::InterleaveUpper(df, c, e));
  const auto ab64 = hn::BitCast(d64, ab), ce64 = hn::BitCast(d64, ce);
  const VF sum = hn::Add(hn::BitCast(df, hn::InterleaveLower(d64, ab64, ce64)),
                         hn::BitCast(df, hn::InterleaveUpper(d64, ab64, ce64)));  // a b c e per block
  return FoldTo128(df, sum);
}

#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
