// KvPolicy: one spec grammar for every command. Round trips (Parse ∘ FormatSpec is the identity on
// what Parse returns), the presets, and errors that name the part of the spec that is wrong.
#include "chorus/kv_policy.h"

#include <gtest/gtest.h>

#include <string>

namespace chorus {
namespace {

KvPolicy P(const std::string& spec) {
  auto p = KvPolicy::Parse(spec);
  EXPECT_TRUE(p.ok()) << spec << ": " << p.status().message();
  return p.ok() ? *p : KvPolicy{};
}

TEST(KvPolicy, SpecsRoundTrip) {
  for (const char* spec :
       {"tq4/tq3", "q8/tq3", "f16/f16", "polykv-paper/tq3:s0", "kivi2/kivi4:s2", "comix-tq:3", "comix-kivi:2.5:t348:k4",
        "comix-tq:3:bound", "comix-tq:3:cal", "comix-kivi:3:t24:m", "comix-tq:3:j0", "cocktail-tq:3",
        "cocktail-kivi:4:t348:k4:g8:v", "cocktail-tq:3:c64", "cocktail-paper:0.6:0.1:32", "cocktail-paper:1:0:16"}) {
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
  };
  for (const auto& [spec, want] : cases) {
    auto p = KvPolicy::Parse(spec);
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_NE(p.status().message().find(want), std::string::npos) << spec << ": " << p.status().message();
  }
}

}  // namespace
}  // namespace chorus
