// KvPolicy: one spec grammar for every command. Round trips (Parse ∘ FormatSpec is the identity on
// what Parse returns), the presets, and errors that name the part of the spec that is wrong.
#include "chorus/kv_policy.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/kv_policy_options.h"  // ApplyTableFallback
#include "policy/comix_sensitivity.h"  // ShippedCalibrationTables

namespace chorus {
namespace {

KvPolicy P(const std::string& spec) {
  auto p = KvPolicy::Parse(spec);
  EXPECT_TRUE(p.ok()) << spec << ": " << p.status().message();
  return p.ok() ? *p : KvPolicy{};
}

TEST(KvPolicy, SpecsRoundTrip) {
  for (const char* spec : {"tq4/tq3", "q8/tq3", "f16/f16", "polykv-paper/tq3:s0", "kivi2/kivi4:s2", "comix-tq:3",
                           "comix-kivi:2.5:t348:k4", "comix-tq:3:bound", "comix-tq:3:cal", "comix-kivi:3:t24:m",
                           "comix-tq:3:j0", "cocktail-tq:3", "cocktail-kivi:4:t348:k4:g8:v", "cocktail-tq:3:c64",
                           "cocktail-paper:0.6:0.1:32", "cocktail-paper:1:0:16", "comix-kivi:3.25:t348:m:fkivi4/tq3"}) {
    const KvPolicy p = P(spec);
    EXPECT_EQ(FormatSpec(p), spec);
    EXPECT_EQ(P(FormatSpec(p)), p) << spec;
  }
  EXPECT_EQ(FormatSpec(P("kivi3")), "kivi3/kivi3");  // V = K when omitted
  EXPECT_EQ(FormatSpec(P("cocktail-paper")), "cocktail-paper:0.6:0.1:32");
  EXPECT_EQ(FormatSpec(P("comix-tq:3:t234")), "comix-tq:3");  // the default tiers are not printed
}

TEST(KvPolicy, PresetsAreTheirSpecs) {
  ASSERT_EQ(KvPolicyPresets().size(), 6u);
  for (const KvPolicyPreset& preset : KvPolicyPresets()) {
    EXPECT_EQ(P(preset.name), P(preset.spec)) << preset.name;
    EXPECT_NE(KvPolicyHelp().find(preset.name), std::string::npos);
  }
  EXPECT_EQ(P("chorus"), KvPolicy{});  // the default is the preset
  EXPECT_EQ(P("chorus").kind(), KvPolicyKind::kUniform);
  EXPECT_EQ(P("comix").kind(), KvPolicyKind::kAllocator);
  EXPECT_EQ(P("cocktail").kind(), KvPolicyKind::kRelevance);
  EXPECT_EQ(P("cocktail-paper").kind(), KvPolicyKind::kCocktailPaper);
  EXPECT_STREQ(ToString(P("cocktail").kind()), "cocktail");
}

TEST(KvPolicy, AccessorsFollowTheKind) {
  EXPECT_EQ(P("chorus").allocator(), nullptr);
  EXPECT_FALSE(P("chorus").needs_questions());
  ASSERT_NE(P("cocktail-kivi:4:g8").allocator(), nullptr);
  EXPECT_EQ(P("cocktail-kivi:4:g8").allocator()->family, KvPolicy::Family::kKivi);
  EXPECT_EQ(P("cocktail-kivi:4:g8").allocator()->avg_bits, 4);
  EXPECT_TRUE(P("cocktail-paper").needs_questions());
  EXPECT_TRUE(P("cocktail").needs_questions());
  EXPECT_EQ(P("cocktail-tq:3:c16").chunk_tokens(), 16u);
  EXPECT_EQ(P("cocktail-paper:0.5:0.2:64").chunk_tokens(), 64u);
  EXPECT_EQ(std::get<KvPolicy::Uniform>(P("polykv-paper").rule).sink_blocks, 0);
}

TEST(KvPolicy, BadSpecsNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty KV policy"},
      {"mixed", "chorus, polykv, polykv-paper, comix, cocktail, cocktail-paper"},
      {"q9/tq3", "policy 'q9/tq3'"},
      {"tq4/tq3:z", "unknown part 'z'"},
      {"comix-nf4:3", "the family is tq or kivi, got 'nf4'"},
      {"comix-tq", "write comix-tq:AVG_BITS"},
      {"comix-tq:abc", "'abc' is not a number"},
      {"comix-tq:1", "between 2 and 8"},
      {"comix-tq:3:t25", "unknown part 't25'"},
      {"comix-tq:3:t43", "ascending"},
      {"comix-tq:3:t2345", "unknown part"},
      {"comix-tq:3:k5", "key floor 5 is not a tier"},
      {"comix-tq:3:t23:k4", "above every tier"},
      {"comix-tq:3:j2", "join reserve must be in [0, 1]"},
      {"comix-tq:3:g4", "unknown part 'g4'"},
      {"cocktail-tq:3:c48", "16, 32 or 64"},
      {"cocktail-tq:3:g2000", "relevance gain"},
      {"cocktail-paper:0.7:0.5", "alpha + beta must be <= 1"},
      {"cocktail-paper:x:0.1", "'x' is not a number (alpha)"},
      {"cocktail-paper:0.5", "write cocktail-paper or cocktail-paper:ALPHA:BETA[:CHUNK]"},
      {"comix-kivi:3:fkivi4/tq3", "a fallback (:f) applies only to the measured rank (:m)"},
      {"comix-kivi:3:m:fq9/tq3", "policy 'q9/tq3'"},
  };
  for (const auto& [spec, want] : cases) {
    auto p = KvPolicy::Parse(spec);
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_NE(p.status().message().find(want), std::string::npos) << spec << ": " << p.status().message();
  }
}

// The tables the repository ships parse and cover their model; a :m policy finds one by the model's
// fingerprint, and without one takes its fallback and says how to calibrate.
TEST(KvPolicy, ShippedTablesAndTheFallback) {
  ASSERT_FALSE(ShippedCalibrationTables().empty());
  for (const ShippedCalibrationTable& t : ShippedCalibrationTables()) {
    auto table = ParseComixSensitivity(t.json, t.name);
    ASSERT_TRUE(table.ok()) << t.name << ": " << table.status().message();
    EXPECT_EQ(std::string(t.name).rfind((*table)->family_name(), 0), 0u) << t.name;
  }
  const uint64_t smollm2 = 0xb7ea23ef05c5ffe0;  // SmolLM2-135M-Instruct Q4_1 (data/calibration)
  ASSERT_NE(FindShippedCalibrationTable(smollm2, ComixFamily::kKivi), nullptr);
  EXPECT_EQ(FindShippedCalibrationTable(smollm2, ComixFamily::kTq), nullptr);

  KvPolicy p = P("comix-kivi:3.25:t348:m:fkivi4/tq3");
  EXPECT_EQ(AllocatorTableSource(p, "/nonexistent/model.gguf", smollm2), "shipped kivi-b7ea23ef05c5ffe0");
  EXPECT_EQ(ApplyTableFallback(p, "/nonexistent/model.gguf", smollm2), "");
  EXPECT_EQ(p.kind(), KvPolicyKind::kAllocator);

  const std::string note = ApplyTableFallback(p, "/nonexistent/model.gguf", 0x1234);
  EXPECT_EQ(FormatSpec(p), "kivi4/tq3");
  EXPECT_NE(note.find("falls back to kivi4/tq3"), std::string::npos) << note;
  EXPECT_NE(note.find("chorus calibrate -m /nonexistent/model.gguf"), std::string::npos) << note;

  KvPolicy strict = P("comix-kivi:3:m");  // no fallback: the missing table stays an error (Engine::Open)
  EXPECT_EQ(ApplyTableFallback(strict, "/nonexistent/model.gguf", 0x1234), "");
  EXPECT_EQ(strict.kind(), KvPolicyKind::kAllocator);
}

}  // namespace
}  // namespace chorus
