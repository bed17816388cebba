// CoMix bound on real activations: run SmolLM2-135M over a WikiText-2 article committed with the
// repository (examples/du_fu.txt, so the test needs nothing outside the clone), capture the queries,
// keys and values of several layers through the policy's Observe hook, quantize the keys/values of
// the first 512 tokens block by block with every 2/3/4-bit format, and compare the exact attention
// output error of the next 64 queries with the bound of policy/comix_bound.h computed from native
// statistics only. KIVI's bound is a hard bound: it must hold for every (query, head). TQ's is an
// estimate (κ·√MSE): reported, and required to hold for most cases. Both have a tightness ceiling,
// and the allocation's sensitivity must rank items as the measured error does.
#include "policy/comix_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "kv/kv_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/fp16.h"

namespace chorus {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kText = "examples/du_fu.txt";  // relative to the source dir (the test's working dir)
constexpr size_t kCtx = 512, kQueries = 64;
// Ranking and tightness limits, from what the tests measure on this text (SmolLM2-135M, du_fu.txt):
// the allocation's sensitivity ranks the 90 (layer, head, bits, side) items with Spearman ρ 0.786
// (KIVI) and 0.819 (TQ) against the measured one-side error, ≥ 0.779 within each (side, bits)
// group of 15; its median is 43× (KIVI) / 33× (TQ) the measured error, spread 5–340× (keys and
// values are not on one scale: issue 19's work). Limits: ρ ≥ 0.7 pooled, ≥ 0.65 within a group,
// median ≤ 100×. The hard bound is 120–440× (median per format below): a ceiling 25 % above each,
// so a looser bound fails.
constexpr double kMinRankCorrelation = 0.7, kMinRankCorrelationWithin = 0.65, kMaxExpectedOverMeasured = 100;
constexpr double kMaxBoundOverMeasured[2][3] = {{160, 330, 550},   // kivi2, kivi3, kivi4 (measured 127, 261, 440)
                                                {150, 250, 440}};  // tq2, tq3, tq4 (measured 120, 201, 350)

// f16 everywhere; records q/k/v of every layer (test-only capture through the Observe hook).
class CapturePolicy : public PrecisionPolicy {
 public:
  BlockFormats FormatFor(const BlockInfo&) override { return BlockFormats{}; }
  void Observe(const Observation& o) override {
    auto& c = layers[o.layer];
    c.q.insert(c.q.end(), o.q, o.q + o.n * o.q_dim);
    c.k.insert(c.k.end(), o.k, o.k + o.n * o.kv_dim);
    c.v.insert(c.v.end(), o.v, o.v + o.n * o.kv_dim);
  }
  struct Layer {
    std::vector<float> q, k, v;
  };
  std::map<size_t, Layer> layers;
};

// Attention output of query q (d) over rows [0, n) of k/v (row stride `stride`).
void Attend(const float* q, const float* k, const float* v, size_t n, size_t stride, size_t d, float* out) {
  std::vector<double> s(n);
  double mx = -1e300;
  for (size_t j = 0; j < n; ++j) {
    double dot = 0;
    for (size_t c = 0; c < d; ++c) dot += double(q[c]) * k[j * stride + c];
    s[j] = dot;
    mx = std::max(mx, dot);
  }
  double z = 0;
  for (double& x : s) z += (x = std::exp(x - mx));
  for (size_t c = 0; c < d; ++c) {
    double o = 0;
    for (size_t j = 0; j < n; ++j) o += s[j] * v[j * stride + c];
    out[c] = float(o / z);
  }
}

TEST(ComixBound, HoldsOnRealActivations) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config();
  std::ifstream f(kText);
  ASSERT_TRUE(f.good()) << kText;
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> tokens = (*model)->tokenizer().Encode(ss.str().substr(0, 20000), true, false);
  ASSERT_GE(tokens.size(), kCtx + kQueries);
  tokens.resize(kCtx + kQueries);

  CapturePolicy cap;
  ForwardPass fwd(**model, 576);
  KvStore store(fwd.StoreOptions(), &cap);
  auto seq = store.NewSequence(tokens.size());
  ThreadPool pool(2);
  std::vector<float> logits(c.n_vocab);
  ASSERT_TRUE(fwd.Run(tokens, *seq, pool, LogitsFor::kLast, logits.data()).ok());

  const size_t d = c.head_dim, hkv = c.n_head_kv, kv_dim = c.kv_dim(), q_dim = c.n_head * d;
  const size_t group = c.n_head / hkv;
  const KvGeometry g{uint32_t(hkv), uint32_t(d)};
  const size_t N = kCtx + kQueries;
  for (ComixFamily fam : {ComixFamily::kKivi, ComixFamily::kTq}) {
    for (int bits : {2, 3, 4}) {
      const KvFormat fmt = ComixFormat(fam, bits);
      size_t cases = 0, held = 0;
      std::vector<double> ratio;  // bound / measured
      double worst = 0;           // max measured / bound
      for (size_t layer : {size_t(0), size_t(7), size_t(15), size_t(23), c.n_layer - 1}) {
        const CapturePolicy::Layer& L = cap.layers.at(layer);
        // Native rows as the store keeps them (fp16), and their quantized twins for [0, kCtx).
        std::vector<float> k(N * kv_dim), v(N * kv_dim), kq, vq;
        for (size_t i = 0; i < k.size(); ++i) k[i] = F16ToF32(F32ToF16(L.k[i])), v[i] = F16ToF32(F32ToF16(L.v[i]));
        kq = k, vq = v;
        std::vector<uint8_t> buf(std::max(KvBlockBytes(fmt, KvSide::kKey, g), KvBlockBytes(fmt, KvSide::kValue, g)));
        for (size_t b = 0; b < kCtx / 32; ++b) {
          const size_t off = b * 32 * kv_dim;
          ASSERT_TRUE(EncodeKvBlock(fmt, KvSide::kKey, g, k.data() + off, buf.data()).ok());
          DecodeKvBlockRef(fmt, KvSide::kKey, g, buf.data(), kq.data() + off);
          ASSERT_TRUE(EncodeKvBlock(fmt, KvSide::kValue, g, v.data() + off, buf.data()).ok());
          DecodeKvBlockRef(fmt, KvSide::kValue, g, buf.data(), vq.data() + off);
        }
        for (size_t h = 0; h < hkv; ++h) {
          // Row statistics: every attended row (the quantized ones set the error, all set the radius).
          HeadStats rows(d);
          for (size_t j = 0; j < N; ++j) rows.AddKeyValueRow(k.data() + j * kv_dim + h * d, v.data() + j * kv_dim + h * d);
          std::vector<float> o(d), oq(d);
          for (size_t t = kCtx; t < N; ++t) {
            for (size_t gi = 0; gi < group; ++gi) {
              const float* q = L.q.data() + t * q_dim + (h * group + gi) * d;
              HeadStats s = rows;
              s.AddQuery(q);
              const double bound = BoundHead(s, fam, bits, bits).total;
              Attend(q, k.data() + h * d, v.data() + h * d, t + 1, kv_dim, d, o.data());
              Attend(q, kq.data() + h * d, vq.data() + h * d, t + 1, kv_dim, d, oq.data());
              double err = 0;
              for (size_t i = 0; i < d; ++i) err += double(o[i] - oq[i]) * (o[i] - oq[i]);
              err = std::sqrt(err);
              ++cases;
              held += err <= bound;
              worst = std::max(worst, err / bound);
              if (err > 0) ratio.push_back(bound / err);
            }
          }
        }
      }
      std::sort(ratio.begin(), ratio.end());
      std::printf("%-6s %zu cases: bound held in %.2f %%, bound/measured median %.1f (p10 %.1f, min %.2f), "
                  "max measured/bound %.3f\n",
                  std::string(KvFormatName(fmt)).c_str(), cases, 100.0 * held / cases, ratio[ratio.size() / 2],
                  ratio[ratio.size() / 10], ratio.front(), worst);
      EXPECT_LE(ratio[ratio.size() / 2], kMaxBoundOverMeasured[fam == ComixFamily::kTq][bits - 2])
          << KvFormatName(fmt) << ": the bound got looser (median bound/measured)";
      if (fam == ComixFamily::kKivi) {
        EXPECT_EQ(held, cases) << KvFormatName(fmt) << ": the hard bound failed (max measured/bound " << worst << ")";
      } else {
        EXPECT_GE(double(held) / cases, 0.95) << KvFormatName(fmt) << ": the TQ estimate is too optimistic";
      }
    }
  }
}

double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const auto ranks = [](const std::vector<double>& x) {
    std::vector<size_t> idx(x.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t i, size_t j) { return x[i] < x[j]; });
    std::vector<double> r(x.size());
    for (size_t i = 0; i < idx.size(); ++i) r[idx[i]] = double(i);
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = double(a.size()), mean = (n - 1) / 2;
  double num = 0, da = 0, db = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (ra[i] - mean) * (rb[i] - mean);
    da += (ra[i] - mean) * (ra[i] - mean);
    db += (rb[i] - mean) * (rb[i] - mean);
  }
  return num / std::sqrt(da * db);
}

// What the allocation ranks by — SideExpected of one side, keys or values, from native statistics —
// against the measured attention-output error with only that side quantized, per (layer, KV head,
// bits, side) item of the same activations. The knapsack trades key bits against value bits, so
// the items of both sides are ranked together, and within each (side, bits) group. Catches a
// sensitivity whose ranking does not follow the error (the knapsack then buys bits where they
// help least) and one that drifts away from the error's scale.
TEST(ComixBound, AllocationSensitivityRanksLikeTheMeasuredError) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config();
  std::ifstream f(kText);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> tokens = (*model)->tokenizer().Encode(ss.str().substr(0, 20000), true, false);
  tokens.resize(kCtx + kQueries);
  CapturePolicy cap;
  ForwardPass fwd(**model, 576);
  KvStore store(fwd.StoreOptions(), &cap);
  auto seq = store.NewSequence(tokens.size());
  ThreadPool pool(2);
  std::vector<float> logits(c.n_vocab);
  ASSERT_TRUE(fwd.Run(tokens, *seq, pool, LogitsFor::kLast, logits.data()).ok());
  const size_t d = c.head_dim, hkv = c.n_head_kv, kv_dim = c.kv_dim(), q_dim = c.n_head * d, group = c.n_head / hkv;
  const KvGeometry g{uint32_t(hkv), uint32_t(d)};
  const size_t N = kCtx + kQueries;
  for (ComixFamily fam : {ComixFamily::kKivi, ComixFamily::kTq}) {
    std::vector<double> measured, expected, calibrated;
    std::map<std::pair<int, int>, std::pair<std::vector<double>, std::vector<double>>> groups;  // (side, bits)
    for (int bits : {2, 3, 4, 8}) {  // q8 (8) only for the calibration table, not in the ranking limits
      const KvFormat fmt = ComixFormat(fam, bits);
      for (size_t layer : {size_t(0), size_t(7), size_t(15), size_t(23), c.n_layer - 1}) {
        const CapturePolicy::Layer& L = cap.layers.at(layer);
        std::vector<float> k(N * kv_dim), v(N * kv_dim);
        for (size_t i = 0; i < k.size(); ++i) k[i] = F16ToF32(F32ToF16(L.k[i])), v[i] = F16ToF32(F32ToF16(L.v[i]));
        std::vector<float> kq = k, vq = v;
        std::vector<uint8_t> buf(std::max(KvBlockBytes(fmt, KvSide::kKey, g), KvBlockBytes(fmt, KvSide::kValue, g)));
        for (size_t b = 0; b < kCtx / 32; ++b) {
          const size_t off = b * 32 * kv_dim;
          ASSERT_TRUE(EncodeKvBlock(fmt, KvSide::kKey, g, k.data() + off, buf.data()).ok());
          DecodeKvBlockRef(fmt, KvSide::kKey, g, buf.data(), kq.data() + off);
          ASSERT_TRUE(EncodeKvBlock(fmt, KvSide::kValue, g, v.data() + off, buf.data()).ok());
          DecodeKvBlockRef(fmt, KvSide::kValue, g, buf.data(), vq.data() + off);
        }
        for (size_t h = 0; h < hkv; ++h) {
          HeadStats s(d);
          for (size_t j = 0; j < N; ++j) s.AddKeyValueRow(k.data() + j * kv_dim + h * d, v.data() + j * kv_dim + h * d);
          double err[2] = {0, 0};  // keys only quantized, values only quantized
          std::vector<float> o(d), oq(d);
          for (size_t t = kCtx; t < N; ++t)
            for (size_t gi = 0; gi < group; ++gi) {
              const float* q = L.q.data() + t * q_dim + (h * group + gi) * d;
              s.AddQuery(q);
              Attend(q, k.data() + h * d, v.data() + h * d, t + 1, kv_dim, d, o.data());
              for (int side = 0; side < 2; ++side) {
                Attend(q, (side == 0 ? kq : k).data() + h * d, (side == 1 ? vq : v).data() + h * d, t + 1, kv_dim, d,
                       oq.data());
                double e = 0;
                for (size_t i = 0; i < d; ++i) e += double(o[i] - oq[i]) * (o[i] - oq[i]);
                err[side] += std::sqrt(e);
              }
            }
          for (int side = 0; side < 2; ++side) {
            const double m = err[side] / double(kQueries * group);
            const KvSide sd = side == 0 ? KvSide::kKey : KvSide::kValue;
            const double e = SideExpected(s, fam, sd, bits);
            groups[{side, bits}].first.push_back(e);
            groups[{side, bits}].second.push_back(m);
            if (bits == 8) continue;
            measured.push_back(m);
            expected.push_back(e);
            calibrated.push_back(e * ComixCalibration(fam, sd, bits));
          }
        }
      }
    }
    std::vector<double> ratio;
    for (size_t i = 0; i < measured.size(); ++i) ratio.push_back(expected[i] / measured[i]);
    std::sort(ratio.begin(), ratio.end());
    const double rho = Spearman(expected, measured);
    double rho_within = 1;
    for (const auto& [key, em] : groups)
      if (key.second != 8) rho_within = std::min(rho_within, Spearman(em.first, em.second));
    // Calibration (issue 19): median measured/expected per (side, bits), printed as the table of
    // ComixCalibration; the stored table must stay within 2× of what this text measures (a stale
    // table, or a change of SideExpected's scale, fails), and the calibrated sensitivity must rank
    // the pooled items at least as well as the raw one (its point: K and V, 2/3/4 bits on one scale).
    std::string table;
    for (int side = 0; side < 2; ++side) {
      table += side == 0 ? "K {" : "V {";
      for (int bits : {2, 3, 4, 8}) {
        const auto& [e, m] = groups.at({side, bits});
        std::vector<double> r;
        for (size_t i = 0; i < e.size(); ++i) r.push_back(m[i] / e[i]);
        std::sort(r.begin(), r.end());
        const double med = r[r.size() / 2];
        table += fmt::format("{}{:.4g}", bits == 2 ? "" : ", ", med);
        const double stored = ComixCalibration(fam, side == 0 ? KvSide::kKey : KvSide::kValue, bits);
        EXPECT_LE(stored / med, 2.0) << "side " << side << " bits " << bits;
        EXPECT_GE(stored / med, 0.5) << "side " << side << " bits " << bits;
      }
      table += side == 0 ? "}, " : "}";
    }
    const double rho_cal = Spearman(calibrated, measured);
    std::printf("%s calibration (measured / expected, median; bits 2, 3, 4, 8): %s; pooled Spearman raw %.3f, "
                "calibrated %.3f\n",
                fam == ComixFamily::kKivi ? "kivi" : "tq", table.c_str(), rho, rho_cal);
    EXPECT_GE(rho_cal, rho - 1e-9);
    std::printf("%s: %zu items (keys and values), Spearman(sensitivity, measured) %.3f, worst within one (side, "
                "bits) group of 15 %.3f; sensitivity/measured median %.2f [%.2f, %.2f]\n",
                fam == ComixFamily::kKivi ? "kivi" : "tq", measured.size(), rho, rho_within, ratio[ratio.size() / 2],
                ratio.front(), ratio.back());
    EXPECT_GE(rho, kMinRankCorrelation);
    EXPECT_GE(rho_within, kMinRankCorrelationWithin);
    EXPECT_LE(ratio[ratio.size() / 2], kMaxExpectedOverMeasured);
    EXPECT_GE(ratio[ratio.size() / 2], 1.0 / kMaxExpectedOverMeasured);
  }
}

}  // namespace
}  // namespace chorus
