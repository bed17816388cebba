// The roofline arithmetic (eval/roofline.h) on a synthetic model and given machine limits: a decode
// step reads every weight once plus its KV and does 4·n_layer·n_head·head_dim·depth attention ops;
// a prefill runs the output matmul once; the roof is the lower of the memory and compute roofs;
// one real probe of one thread reports itself in the eval schema. Catches: KV bytes not scaled by
// depth, the output matmul counted per prompt token, the wrong roof picked.
#include "eval/roofline.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

TEST(Roofline, StepCostsAndTheLowerRoof) {
  const std::string dir = TinyModelDir("roofline");  // holds tiny.gguf
  auto model = Model::Load(dir + "/tiny.gguf");
  ASSERT_TRUE(model.ok()) << model.status().message();
  const StepCost w = WeightCost(**model);
  EXPECT_GT(w.bytes, 0);
  // Matmul ops: 2 per weight of q, k, v, o, gate, up, down per layer, and the output matrix.
  const double per_layer = 64.0 * 64 * 2 + 2 * (64.0 * 32) + 3 * (64.0 * 128);
  EXPECT_DOUBLE_EQ(w.ops, 2 * (2 * per_layer + 300.0 * 64));
  const StepCost d = DecodeStepCost(**model, 100, 10.0);
  EXPECT_DOUBLE_EQ(d.bytes, w.bytes + 1000.0);
  EXPECT_DOUBLE_EQ(d.attn_ops, 4.0 * 2 * 2 * 32 * 100);
  const StepCost p = PrefillCost(**model, 8);
  EXPECT_DOUBLE_EQ(p.ops, 2 * 2 * per_layer * 8 + 2 * 300.0 * 64 + p.attn_ops);

  MachineLimits m{.threads = 1, .read_bytes_per_s = 1e9, .f32_flops_per_s = 1e10, .int8_ops_per_s = 2e10};
  const Roof r = RoofFor(d, 1, m);
  EXPECT_DOUBLE_EQ(r.memory_tok_s, 1e9 / d.bytes);
  EXPECT_DOUBLE_EQ(r.tok_s, std::min(r.memory_tok_s, r.compute_tok_s));
  EXPECT_STREQ(r.bound, r.memory_tok_s <= r.compute_tok_s ? "memory" : "compute");
  EXPECT_STREQ(Int8PeakName(m), "int8");
  std::filesystem::remove_all(dir);
}

TEST(Roofline, ProbeReportsInTheEvalSchema) {
  const MachineReport r = ProbeMachines({1}, nullptr);
  ASSERT_EQ(r.machines.size(), 1u);
  EXPECT_GT(r.machines[0].read_bytes_per_s, 0);
  const nlohmann::json j = ToJson(r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "machine");
  EXPECT_EQ(j["machine"][0]["threads"], 1);
}

}  // namespace
}  // namespace chorus::eval
