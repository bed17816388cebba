// Gemma 3's SentencePiece tokenizer (tokenizer.ggml.model "llama", from the real GGUF) against
// llama.cpp's ids on the golden lines (scripts/ref_tokenizer_goldens.py: WikiText lines and runs,
// code, Unicode, whitespace, numbers, Gemma's turn markers with and without parse_special), the
// round trip.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "gguf/gguf.h"
#include "model/tokenizer.h"
#include "model/tokenizer_gguf.h"

namespace chorus {
namespace {

const std::string kModel = std::string(CHORUS_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
const std::string kGolden = std::string(CHORUS_SOURCE_DIR) + "/tests/model/testdata/tokenizer_golden_gemma3.jsonl";

std::string Show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// Catches: score order or tie-break of the merges, the ▁ escape, byte fallback, user-defined
// tokens (newline runs, space runs) split before SentencePiece, the BOS / space-prefix rules.
TEST(TokenizerGemma3, MatchesLlamaCppGoldens) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run scripts/fetch_model.sh gemma3-270m";
  auto file = GgufFile::Open(kModel);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto d = TokenizerDataFromGguf(*file.value());
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->model, "llama");
  EXPECT_FALSE(d->add_space_prefix);
  auto tok = Tokenizer::Create(d.value());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->bos(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->IsEndOfGeneration(*tok->Find("<end_of_turn>")));

  std::ifstream f(kGolden);
  ASSERT_TRUE(f) << kGolden << " is missing: run scripts/ref_tokenizer_goldens.py";
  size_t n = 0, n_special = 0, mismatches = 0, roundtrip = 0;
  std::string first;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("wikitext_test_tokens")) continue;  // checked by scripts/ref/check_gemma3.sh (needs the data)
    const std::string text = j.at("text").get<std::string>();
    const bool special = j.at("special").get<bool>();
    const auto want = j.at("ids").get<std::vector<int32_t>>();
    const auto got = tok->Encode(text, /*add_special=*/false, special);
    ++n;
    n_special += special;
    if (got != want && mismatches++ == 0)
      first = "text=" + nlohmann::json(text).dump() + " special=" + std::to_string(special) + "\n  want " +
              Show(want) + "\n  got  " + Show(got);
    if (!special && tok->Decode(got) != text) ++roundtrip;
  }
  std::printf("gemma3 goldens: %zu lines (%zu with special=true): %zu mismatches, %zu round-trip failures\n", n,
              n_special, mismatches, roundtrip);
  EXPECT_GT(n, 1000u);
  EXPECT_EQ(mismatches, 0u) << "first mismatch: " << first;
  EXPECT_EQ(roundtrip, 0u);
  EXPECT_EQ(tok->Encode("", true, false), std::vector<int32_t>{2});

}

}  // namespace
}  // namespace chorus
