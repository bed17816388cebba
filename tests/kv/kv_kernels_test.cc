// KV block kernels: SIMD Score/Accumulate vs their scalar *Ref twins on every compiled SIMD target,
// every format and geometry, n_q ∈ {1, 3, 4, 6, 45}; tolerances from float accumulation error bounds.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1  // list AVX3_DL among the targets, as kv_kernels_simd.cc compiles it
#endif
#include "kv/kv_kernels.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>  // SetSupportedTargetsForTest, SupportedAndGeneratedTargets

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kv/distortion.h"  // DistortionStats
#include "kv/hadamard.h"    // HadamardRotate
#include "kv/kv_format.h"   // EncodeKvBlock, DecodeKvHeadRef
#include "kv/kv_format_layout.h"  // PackGroup, TqRowBytes (hand-built TQ blocks)
#include "util/fp16.h"            // F32ToF16, F16ToF32

namespace chorus {
namespace {

// γ_n = n·u / (1 − n·u): the relative bound of n float roundings (u = 2^-24, Higham §3.1).
double Gamma(size_t n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}
// Roundings beyond the length of the sum: decoding (code·scale + min, norm·centroid / sqrt(d)),
// the per-block pre-scaling (q ⊙ scale, p · scale), the final scale and the float result.
constexpr size_t kExtraRoundings = 6;

const KvGeometry kGeometries[] = {{3, 64}, {1, 128}, {2, 32}, {4, 64}, {1, 48}, {2, 80}, {1, 96}};
// 45: 15 agents × 3 — the decoded-tile many-query kernels (2 × 4 register tiles, InRegister loads).
const size_t kNq[] = {1, 3, 4, 6, 45};

struct Block {
  std::vector<float> x;      // (32, H·d) input
  std::vector<uint8_t> bytes;
};

Block MakeBlock(KvFormat f, KvSide side, const KvGeometry& g, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Block b;
  b.x.resize(kBlockTokens * g.n_head_kv * g.head_dim);
  for (auto& v : b.x) v = nd(rng);
  for (size_t j = 0; j < kBlockTokens; ++j) b.x[j * g.n_head_kv * g.head_dim + 2] += 5;  // outlier channel
  float absmax = 0;
  for (float v : b.x) absmax = std::max(absmax, std::abs(v));
  b.bytes.resize(KvBlockBytes(f, side, g));
  EXPECT_TRUE(EncodeKvBlock(f, side, g, b.x.data(), b.bytes.data(), {.layer_absmax = absmax}).ok());
  return b;
}

// Per-element magnitude bound of every term the kernels form for element (j, c) of a head tile:
// |k̂| for row formats; for KIVI |scale·code| + |min| ≤ |k̂| + 2|min| ≤ 3·max |k̂| over the group.
std::vector<double> TermMagnitudes(KvFormat f, KvSide side, uint32_t d, const std::vector<float>& tile) {
  std::vector<double> m(tile.size());
  const bool kivi = f == KvFormat::kKivi2 || f == KvFormat::kKivi3 || f == KvFormat::kKivi4;
  for (size_t j = 0; j < kBlockTokens; ++j) {
    for (size_t c = 0; c < d; ++c) {
      double a = std::abs(tile[j * d + c]);
      if (kivi) {
        double g = 0;
        for (size_t i = 0; i < 32; ++i) {
          g = std::max<double>(g, std::abs(side == KvSide::kKey ? tile[i * d + c] : tile[j * d + (c / 32) * 32 + i]));
        }
        a = 3 * g;
      }
      m[j * d + c] = a;
    }
  }
  return m;
}

class KvKernelsTest : public ::testing::Test {
 protected:
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_F(KvKernelsTest, EveryFormatHasKernels) {
  for (KvFormat f : kAllKvFormats) {
    const KvBlockKernels k = GetKvBlockKernels(f);
    EXPECT_NE(k.score, nullptr) << KvFormatName(f);
    EXPECT_NE(k.accumulate, nullptr) << KvFormatName(f);
  }
}

TEST_F(KvKernelsTest, ScoreMatchesRef) {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string tname = hwy::TargetName(target);
    double worst = 0;  // max |err| / tol: how much of the derived bound is used
    for (const KvGeometry& g : kGeometries) {
      const uint32_t d = g.head_dim;
      for (KvFormat f : kAllKvFormats) {
        if (!CheckKvFormat(f, KvSide::kKey, g).ok()) continue;
        const KvScoreFn score = GetKvBlockKernels(f).score;
        const Block block = MakeBlock(f, KvSide::kKey, g, rng);
        for (size_t n_q : kNq) {
          const uint32_t h = static_cast<uint32_t>(n_q % g.n_head_kv);
          const size_t ld = n_q == 3 ? 40 : kBlockTokens;  // a strided score matrix once
          std::vector<float> q(n_q * d), s(n_q * ld, -7.0f), s_ref(n_q * ld, -7.0f);
          for (auto& v : q) v = nd(rng) / std::sqrt(float(d));
          score(g, block.bytes.data(), h, q.data(), n_q, s.data(), ld);
          ScoreKvBlockRef(f, g, block.bytes.data(), h, q.data(), n_q, s_ref.data(), ld);
          std::vector<float> tile(kBlockTokens * d);
          DecodeKvHeadRef(f, KvSide::kKey, g, block.bytes.data(), h, tile.data());
          const std::vector<double> mag = TermMagnitudes(f, KvSide::kKey, d, tile);
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t j = 0; j < ld; ++j) {
              if (j >= kBlockTokens) {
                ASSERT_EQ(s[i * ld + j], -7.0f) << "wrote outside the block's 32 columns";
                continue;
              }
              double abs_sum = 0;
              for (size_t c = 0; c < d; ++c) abs_sum += std::abs(q[i * d + c]) * mag[j * d + c];
              const double tol = Gamma(d + kExtraRoundings) * abs_sum + 1e-30;
              worst = std::max(worst, std::abs(double(s[i * ld + j]) - s_ref[i * ld + j]) / tol);
              ASSERT_NEAR(s[i * ld + j], s_ref[i * ld + j], tol)
                  << tname << " " << KvFormatName(f) << " " << g.n_head_kv << "x" << d << " n_q=" << n_q
                  << " i=" << i << " j=" << j;
            }
          }
        }
      }
    }
    std::printf("  score      %-8s max |err| / bound = %.3f\n", tname.c_str(), worst);
  }
}

TEST_F(KvKernelsTest, AccumulateMatchesRef) {
  std::mt19937 rng(43);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string tname = hwy::TargetName(target);
    double worst = 0;  // max |err| / tol
    for (const KvGeometry& g : kGeometries) {
      const uint32_t d = g.head_dim;
      for (KvFormat f : kAllKvFormats) {
        if (!CheckKvFormat(f, KvSide::kValue, g).ok()) continue;
        const KvAccumulateFn accumulate = GetKvBlockKernels(f).accumulate;
        const Block block = MakeBlock(f, KvSide::kValue, g, rng);
        for (size_t n_q : kNq) {
          const uint32_t h = static_cast<uint32_t>((n_q + 1) % g.n_head_kv);
          const size_t ld = n_q == 3 ? 37 : kBlockTokens;
          std::vector<float> p(n_q * ld), acc(n_q * d), acc_ref;
          for (auto& v : p) v = ud(rng) / 16;  // softmax-like weights
          for (auto& v : acc) v = nd(rng);     // a running accumulator from earlier blocks
          acc_ref = acc;
          const std::vector<float> acc0 = acc;
          accumulate(g, block.bytes.data(), h, p.data(), n_q, acc.data(), ld);
          AccumulateKvBlockRef(f, g, block.bytes.data(), h, p.data(), n_q, acc_ref.data(), ld);
          std::vector<float> tile(kBlockTokens * d);
          DecodeKvHeadRef(f, KvSide::kValue, g, block.bytes.data(), h, tile.data());
          const std::vector<double> mag = TermMagnitudes(f, KvSide::kValue, d, tile);
          for (size_t i = 0; i < n_q; ++i) {
            for (size_t c = 0; c < d; ++c) {
              double abs_sum = std::abs(acc0[i * d + c]);
              for (size_t j = 0; j < kBlockTokens; ++j) abs_sum += std::abs(p[i * ld + j]) * mag[j * d + c];
              const double tol = Gamma(kBlockTokens + kExtraRoundings) * abs_sum + 1e-30;
              worst = std::max(worst, std::abs(double(acc[i * d + c]) - acc_ref[i * d + c]) / tol);
              ASSERT_NEAR(acc[i * d + c], acc_ref[i * d + c], tol)
                  << tname << " " << KvFormatName(f) << " " << g.n_head_kv << "x" << d << " n_q=" << n_q
                  << " i=" << i << " c=" << c;
            }
          }
        }
      }
    }
    std::printf("  accumulate %-8s max |err| / bound = %.3f\n", tname.c_str(), worst);
  }
}

// The rotated-domain contract: scores of R·q equal q·k̂ in the original domain, and Rᵀ of the
// accumulator equals Σ p·v̂; the whole of one-head attention over several blocks of one format.
TEST_F(KvKernelsTest, AttentionOverBlocksMatchesDecodedDense) {
  std::mt19937 rng(44);
  std::normal_distribution<float> nd;
  const KvGeometry g{3, 64};
  const uint32_t d = g.head_dim, H = g.n_head_kv, kv_head = 1;
  const size_t n_blocks = 4, n_q = 3, n_ctx = n_blocks * kBlockTokens;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {  // every compiled target this CPU runs
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (KvFormat f : kAllKvFormats) {
      std::vector<Block> kb, vb;
      for (size_t b = 0; b < n_blocks; ++b) {
        kb.push_back(MakeBlock(f, KvSide::kKey, g, rng));
        vb.push_back(MakeBlock(f, KvSide::kValue, g, rng));
      }
      std::vector<float> q(n_q * d);
      for (auto& v : q) v = nd(rng) / std::sqrt(float(d));
      // Kernels: rotate q once, score every block, softmax, accumulate, rotate the output back once.
      const KvBlockKernels k = GetKvBlockKernels(f);
      std::vector<float> qk = q, scores(n_q * n_ctx), out(n_q * d, 0.0f);
      if (KvFormatIsRotated(f)) {
        for (size_t i = 0; i < n_q; ++i) HadamardRotate(&qk[i * d], d);
      }
      for (size_t b = 0; b < n_blocks; ++b) {
        k.score(g, kb[b].bytes.data(), kv_head, qk.data(), n_q, scores.data() + b * kBlockTokens, n_ctx);
      }
      for (size_t i = 0; i < n_q; ++i) {
        float* s = &scores[i * n_ctx];
        const float m = *std::max_element(s, s + n_ctx);
        float sum = 0;
        for (size_t j = 0; j < n_ctx; ++j) sum += (s[j] = std::exp(s[j] - m));
        for (size_t j = 0; j < n_ctx; ++j) s[j] /= sum;
      }
      for (size_t b = 0; b < n_blocks; ++b) {
        k.accumulate(g, vb[b].bytes.data(), kv_head, scores.data() + b * kBlockTokens, n_q, out.data(), n_ctx);
      }
      if (KvFormatIsRotated(f)) {
        for (size_t i = 0; i < n_q; ++i) HadamardRotateInverse(&out[i * d], d);
      }
      // Reference: dense attention in double on the decoded (original-domain) blocks.
      std::vector<float> kd(n_ctx * d), vd(n_ctx * d), tmp(kBlockTokens * H * d);
      for (size_t b = 0; b < n_blocks; ++b) {
        DecodeKvBlockRef(f, KvSide::kKey, g, kb[b].bytes.data(), tmp.data());
        for (size_t j = 0; j < kBlockTokens; ++j) std::copy_n(&tmp[j * H * d + kv_head * d], d, &kd[(b * kBlockTokens + j) * d]);
        DecodeKvBlockRef(f, KvSide::kValue, g, vb[b].bytes.data(), tmp.data());
        for (size_t j = 0; j < kBlockTokens; ++j) std::copy_n(&tmp[j * H * d + kv_head * d], d, &vd[(b * kBlockTokens + j) * d]);
      }
      DistortionStats stats;
      for (size_t i = 0; i < n_q; ++i) {
        std::vector<double> s(n_ctx);
        for (size_t j = 0; j < n_ctx; ++j) {
          for (size_t c = 0; c < d; ++c) s[j] += double(q[i * d + c]) * kd[j * d + c];
        }
        const double m = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - m));
        for (size_t c = 0; c < d; ++c) {
          double o = 0;
          for (size_t j = 0; j < n_ctx; ++j) o += s[j] / sum * vd[j * d + c];
          stats.Add(o, out[i * d + c]);
        }
      }
      // Only float rounding separates the two (f32 Hadamard and exp, |v| ≲ 6): a 1e-5 envelope.
      EXPECT_LT(stats.max_abs_err(), 1e-5 * (1 + stats.max_abs_ref())) << KvFormatName(f);
    }
  }
}

// Stacking queries (one GQA group of many agents in one pass) must not change any query's result:
// each query's scores and accumulated values are bit-identical to computing it alone, whatever
// path (decode-once tile or direct) the kernel takes for the stack. Agents batched together then
// produce exactly the tokens they produce alone.
TEST_F(KvKernelsTest, StackedQueriesGiveEachQueryItsOwnBits) {
  std::mt19937 rng(46);
  std::normal_distribution<float> nd;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (const KvGeometry& g : {KvGeometry{3, 64}, KvGeometry{1, 48}}) {
      const uint32_t d = g.head_dim;
      for (KvFormat f : kAllKvFormats) {
        const KvBlockKernels k = GetKvBlockKernels(f);
        for (size_t n_q : {size_t{5}, size_t{45}}) {
          std::vector<float> q(n_q * d), p(n_q * kBlockTokens), s(n_q * kBlockTokens), acc(n_q * d, 0.5f);
          for (auto& v : q) v = nd(rng);
          for (auto& v : p) v = std::abs(nd(rng));
          if (CheckKvFormat(f, KvSide::kKey, g).ok()) {
            const Block kb = MakeBlock(f, KvSide::kKey, g, rng);
            k.score(g, kb.bytes.data(), 0, q.data(), n_q, s.data(), kBlockTokens);
            for (size_t i = 0; i < n_q; ++i) {
              std::vector<float> one(kBlockTokens);
              k.score(g, kb.bytes.data(), 0, q.data() + i * d, 1, one.data(), kBlockTokens);
              for (size_t j = 0; j < kBlockTokens; ++j)
                ASSERT_EQ(one[j], s[i * kBlockTokens + j]) << hwy::TargetName(target) << " " << KvFormatName(f)
                                                            << " n_q=" << n_q << " i=" << i;
            }
          }
          if (CheckKvFormat(f, KvSide::kValue, g).ok()) {
            const Block vb = MakeBlock(f, KvSide::kValue, g, rng);
            k.accumulate(g, vb.bytes.data(), 0, p.data(), n_q, acc.data(), kBlockTokens);
            for (size_t i = 0; i < n_q; ++i) {
              std::vector<float> one(d, 0.5f);
              k.accumulate(g, vb.bytes.data(), 0, p.data() + i * kBlockTokens, 1, one.data(), kBlockTokens);
              for (size_t c = 0; c < d; ++c)
                ASSERT_EQ(one[c], acc[i * d + c]) << hwy::TargetName(target) << " " << KvFormatName(f)
                                                   << " n_q=" << n_q << " i=" << i;
            }
          }
        }
      }
    }
  }
}

// Every TQ code value decodes to its own centroid at every (channel, token) position, on both
// sides and every kernel path (n_q = 1 direct, 3 the GQA group, 8 the decoded tile): one-hot
// queries / weights make each output one decoded element, fl(fl(norm / sqrt(d)) · centroid), the
// very float DecodeKvHeadRef computes, so the check is exact. Catches a wrong table entry, index
// bit or chunk select in the SIMD lookup (e.g. AVX2's unmasked codes: a neighbouring code's bits
// left where the permute or the blend reads them), a lane of the wrong token, a wrong norm lane.
TEST_F(KvKernelsTest, EveryTqCodeDecodesToItsCentroidEverywhere) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (const KvGeometry& g : {KvGeometry{3, 64}, KvGeometry{1, 32}}) {  // 2 groups a row / 1; head offsets
      const uint32_t d = g.head_dim;
      for (KvFormat f : {KvFormat::kTq4, KvFormat::kTq3, KvFormat::kTq2}) {
        const uint32_t bits = kv_layout::TqBits(f);
        const KvBlockKernels k = GetKvBlockKernels(f);
        for (uint32_t shift = 0; shift < (1u << bits); ++shift) {  // every code at every position
          auto code = [&](size_t c, size_t j) { return static_cast<uint8_t>((c + 3 * j + shift) % (1u << bits)); };
          for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
            std::vector<uint8_t> bytes(KvBlockBytes(f, side, g));
            const size_t tile_bytes = kv_layout::TileBytes(f, d), row_bytes = kv_layout::TqRowBytes(bits, d);
            for (uint32_t h = 0; h < g.n_head_kv; ++h) {
              uint8_t* tile = bytes.data() + h * tile_bytes;
              for (size_t j = 0; j < kBlockTokens; ++j) {  // norms 1 + j/32 + h: exact in fp16, a lane per token
                const uint16_t n16 = F32ToF16(1.0f + j / 32.0f + h);
                std::memcpy(side == KvSide::kKey ? tile + 2 * j : tile + j * row_bytes, &n16, 2);
              }
              uint8_t group[kBlockTokens];
              if (side == KvSide::kKey) {  // channel c: the 32 tokens' codes
                for (size_t c = 0; c < d; ++c) {
                  for (size_t j = 0; j < kBlockTokens; ++j) group[j] = code(c, j);
                  kv_layout::PackGroup(bits, group, tile + kv_layout::KeyColumnsOffset(f) + c * kv_layout::PackedGroupBytes(bits));
                }
              } else {  // token j: 32 channels per group
                for (size_t j = 0; j < kBlockTokens; ++j) {
                  for (size_t c0 = 0; c0 < d; c0 += 32) {
                    for (size_t i = 0; i < 32; ++i) group[i] = code(c0 + i, j);
                    kv_layout::PackGroup(bits, group, tile + j * row_bytes + 2 + c0 / 32 * kv_layout::PackedGroupBytes(bits));
                  }
                }
              }
            }
            for (uint32_t h = 0; h < g.n_head_kv; h += std::max(1u, g.n_head_kv - 1)) {  // first and last head
              std::vector<float> tile(kBlockTokens * d);
              DecodeKvHeadRef(f, side, g, bytes.data(), h, tile.data());
              for (size_t j = 0; j < kBlockTokens; ++j) {
                for (size_t c = 0; c < d; ++c) {  // the reference really holds the codes written
                  const float w = F16ToF32(F32ToF16(1.0f + j / 32.0f + h)) * (1.0f / std::sqrt(float(d)));
                  ASSERT_EQ(tile[j * d + c], w * kv_layout::Codebook(bits).centroid[code(c, j)]);
                }
              }
              for (size_t n_q : {size_t{1}, size_t{3}, size_t{8}}) {
                const size_t n_one_hot = side == KvSide::kKey ? d : kBlockTokens;  // channels or tokens
                for (size_t e0 = 0; e0 < n_one_hot; e0 += n_q) {
                  const size_t n = std::min(n_q, n_one_hot - e0);
                  std::vector<float> x(n * (side == KvSide::kKey ? d : kBlockTokens), 0.0f), out(n * std::max<size_t>(d, kBlockTokens), 0.0f);
                  const size_t ldx = side == KvSide::kKey ? d : kBlockTokens;
                  for (size_t i = 0; i < n; ++i) x[i * ldx + e0 + i] = 1.0f;
                  if (side == KvSide::kKey) k.score(g, bytes.data(), h, x.data(), n, out.data(), kBlockTokens);
                  else k.accumulate(g, bytes.data(), h, x.data(), n, out.data(), kBlockTokens);
                  for (size_t i = 0; i < n; ++i) {
                    const size_t e = e0 + i;  // query i picks channel e (keys) or token e (values)
                    for (size_t o = 0; o < (side == KvSide::kKey ? kBlockTokens : d); ++o) {
                      const float want = side == KvSide::kKey ? tile[o * d + e] : tile[e * d + o];
                      const float got = out[i * (side == KvSide::kKey ? kBlockTokens : d) + o];
                      ASSERT_EQ(got, want) << hwy::TargetName(target) << " " << KvFormatName(f) << " "
                                           << (side == KvSide::kKey ? "key" : "value") << " " << g.n_head_kv << "x" << d
                                           << " head " << h << " n_q=" << n << " shift " << shift << " e=" << e
                                           << " o=" << o;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

// Any byte pattern is memory-safe to read (code indices are masked, no data-dependent addressing);
// under ASan this checks every load stays inside the block side.
TEST_F(KvKernelsTest, ArbitraryBytesStayInBounds) {
  std::mt19937 rng(45);
  const KvGeometry g{2, 64};
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (KvFormat f : kAllKvFormats) {
      for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
        std::vector<uint8_t> bytes(KvBlockBytes(f, side, g));
        for (auto& b : bytes) b = static_cast<uint8_t>(rng());
        std::vector<float> q(6 * 64, 0.01f), s(6 * 32), acc(6 * 64, 0.0f), tile(32 * 64);
        const KvBlockKernels k = GetKvBlockKernels(f);
        for (uint32_t h = 0; h < g.n_head_kv; ++h) {
          if (side == KvSide::kKey) k.score(g, bytes.data(), h, q.data(), 6, s.data(), 32);
          if (side == KvSide::kValue) k.accumulate(g, bytes.data(), h, s.data(), 6, acc.data(), 32);
          DecodeKvHeadRef(f, side, g, bytes.data(), h, tile.data());
        }
      }
    }
  }
}

}  // namespace
}  // namespace chorus
