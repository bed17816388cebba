// The x86 panel × token kernels and their path, written once for any `Dot` (int8_x86-inl.h includes
// this file inside one namespace per product instruction; no include guard on purpose).
// Invariant: per (row, token) the float operations are int8_ref.h's, in its order.

// y[t * ldy + i] for t < kT, i < n_rows: the panel × kT tokens (activation rows ld_act apart).
template <int kSub, int kBatch, bool kSigned, int kT>
HWY_INLINE void PanelTokens(const Panel8& pn, size_t cols, const uint8_t* act, size_t ld_act,
                            const Int8ActLayout& l, float* y, size_t ldy, size_t n_rows) {
  constexpr int kGroups = kSub / 4;
  const size_t nsub = cols / kSub;
  __m256 acc[kT];
  const float* dx[kT];
  const float* s[kT];
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) {
    acc[t] = _mm256_setzero_ps();
    dx[t] = reinterpret_cast<const float*>(act + t * ld_act + l.dx_off);
    s[t] = reinterpret_cast<const float*>(act + t * ld_act + l.s_off);
  }
  for (size_t j = 0; j < nsub; ++j) {
    const uint8_t* xj[kT];
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) xj[t] = act + t * ld_act + j * kSub;
    __m256i isum[kT];
    Dot::template SubBlock<kGroups, kBatch, kSigned, kT>(pn.codes + j * kSub * 8, xj, isum);
    const __m256 dwv = _mm256_load_ps(pn.dw + 8 * j);
    const __m256 mv = kSigned ? _mm256_setzero_ps() : _mm256_load_ps(pn.m + 8 * j);
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const __m256 sc = _mm256_mul_ps(dwv, _mm256_set1_ps(dx[t][j * kSub / 32]));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), sc, acc[t]);
      if (!kSigned) acc[t] = _mm256_fmadd_ps(mv, _mm256_set1_ps(s[t][j]), acc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) StoreRows(y + t * ldy, acc[t], n_rows);
}

// Where DirectPanelsToken's Q8_0 panels request their next panel: L2 (prefetcht1). With the AVX2 kernels
// prefetcht1 decoded faster than prefetcht0; the other types stay on prefetcht0 (no better with
// prefetcht1 on the AVX-512 path). Measured: docs/results/design-measurements.md, kQ8PrefetchHint.
inline constexpr _mm_hint kQ8PrefetchHint = _MM_HINT_T1;

// The next panel's `bytes` at `next` toward L1 (kHint: or L2), spread evenly over the n steps of the current
// panel's work (a burst of them at once stalls): step n0 (0, 1, ... in order) requests the lines of
// [n0 · bytes / n, (n0 + 1) · bytes / n). The bounds advance by bytes / n and a carried remainder:
// no division per step (two 64-bit divisions per block showed in the Q8_0 decode kernel's profile:
// docs/results/design-measurements.md, PrefetchSpread).
template <_mm_hint kHint>
class PrefetchSpread {
 public:
  PrefetchSpread() = default;
  PrefetchSpread(const uint8_t* next, size_t bytes, size_t n)
      : next_(next), q_(next ? bytes / n : 0), r_(next ? bytes % n : 0), n_(n) {}
  HWY_INLINE void Step() {
    if (!next_) return;
    const size_t b = e_ & ~size_t{63};
    e_ += q_;
    rem_ += r_;
    if (rem_ >= n_) {
      ++e_;
      rem_ -= n_;
    }
    for (size_t o = b; o < e_; o += 64) _mm_prefetch(reinterpret_cast<const char*>(next_ + o), kHint);
  }

 private:
  const uint8_t* next_ = nullptr;
  size_t q_ = 0, r_ = 0, n_ = 1, rem_ = 0, e_ = 0;
};

// Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K rows (8, clamped like PackPanel8) × one token straight
// from the blocks: each 32 columns' codes unpacked in registers (the panel packers' bit
// moves), its 8 rows' exact integer sums gathered by TransposeSum8 (Q6_K: per 16-element half,
// TransposeSum8Halves), then PanelTokens's float operations in its order with the (dw, m) the panel
// packing computes (K-quant scales for 8 rows at once: KQuantScales8, Q6KScales8): the same bits as
// the panel path, without the stage and the transpose (decode: the unpack / per-call panel packing
// dominated the profiles of Gemma 3's tensors and of SmolLM2's Q4_1 ones).
// kP panels at once (rps[8 p + i]: row i of panel p; ys[p], n_rows[p]; nexts[p], next_bytes[p]: what
// panel p prefetches), in lock step block by block: each panel's operations are those of the panel
// alone, only interleaved — kP streams through memory at once (as Q8Rows' lock-step rows).
template <GgmlType kType, int kP>
HWY_INLINE void DirectPanelsToken(const uint8_t* const* rps, size_t cols, const uint8_t* act, const Int8ActLayout& l,
                                  float* const* ys, const size_t* n_rows, const uint8_t* const* nexts,
                                  const size_t* next_bytes) {
  static_assert(kType == GgmlType::kQ4_0 || kType == GgmlType::kQ4_1 || kType == GgmlType::kQ5_0 ||
                kType == GgmlType::kQ8_0 || kType == GgmlType::kQ4_K || kType == GgmlType::kQ6_K);
  const float* dx = reinterpret_cast<const float*>(act + l.dx_off);
  const float* s = reinterpret_cast<const float*>(act + l.s_off);
  __m256 accs[kP];
  // Q8_0's next panels are requested into L2, the other types' into L1 (kQ8PrefetchHint).
  constexpr _mm_hint kHint = kType == GgmlType::kQ8_0 ? kQ8PrefetchHint : _MM_HINT_T0;
  PrefetchSpread<kHint> pfs[kP];
#pragma GCC unroll 4
  for (int p = 0; p < kP; ++p) {
    accs[p] = _mm256_setzero_ps();
    pfs[p] = PrefetchSpread<kHint>(next_bytes[p] ? nexts[p] : nullptr, next_bytes[p], cols / 32);  // a step per 32 columns
  }
  // sub-block j (global; its activations' scale dx[jx]) with integer sums isum
  auto add = [&](__m256& acc, __m256i isum, __m256 dwv, __m256 mv, size_t j, size_t jx) {
    const __m256 sc = _mm256_mul_ps(dwv, _mm256_set1_ps(dx[jx]));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), sc, acc);
    acc = _mm256_fmadd_ps(mv, _mm256_set1_ps(s[j]), acc);
  };
  auto step = [&](__m256& acc, const __m256i* v, __m256 dwv, __m256 mv, size_t j) {
    add(acc, TransposeSum8(v), dwv, mv, j, j);
  };
// The body that follows, up to its closing brace, runs once per panel with that panel's rp / acc / pf (a
// macro, not a lambda per panel: the lambda form decoded slower; docs/results/design-measurements.md,
// CHORUS_EACH_PANEL).
#define CHORUS_EACH_PANEL                             \
  _Pragma("GCC unroll 4") for (int p = 0; p < kP; ++p) { \
    const uint8_t* const* rp = rps + 8 * p;           \
    __m256& acc = accs[p];                            \
    PrefetchSpread<kHint>& pf = pfs[p];
  if constexpr (kType == GgmlType::kQ8_0) {  // signed codes: |w| · sign(x, w), no m term
    for (size_t b = 0; b < cols / 32; ++b) {
      const size_t off = b * sizeof(BlockQ8_0);
      const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act + 32 * b));
      CHORUS_EACH_PANEL
      pf.Step();
      __m256i v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i] + off + offsetof(BlockQ8_0, qs)));
        v[i] = Dot::Partial(_mm256_abs_epi8(w), _mm256_sign_epi8(xv, w));
      }
      const __m256 sc = _mm256_mul_ps(Halves8(rp, off), _mm256_set1_ps(dx[b]));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(TransposeSum8(v)), sc, acc);
      }
    }
  } else if constexpr (kType == GgmlType::kQ4_0 || kType == GgmlType::kQ4_1 || kType == GgmlType::kQ5_0) {
    for (size_t b = 0; b < cols / 32; ++b) {  // 32-element blocks: one sub-block each
      const size_t off = b * kBlock32Bytes<kType>;
      const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act + 32 * b));
      CHORUS_EACH_PANEL
      pf.Step();
      __m256i v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) v[i] = Dot::Partial(Block32Codes<kType>(rp[i] + off), xv);
      if constexpr (kType == GgmlType::kQ4_1) {
        static_assert(offsetof(BlockQ4_1, m) == 2);
        __m256 dwv, mv;
        HalfPairs8(rp, off, &dwv, &mv);
        step(acc, v, dwv, mv, b);
      } else {
        const __m256 dwv = Halves8(rp, off);
        step(acc, v, dwv, _mm256_mul_ps(dwv, _mm256_set1_ps(kType == GgmlType::kQ5_0 ? -16.0f : -8.0f)), b);
      }
      }
    }
  } else if constexpr (kType == GgmlType::kQ6_K) {  // 16-element sub-blocks: two per 32 codes
    __m256 dw[16];
    for (size_t b = 0; b < cols / 256; ++b) {
      const size_t off = b * sizeof(BlockQ6_K);
      CHORUS_EACH_PANEL
      Q6KScales8(rp, off, dw);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const size_t c32 = 8 * b + 4 * h + k;  // the 32 columns' index in the row
          pf.Step();
          const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act + 32 * c32));
          __m256i v[8], lo, hi;
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) v[i] = Dot::Partial(Q6KCodes(rp[i] + off, h, k), xv);
          TransposeSum8Halves(v, &lo, &hi);
          const int j = 8 * h + 2 * k;  // sub-block in the super-block
          const __m256 m32 = _mm256_set1_ps(-32.0f);
          add(acc, lo, dw[j], _mm256_mul_ps(m32, dw[j]), 16 * b + j, c32);
          add(acc, hi, dw[j + 1], _mm256_mul_ps(m32, dw[j + 1]), 16 * b + j + 1, c32);
        }
      }
      }
    }
  } else {
    __m256 dw[8], mn[8];  // [sub-block], lane = row
    for (size_t b = 0; b < cols / 256; ++b) {
      const size_t off = b * sizeof(BlockQ4_K);
      CHORUS_EACH_PANEL
      KQuantScales8(rp, off, dw, mn);
      for (int c = 0; c < 4; ++c) {
        __m256i q[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i)
          q[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i] + off + offsetof(BlockQ4_K, qs) + 32 * c));
        for (int half = 0; half < 2; ++half) {
          const size_t j = 2 * c + half;
          pf.Step();
          const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(act + 256 * b + 32 * j));
          __m256i v[8];
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) v[i] = Dot::Partial(half ? Hi4(q[i]) : Lo4(q[i]), xv);
          step(acc, v, dw[j], mn[j], 8 * b + j);
        }
      }
      }
    }
  }
#undef CHORUS_EACH_PANEL
  for (int p = 0; p < kP; ++p) StoreRows(ys[p], accs[p], n_rows[p]);
}

// Panels (global 8-row groups) [g0, g1) × all tokens: each panel packed once per chunk of
// kPanelTokChunk tokens and met by the chunk's tokens ≤ 4 at a time.
// Up to this many tokens Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K take DirectPanelsToken (its work grows with the
// tokens, the panel's does not).
inline constexpr size_t kDirectMaxTok = 2;
// Panels a decode thread reads in lock step (DirectPanelsToken).
inline constexpr size_t kDirectStreams = 4;
// ... except Q4_K / Q6_K, whose super-block bodies are long: read one panel at a time, which read them
// faster than lock step on AMD Zen 4 (docs/results/design-measurements.md, DecodeInLockstep). Not measured
// on Intel.
inline constexpr bool DecodeInLockstep(GgmlType t) { return t != GgmlType::kQ4_K && t != GgmlType::kQ6_K; }

template <int kSub, int kBatch, bool kSigned>
void Int8Groups(const ops_internal::JobList& jobs, const uint8_t* act, size_t n_tok, size_t g0, size_t g1) {
  const size_t cols = jobs.ws[0].cols;
  const Int8ActLayout l = Int8ActLayoutOf(cols, kSub);
  const size_t panel_bytes = Align64(Panel8Bytes(cols, kSub));
  uint8_t* scratch = ops_internal::TileScratch().Get(panel_bytes + StageBytes(cols, kSub));
  const Panel8 pn = Panel8At(scratch, cols, kSub);
  uint8_t* stage = scratch + panel_bytes;
  const GgmlType type = jobs.ws[0].type;
  if (n_tok <= kDirectMaxTok &&
      (kSigned || (kSub == 32 ? type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 ||
                                    type == GgmlType::kQ4_K
                              : type == GgmlType::kQ6_K))) {
    // A thread's panels of a matrix as kDirectStreams equal parts read in lock step (the rest, fewer
    // than kDirectStreams panels, one at a time): each panel's operations are its own, so the bits
    // are those of one panel after the other.
    jobs.ForRange(g0, g1, [&](size_t j, size_t p0, size_t p1) {
      const WeightView& w = jobs.ws[j];
      auto run = [&]<int kP>(const size_t* panels) {
        const uint8_t* rp[8 * kP];
        const uint8_t* next[kP];
        size_t next_bytes[kP], n_rows[kP], none[kP] = {};
        for (int q = 0; q < kP; ++q) {
          const size_t r0 = panels[q] * 8;
          for (size_t i = 0; i < 8; ++i) rp[8 * q + i] = w.data + std::min(r0 + i, w.rows - 1) * w.row_bytes;
          // the next panel's rows (contiguous), requested while this one is computed
          next[q] = rp[8 * q] + 8 * w.row_bytes;
          next_bytes[q] = r0 + 8 < w.rows ? std::min<size_t>(8, w.rows - r0 - 8) * w.row_bytes : 0;
          n_rows[q] = std::min<size_t>(8, w.rows - r0);
        }
        for (size_t t = 0; t < n_tok; ++t) {
          float* y[kP];
          for (int q = 0; q < kP; ++q) y[q] = jobs.ys[j] + t * w.rows + panels[q] * 8;
          const uint8_t* a = act + t * l.stride;
          const size_t* nb = t == 0 ? next_bytes : none;  // once per panel
          if constexpr (kSigned) {
            DirectPanelsToken<GgmlType::kQ8_0, kP>(rp, cols, a, l, y, n_rows, next, nb);
          } else if constexpr (kSub == 16) {
            DirectPanelsToken<GgmlType::kQ6_K, kP>(rp, cols, a, l, y, n_rows, next, nb);
          } else {
            switch (type) {
              case GgmlType::kQ4_0: DirectPanelsToken<GgmlType::kQ4_0, kP>(rp, cols, a, l, y, n_rows, next, nb); break;
              case GgmlType::kQ4_1: DirectPanelsToken<GgmlType::kQ4_1, kP>(rp, cols, a, l, y, n_rows, next, nb); break;
              case GgmlType::kQ5_0: DirectPanelsToken<GgmlType::kQ5_0, kP>(rp, cols, a, l, y, n_rows, next, nb); break;
              default: DirectPanelsToken<GgmlType::kQ4_K, kP>(rp, cols, a, l, y, n_rows, next, nb); break;
            }
          }
        }
      };
      const size_t part = DecodeInLockstep(type) ? (p1 - p0) / kDirectStreams : 0;  // 0: all one at a time
      for (size_t k = 0; k < part; ++k) {
        size_t panels[kDirectStreams];
        for (size_t q = 0; q < kDirectStreams; ++q) panels[q] = p0 + q * part + k;
        run.template operator()<static_cast<int>(kDirectStreams)>(panels);
      }
      for (size_t p = p0 + kDirectStreams * part; p < p1; ++p) run.template operator()<1>(&p);
    });
    return;
  }
  ops_internal::ForPanelTokens(
      jobs, n_tok, ops_internal::kPanelTokChunk, g0, g1, [&](const WeightView& w, size_t r0) { PackPanel8(w, r0, pn, stage); },
      [&](size_t j, size_t r0, size_t n_rows, size_t t0, size_t nt) {
        const size_t ldy = jobs.ws[j].rows;
        const uint8_t* a = act + t0 * l.stride;
        float* y = jobs.ys[j] + t0 * ldy + r0;
        switch (nt) {
          case 1: return PanelTokens<kSub, kBatch, kSigned, 1>(pn, cols, a, l.stride, l, y, ldy, n_rows);
          case 2: return PanelTokens<kSub, kBatch, kSigned, 2>(pn, cols, a, l.stride, l, y, ldy, n_rows);
          case 3: return PanelTokens<kSub, kBatch, kSigned, 3>(pn, cols, a, l.stride, l, y, ldy, n_rows);
          default: return PanelTokens<kSub, kBatch, kSigned, 4>(pn, cols, a, l.stride, l, y, ldy, n_rows);
        }
      });
}

// ws[0, n): one quantized type and cols (the caller checks). Quantize x once, then panels over the pool.
inline void Int8Path(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                     ThreadPool& pool) {
  const GgmlType type = ws[0].type;
  const size_t cols = ws[0].cols;
  const int sub = ops_internal::Int8SubOf(type);
  const Int8ActLayout l = Int8ActLayoutOf(cols, sub);
  uint8_t* act = ops_internal::ActScratch().Get(l.stride * n_tok);
  QuantizeActsPool(x, cols, n_tok, sub, act, pool);
  const ops_internal::JobList jobs(ws, ys, n, kPanelRows8);
  ops_internal::ParallelRanges(pool, jobs.total(), 1, [&](size_t g0, size_t g1) {
    switch (type) {
      case GgmlType::kQ4_0:
      case GgmlType::kQ4_1:
      case GgmlType::kQ4_K: return Int8Groups<32, 8, false>(jobs, act, n_tok, g0, g1);
      case GgmlType::kQ5_0:
      case GgmlType::kQ5_1:
      case GgmlType::kQ5_K: return Int8Groups<32, 4, false>(jobs, act, n_tok, g0, g1);
      case GgmlType::kQ6_K: return Int8Groups<16, 2, false>(jobs, act, n_tok, g0, g1);
      default: return Int8Groups<32, 1, true>(jobs, act, n_tok, g0, g1);  // Q8_0
    }
  });
}
