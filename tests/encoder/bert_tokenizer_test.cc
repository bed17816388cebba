// BertTokenizer on a small hand-made tokenizer.json (no model needed): each stage of the BERT pipeline
// (clean_text, CJK padding, accent stripping, lowercase, punctuation split, WordPiece "##", [UNK] rules,
// verbatim special tokens, truncation) and the refusal of tokenizers it does not implement.
// Every expectation here was checked against HF `tokenizers` 0.23 on the same tokenizer.json; the real
// vocabulary is checked against it in minilm_test.
#include "encoder/bert_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

namespace chorus {
namespace {

const char* kVocab[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "creme", "brule", "##e", "hello", ",",
                        "!",     "北",    "京",    "un",    "##aff", "##able", "a",     "##a",  ".",     "i",
                        "istanbul", "οδοσ", "ᄒ", "##ᅡ", "##ᆫ"};

nlohmann::json TokenizerJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < std::size(kVocab); ++i) vocab[kVocab[i]] = i;
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < 5; ++i)
    added.push_back({{"id", i}, {"content", kVocab[i]}, {"special", true}, {"normalized", false},
                     {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  return {{"added_tokens", added},
          {"normalizer", {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                          {"strip_accents", nullptr}, {"lowercase", true}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                     {"max_input_chars_per_word", 10}, {"vocab", vocab}}}};
}

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/chorus_tok_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

BertTokenizer Load(const nlohmann::json& j) {
  const std::string p = WriteTemp(j.dump());
  auto t = BertTokenizer::FromTokenizerJson(p);
  std::remove(p.c_str());
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(*t) : BertTokenizer();
}

std::string Pieces(const BertTokenizer& t, std::string_view text) {
  std::string s;
  for (int32_t id : t.EncodeNoSpecials(text)) s += (s.empty() ? "" : " ") + t.token(id);
  return s;
}

TEST(BertTokenizer, NormalizesSplitsAndWordPieces) {
  const BertTokenizer t = Load(TokenizerJson());
  EXPECT_EQ(Pieces(t, "Crème  BRÛLÉE!"), "creme brule ##e !");
  EXPECT_EQ(Pieces(t, "hello,hello.  "), "hello , hello .");
  EXPECT_EQ(Pieces(t, "unaffable"), "un ##aff ##able");
  EXPECT_EQ(Pieces(t, "aaa"), "a ##a ##a");
  EXPECT_EQ(Pieces(t, "unaffx hello"), "[UNK] hello");          // an unmatchable rest: the whole word
  EXPECT_EQ(Pieces(t, "aaaaaaaaaa aaaaaaaaaaa"), "a ##a ##a ##a ##a ##a ##a ##a ##a ##a [UNK]");  // > 10 chars
  EXPECT_EQ(Pieces(t, "北京hello"), "北 京 hello");             // CJK ideographs stand alone
  EXPECT_EQ(Pieces(t, "hel\x01lo\tcr\u00e8me\u00a0a"), "hello creme a");  // control dropped; tab, NBSP split
  EXPECT_EQ(Pieces(t, "İstanbul ΟΔΟΣ"), "istanbul οδοσ");      // İ → I + dot → i; no final sigma
  EXPECT_EQ(Pieces(t, "한"), "ᄒ ##ᅡ ##ᆫ");                      // Hangul decomposes to jamo
  EXPECT_EQ(Pieces(t, ""), "");
  EXPECT_EQ(Pieces(t, " \r\n "), "");
  EXPECT_EQ(Pieces(t, "hello\xff\xfe!"), "hello !");  // invalid UTF-8 → U+FFFD → dropped
  EXPECT_EQ(Pieces(t, "\xe4\xb8"), "");               // truncated sequence
}

TEST(BertTokenizer, SpecialTokensAreMatchedVerbatim) {
  const BertTokenizer t = Load(TokenizerJson());
  EXPECT_EQ(Pieces(t, "hello[SEP]a [MASK]"), "hello [SEP] a [MASK]");
  EXPECT_EQ(Pieces(t, "[sep]"), "[UNK] [UNK] [UNK]");  // lowercase is not special: '[' 'sep' ']' (no '[' in vocab)
}

TEST(BertTokenizer, EncodeAddsClsSepAndTruncates) {
  const BertTokenizer t = Load(TokenizerJson());
  EXPECT_EQ(t.Encode("", 8), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(t.Encode("hello hello", 8), (std::vector<int32_t>{2, 8, 8, 3}));
  EXPECT_EQ(t.Encode("a a a a a a a a a a", 5), (std::vector<int32_t>{2, 16, 16, 16, 3}));
}

TEST(BertTokenizer, RandomBytesGiveValidIdsWithinTheLimit) {
  const BertTokenizer t = Load(TokenizerJson());
  std::mt19937 rng(99);
  for (int it = 0; it < 3000; ++it) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? 'a' : rng());
    const std::vector<int32_t> ids = t.Encode(s, 16);
    ASSERT_GE(ids.size(), 2u);
    ASSERT_LE(ids.size(), 16u);
    EXPECT_EQ(ids.front(), t.cls_id());
    EXPECT_EQ(ids.back(), t.sep_id());
    for (int32_t id : ids) ASSERT_LT(static_cast<size_t>(id), t.vocab_size());
  }
}

TEST(BertTokenizer, RefusesWhatItDoesNotImplement) {
  auto error_of = [](const nlohmann::json& j) {
    const std::string p = WriteTemp(j.dump());
    auto t = BertTokenizer::FromTokenizerJson(p);
    std::remove(p.c_str());
    return t.ok() ? std::string("(loaded)") : t.status().message();
  };
  nlohmann::json j = TokenizerJson();
  j["model"]["type"] = "BPE";
  EXPECT_NE(error_of(j).find("model type 'BPE'"), std::string::npos);
  j = TokenizerJson();
  j["normalizer"]["lowercase"] = false;
  EXPECT_NE(error_of(j).find("uncased"), std::string::npos);
  j = TokenizerJson();
  j["pre_tokenizer"]["type"] = "ByteLevel";
  EXPECT_NE(error_of(j).find("pre_tokenizer 'ByteLevel'"), std::string::npos);
  j = TokenizerJson();
  j["model"]["vocab"].erase("[CLS]");
  EXPECT_NE(error_of(j).find("not in [0,"), std::string::npos) << error_of(j);
  EXPECT_NE(error_of(nlohmann::json::array()).find("not a JSON object"), std::string::npos);
  auto missing = BertTokenizer::FromTokenizerJson("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace chorus
