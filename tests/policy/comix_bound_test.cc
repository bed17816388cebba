// CoMix bound on real activations: run SmolLM2-135M over a WikiText-2 article committed with the
// repository (examples/du_fu.txt, so the test needs nothing outside the clone), capture the queries,
// keys and values of several layers through the policy's Observe hook, quantize the keys/values of
// the first 512 tokens block by block with every 2/3/4-bit format, and compare the exact attention
// output error of the next 64 queries with the bound of policy/comix_bound.h computed from native
// statistics only. KIVI's bound is a hard bound: it must hold for every (query, head). TQ's is an
// estimate (κ·√MSE): reported, and required to hold for most cases.
#include "policy/comix_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "kv/kv_store.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/fp16.h"

namespace chorus {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kText = "examples/du_fu.txt";  // relative to the source dir (the test's working dir)
constexpr size_t kCtx = 512, kQueries = 64;

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
      if (fam == ComixFamily::kKivi) {
        EXPECT_EQ(held, cases) << KvFormatName(fmt) << ": the hard bound failed (max measured/bound " << worst << ")";
      } else {
        EXPECT_GE(double(held) / cases, 0.95) << KvFormatName(fmt) << ": the TQ estimate is too optimistic";
      }
    }
  }
}

}  // namespace
}  // namespace chorus
