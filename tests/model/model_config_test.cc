// Model loading on synthetic GGUFs: the switches each architecture gets (RoPE style and scaling,
// biases, tied output, gemma3's norms / GeGLU / sliding windows), and refusal — with a message
// naming the missing feature or tensor — of what chorus does not implement (issue 12 item 8).
#include "model/model.h"

#include <unistd.h>  // getpid
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>  // setenv
#include <cstring>  // memcmp
#include <functional>
#include <string>

#include "gguf/gguf.h"
#include "model/forward.h"
#include "ops/dequant.h"  // DequantizeRow
#include "util/thread_pool.h"
#include "synthetic_model.h"

namespace chorus {
namespace {

using testing::SyntheticSpec;

SyntheticSpec Small(std::string arch = "llama") {
  return {.name = "small", .arch = std::move(arch), .n_layer = 2, .n_embd = 64, .n_head = 2, .n_head_kv = 1,
          .head_dim = 32, .n_ff = 64, .n_vocab = 300, .matrix_type = GgmlType::kF32};
}

// Writes the spec (changed by `edit` first) to a temp file and loads it.
Result<std::unique_ptr<Model>> LoadEdited(const SyntheticSpec& s, const std::function<void(GgufWriter&)>& edit = {},
                                          const ModelLoadOptions& options = {}) {
  GgufWriter w = testing::SyntheticModel(s);
  if (edit) edit(w);
  // ctest runs this binary's tests as parallel processes: the name must be unique to this process and call.
  static int calls = 0;
  const std::string path = std::string(::testing::TempDir()) + "/model_config_test_" + s.name + "." +
                           std::to_string(getpid()) + "." + std::to_string(calls++) + ".gguf";
  EXPECT_TRUE(w.WriteFile(path).ok());
  auto m = Model::Load(path, options);
  std::remove(path.c_str());
  return m;
}

void ExpectRefused(const Result<std::unique_ptr<Model>>& m, const std::string& needle) {
  ASSERT_FALSE(m.ok()) << "accepted a model it should refuse (" << needle << ")";
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
}

TEST(ModelConfig, LlamaDefaultsAndScaling) {
  auto m = LoadEdited(Small());
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.rope_style, RopeStyle::kNormal);
  EXPECT_EQ(c.ffn_act, FfnActivation::kSilu);
  EXPECT_FALSE(c.qk_norm || c.post_norms);
  EXPECT_TRUE(c.layer_window.empty());
  EXPECT_FLOAT_EQ(c.query_scale(), 1.0f / std::sqrt(32.0f));
  EXPECT_EQ((*m)->weights().rope_freqs, nullptr);

  SyntheticSpec lin = Small();
  lin.rope_linear = 4.0f;
  lin.llama3_rope = true;
  auto m2 = LoadEdited(lin);
  ASSERT_TRUE(m2.ok()) << m2.status().message();
  EXPECT_FLOAT_EQ((*m2)->config().rope_freq_scale, 0.25f);
  ASSERT_NE((*m2)->weights().rope_freqs, nullptr);
  EXPECT_FLOAT_EQ((*m2)->weights().rope_freqs[0], 1.0f);  // the highest frequency is not scaled
  EXPECT_FLOAT_EQ((*m2)->weights().rope_freqs[15], 8.0f);  // the lowest by the full factor
}

TEST(ModelConfig, Qwen2BiasesNeoxTied) {
  SyntheticSpec s = Small("qwen2");
  s.qkv_bias = true;
  s.tied = true;
  auto m = LoadEdited(s);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->config().rope_style, RopeStyle::kNeox);
  EXPECT_TRUE((*m)->weights().tied_output);
  for (const LayerWeights& L : (*m)->weights().layers) {
    EXPECT_NE(L.bq, nullptr);
    EXPECT_NE(L.bk, nullptr);
    EXPECT_NE(L.bv, nullptr);
    EXPECT_EQ(L.bo, nullptr);
  }
}

TEST(ModelConfig, Gemma3Switches) {
  SyntheticSpec s = Small("gemma3");
  s.n_layer = 7;
  s.sliding_window = 96;
  s.tied = true;
  auto m = LoadEdited(s);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c.ffn_act, FfnActivation::kGeluTanh);
  EXPECT_TRUE(c.qk_norm && c.post_norms);
  EXPECT_FLOAT_EQ(c.embd_scale, 8.0f);  // sqrt(64)
  EXPECT_FLOAT_EQ(c.rope_base_local, 10000.0f);
  // llama.cpp's pattern 6: layers 5, 11, ... global.
  EXPECT_EQ(c.layer_window, (std::vector<uint32_t>{96, 96, 96, 96, 96, 0, 96}));
  // The forward and its KV store run with the windows: a prompt longer than the window works.
  ForwardPass fwd(**m);
  KvStoreOptions so = fwd.StoreOptions();
  EXPECT_EQ(so.layer_window, c.layer_window);
  DenseKvCache kv = fwd.MakeCache(200);
  ThreadPool pool(2);
  std::vector<int32_t> tokens(150);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(3 + (i * 37) % 290);
  std::vector<float> logits(c.n_vocab);
  ASSERT_TRUE(fwd.Run(tokens, kv, pool, LogitsFor::kLast, logits.data()).ok());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

TEST(ModelConfig, RefusesWhatIsNotImplemented) {
  ExpectRefused(LoadEdited(Small("gemma2")), "unsupported architecture 'gemma2'");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetScalar<uint32_t>("llama.expert_count", 8); }),
                "mixture of experts");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetString("llama.rope.scaling.type", "yarn"); }),
                "RoPE scaling type 'yarn' is not implemented");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetString("llama.rope.scaling.type", "longrope"); }),
                "'longrope'");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetScalar<float>("llama.attn_logit_softcapping", 50.0f); }),
                "attention logit soft-capping");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetScalar<float>("llama.final_logit_softcapping", 30.0f); }),
                "final logit soft-capping");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetScalar<uint32_t>("llama.attention.value_length", 16); }),
                "value_length 16 != key_length 32");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetScalar<uint32_t>("llama.attention.sliding_window", 64); }),
                "sliding-window attention on architecture 'llama'");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) { w.SetScalar<bool>("llama.attention.causal", false); }),
                "non-causal attention");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) {
                  w.AddTensor("blk.0.ffn_up.bias", GgmlType::kF32, {64}, std::vector<uint8_t>(256));
                }),
                "unexpected tensor 'blk.0.ffn_up.bias'");
  ExpectRefused(LoadEdited(Small(), [](GgufWriter& w) {
                  w.AddTensor("blk.1.attn_qkv.weight", GgmlType::kF32, {64, 128}, std::vector<uint8_t>(64 * 128 * 4));
                }),
                "unexpected tensor 'blk.1.attn_qkv.weight'");
  SyntheticSpec missing = Small();
  missing.omit = "blk.1.ffn_down.weight";
  ExpectRefused(LoadEdited(missing), "missing tensor 'blk.1.ffn_down.weight'");
  SyntheticSpec mis = Small();
  mis.misshape = "blk.0.attn_k.weight";
  ExpectRefused(LoadEdited(mis), "tensor 'blk.0.attn_k.weight' has shape [64, 33], expected [64, 32]");
  SyntheticSpec bias = Small();
  bias.qkv_bias = true;
  bias.n_head = 2;
  ExpectRefused(LoadEdited(bias, [](GgufWriter& w) {
                  w.AddTensor("blk.0.attn_output.bias", GgmlType::kF32, {10}, std::vector<uint8_t>(40));
                }),
                "tensor 'blk.0.attn_output.bias' has shape [10], expected [64]");
  ExpectRefused(LoadEdited(Small("qwen2"), [](GgufWriter& w) {
                  w.AddTensor("rope_freqs.weight", GgmlType::kF32, {16}, std::vector<uint8_t>(64));
                }),
                "RoPE frequency factors (rope_freqs.weight) on architecture 'qwen2'");
}

TEST(ModelConfig, RepackSwitchOtherThanZeroOrOneIsAnErrorNamingIt) {
  ::setenv("CHORUS_REPACK", "off", 1);
  auto bad = LoadEdited(Small());
  ::setenv("CHORUS_REPACK", "0", 1);
  auto off = LoadEdited(Small());
  ::unsetenv("CHORUS_REPACK");
  ExpectRefused(bad, "CHORUS_REPACK must be 0");
  ExpectRefused(bad, "'off'");
  ASSERT_TRUE(off.ok()) << off.status().message();
}

// f32_weights: every matrix becomes an F32 copy of its dequantized rows, and a product then takes its
// activations in f32 — MatMulRef's result, not the int8-rounded one the quantized view gives.
TEST(ModelConfig, F32WeightsDequantizeEveryMatrixAndSkipActivationRounding) {
  SyntheticSpec s = Small();
  s.matrix_type = GgmlType::kQ8_0;
  s.n_embd = 128;
  s.n_ff = 128;
  auto q = LoadEdited(s);
  auto f = LoadEdited(s, {}, {.f32_weights = true});
  ASSERT_TRUE(q.ok() && f.ok());
  auto views = [](const ModelWeights& w) {
    std::vector<const WeightView*> v;
    for (const LayerWeights& L : w.layers)
      for (const WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) v.push_back(m);
    v.push_back(&w.output);
    return v;
  };
  const auto qv = views((*q)->weights()), fv = views((*f)->weights());
  ASSERT_EQ(qv.size(), fv.size());
  EXPECT_EQ((*f)->weights().token_embd.type, GgmlType::kQ8_0);  // the lookup is not a product: left as it is
  testing::SplitMix rng(7);
  ThreadPool pool(1);
  double worst_f32 = 0, worst_int8 = 0;
  for (size_t i = 0; i < qv.size(); ++i) {
    const WeightView &a = *qv[i], &b = *fv[i];
    ASSERT_EQ(a.type, GgmlType::kQ8_0) << i;
    ASSERT_EQ(b.type, GgmlType::kF32) << i;
    ASSERT_EQ(b.rows, a.rows);
    ASSERT_EQ(b.cols, a.cols);
    std::vector<float> row(a.cols);
    for (size_t r = 0; r < a.rows; ++r) {
      DequantizeRow(a.type, a.data + r * a.row_bytes, row.data(), a.cols);
      ASSERT_EQ(std::memcmp(row.data(), b.data + r * b.row_bytes, a.cols * sizeof(float)), 0) << i << " row " << r;
    }
    std::vector<float> x(2 * a.cols), ref(2 * a.rows), yf(2 * a.rows), yq(2 * a.rows);
    for (float& v : x) v = rng.Uniform();
    MatMulRef(a, x.data(), 2, ref.data());
    MatMul(b, x.data(), 2, yf.data(), pool);
    MatMul(a, x.data(), 2, yq.data(), pool);
    for (size_t j = 0; j < ref.size(); ++j) {
      worst_f32 = std::max(worst_f32, double(std::fabs(yf[j] - ref[j])));
      worst_int8 = std::max(worst_int8, double(std::fabs(yq[j] - ref[j])));
    }
  }
  EXPECT_LT(worst_f32, 1e-4);     // f32 sums in another order
  EXPECT_GT(worst_int8, 10 * worst_f32);  // the int8 rounding of x, which f32 weights do not have
}

}  // namespace
}  // namespace chorus
