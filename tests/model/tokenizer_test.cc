// Tokenizer tests: llama.cpp goldens on SmolLM2's real vocab, byte round trips, special tokens, synthetic BPE cases.
#include "model/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "gguf/gguf.h"                // GgufFile
#include "model/tokenizer_gguf.h"       // TokenizerDataFromGguf
#include "tokenizer_test_gguf.h"       // ReadTokenizerFromGgufForTest (independent cross-check)

namespace chorus {
namespace {

const std::string kModelPath =
    std::string(CHORUS_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kGoldenPath =
    std::string(CHORUS_SOURCE_DIR) + "/tests/model/testdata/tokenizer_golden.jsonl";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// WikiText-2 test from CHORUS_WIKITEXT_DIR when set; else the WikiText-2 article the repository ships
// (examples/du_fu.txt, 24 KB), five times over: a clone has everything the test needs.
std::string WikiText() {
  if (const char* env = std::getenv("CHORUS_WIKITEXT_DIR")) return ReadFile(std::string(env) + "/test.txt");
  const std::string article = ReadFile(std::string(CHORUS_SOURCE_DIR) + "/examples/du_fu.txt");
  std::string text;
  for (int i = 0; i < 5; ++i) text += article;
  return text;
}

// s without the bytes the vocab has no token for (Encode drops those, as llama.cpp).
std::string Encodable(const Tokenizer& tok, std::string_view s) {
  std::string out;
  for (char c : s) {
    if (tok.CanEncodeByte(static_cast<uint8_t>(c))) out += c;
  }
  return out;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// The real SmolLM2 tokenizer, loaded once for the suite.
class SmolLmTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModelPath)) return;
    auto fail = [](const Status& s) { create_error_ = new std::string(s.message()); };
    auto file = GgufFile::Open(kModelPath);
    if (!file.ok()) return fail(file.status());
    auto d = TokenizerDataFromGguf(*file.value());
    if (!d.ok()) return fail(d.status());
    auto tok = Tokenizer::Create(d.value());
    if (!tok.ok()) return fail(tok.status());
    data_ = new TokenizerData(std::move(d).value());
    tok_ = new Tokenizer(std::move(tok).value());
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
    delete data_;
    data_ = nullptr;
    delete create_error_;
    create_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kModelPath))
        << kModelPath << " is missing: run scripts/fetch_model.sh";
    ASSERT_EQ(create_error_, nullptr) << *create_error_;
    ASSERT_NE(tok_, nullptr) << "cannot read tokenizer metadata from " << kModelPath;
  }
  static const Tokenizer& tok() { return *tok_; }
  static const TokenizerData& data() { return *data_; }

 private:
  static inline Tokenizer* tok_ = nullptr;
  static inline TokenizerData* data_ = nullptr;
  static inline std::string* create_error_ = nullptr;
};

TEST_F(SmolLmTokenizerTest, MatchesLlamaCppGoldens) {
  std::ifstream f(kGoldenPath);
  ASSERT_TRUE(f) << kGoldenPath << " is missing: run scripts/ref_tokenizer_goldens.py";
  // Lines with "pre" use SmolLM2's vocab under another pre-tokenizer (as llama.cpp loaded it).
  std::map<std::string, std::unique_ptr<Tokenizer>> by_pre;
  struct Count {
    size_t n = 0, n_special = 0, mismatches = 0, roundtrip_failures = 0;
    std::string first_mismatch;
  };
  std::map<std::string, Count> counts;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string pre = j.value("pre", std::string("smollm"));
    const std::string text = j.at("text").get<std::string>();
    const bool special = j.at("special").get<bool>();
    const auto want = j.at("ids").get<std::vector<int32_t>>();
    const Tokenizer* t = &tok();
    if (pre != "smollm") {
      auto& slot = by_pre[pre];
      if (!slot) {
        TokenizerData d = data();
        d.pre = pre;
        auto r = Tokenizer::Create(d);
        ASSERT_TRUE(r.ok()) << r.status().message();
        slot = std::make_unique<Tokenizer>(std::move(r).value());
      }
      t = slot.get();
    }
    const auto got = t->Encode(text, /*add_special=*/false, special);
    Count& c = counts[pre];
    ++c.n;
    c.n_special += special;
    if (got != want && c.mismatches++ == 0) {
      c.first_mismatch = "text=" + nlohmann::json(text).dump() + " special=" +
                         std::to_string(special) + "\n  want " + Show(want) + "\n  got  " + Show(got);
    }
    if (t->Decode(got) != Encodable(*t, text)) ++c.roundtrip_failures;
  }
  ASSERT_GT(counts["smollm"].n, 1000u);
  for (const auto& [pre, c] : counts) {
    std::printf("goldens pre=%-10s %5zu lines (%4zu with special=true): %zu mismatches\n",
                pre.c_str(), c.n, c.n_special, c.mismatches);
    EXPECT_EQ(c.mismatches, 0u) << "pre=" << pre << " first mismatch: " << c.first_mismatch;
    EXPECT_EQ(c.roundtrip_failures, 0u) << "pre=" << pre;
  }
}

TEST_F(SmolLmTokenizerTest, GgufLoaderMatchesIndependentReader) {
  const auto mine = testing::ReadTokenizerFromGgufForTest(kModelPath);
  ASSERT_TRUE(mine.has_value());
  const TokenizerData& d = data();
  EXPECT_EQ(d.model, "gpt2");
  EXPECT_EQ(d.pre, "smollm");
  EXPECT_EQ(d.tokens, mine->data.tokens);
  EXPECT_EQ(d.token_types, mine->data.token_types);
  EXPECT_EQ(d.merges, mine->data.merges);
  EXPECT_EQ(d.tokens.size(), 49152u);
  EXPECT_EQ(d.merges.size(), 48900u);
  EXPECT_EQ(d.bos, 1);
  EXPECT_EQ(d.eos, 2);
  EXPECT_EQ(d.unk, 0);
  EXPECT_EQ(d.pad, 2);
  EXPECT_FALSE(d.add_bos);  // tokenizer.ggml.add_bos_token = false
}

TEST_F(SmolLmTokenizerTest, ModelMetadata) {
  EXPECT_EQ(tok().n_vocab(), 49152);
  ASSERT_TRUE(tok().bos().has_value());
  ASSERT_TRUE(tok().eos().has_value());
  EXPECT_EQ(*tok().bos(), 1);
  EXPECT_EQ(*tok().eos(), 2);
  EXPECT_EQ(tok().TokenToPiece(1), "<|im_start|>");
  EXPECT_EQ(tok().TokenToPiece(2), "<|im_end|>");
  EXPECT_FALSE(tok().add_bos());
  EXPECT_EQ(tok().Encode("Hi", /*add_special=*/true, false), tok().Encode("Hi", false, false));
  EXPECT_TRUE(tok().IsEndOfGeneration(2));   // <|im_end|> = eos
  EXPECT_TRUE(tok().IsEndOfGeneration(0));   // <|endoftext|>
  EXPECT_FALSE(tok().IsEndOfGeneration(1));  // <|im_start|>
  EXPECT_FALSE(tok().IsEndOfGeneration(*tok().Find(" the")));
  EXPECT_EQ(tok().Find("<|im_end|>"), 2);
  EXPECT_EQ(tok().Find("no such piece \x01\x02"), std::nullopt);
  // SmolLM2 has no token for these bytes (llama.cpp drops them); all others it has.
  for (int b : {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF5, 0xFF}) {
    EXPECT_FALSE(tok().CanEncodeByte(static_cast<uint8_t>(b))) << b;
  }
  int n_encodable = 0;
  for (int b = 0; b < 256; ++b) n_encodable += tok().CanEncodeByte(static_cast<uint8_t>(b));
  EXPECT_EQ(n_encodable, 256 - 21);
  EXPECT_EQ(tok().TokenToPiece(-1), "");
  EXPECT_EQ(tok().TokenToPiece(tok().n_vocab()), "");
  // Every piece finds its own id unless another token has the same bytes.
  for (int32_t id = 0; id < tok().n_vocab(); ++id) {
    const auto found = tok().Find(tok().TokenToPiece(id));
    ASSERT_TRUE(found.has_value()) << id;
    EXPECT_EQ(tok().TokenToPiece(*found), tok().TokenToPiece(id));
  }
}

TEST_F(SmolLmTokenizerTest, SpecialTokenParsing) {
  const std::string chat = "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n";
  const auto with = tok().Encode(chat, false, /*parse_special=*/true);
  ASSERT_GE(with.size(), 4u);
  EXPECT_EQ(with.front(), 1);
  EXPECT_EQ(std::count(with.begin(), with.end(), 1), 2);
  EXPECT_EQ(std::count(with.begin(), with.end(), 2), 1);
  EXPECT_EQ(tok().Decode(with), chat);
  const auto without = tok().Encode(chat, false, /*parse_special=*/false);
  EXPECT_EQ(std::count(without.begin(), without.end(), 1), 0);
  EXPECT_EQ(std::count(without.begin(), without.end(), 2), 0);
  EXPECT_EQ(tok().Decode(without), chat);
  // Adjacent and repeated special tokens; text that only resembles one.
  EXPECT_EQ(tok().Encode("<|im_end|><|im_end|>", false, true), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(tok().Encode("<|endoftext|>", false, true), (std::vector<int32_t>{0}));
  const auto partial = tok().Encode("<|im_end|", false, true);
  EXPECT_EQ(std::count(partial.begin(), partial.end(), 2), 0);
}

TEST_F(SmolLmTokenizerTest, RandomBytesRoundTrip) {
  std::mt19937 rng(1234);
  const std::string alphabet_bits[] = {"a", " ", "\n", "1", "\xC3\xA9", "\xE4\xB8\xAD",
                                       "\xF0\x9F\x98\x80", "<|im_end|>", "'s", "\t", "\xE2\x80\x8D"};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    const int len = static_cast<int>(rng() % 64);
    for (int i = 0; i < len; ++i) {
      const uint32_t r = rng();
      if (iter % 3 == 0) {
        s += static_cast<char>(r & 0xFF);  // arbitrary bytes: mostly invalid UTF-8
      } else if (r % 4 == 0) {
        s += static_cast<char>(0x80 + (r >> 8) % 0x80);  // stray continuation/lead bytes
      } else {
        s += alphabet_bits[(r >> 8) % std::size(alphabet_bits)];
      }
    }
    for (bool special : {false, true}) {
      const auto ids = tok().Encode(s, false, special);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok().n_vocab());
      ASSERT_EQ(tok().Decode(ids), Encodable(tok(), s)) << "iter " << iter << " special " << special;
    }
  }
}

TEST_F(SmolLmTokenizerTest, PathologicalInputs) {
  // One huge pre-token each (BPE on 256K symbols), a 100K-digit run, invalid bytes.
  const std::string cases[] = {std::string(1 << 18, ' '), std::string(1 << 18, 'a'),
                               std::string(100000, '7'), std::string(1 << 18, '\n'),
                               std::string(100000, '\xFF'), std::string(1 << 16, '!'),
                               std::string(1 << 18, '\xC3')};
  for (const std::string& s : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok().Encode(s, false, true);
    [[maybe_unused]] const double secs =  // checked in optimized builds without ASan
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(tok().Decode(ids), Encodable(tok(), s));
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
    // Not a speed test (it takes ~0.05 s): a quadratic merge loop would take minutes here, so a
    // bound far above the normal time catches that without failing on a loaded machine.
    EXPECT_LT(secs, 10.0) << "input of " << s.size() << " bytes of 0x" << std::hex
                         << static_cast<int>(static_cast<uint8_t>(s[0]));
#endif
  }
}

TEST_F(SmolLmTokenizerTest, WikiTextSpeed) {
  const std::string text = WikiText();
  ASSERT_GT(text.size(), 100000u);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok().Encode(text, false, false);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("WikiText-2: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", text.size(),
              ids.size(), secs, text.size() / secs / 1e6);
  EXPECT_EQ(tok().Decode(ids), text);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(secs, 20.0);  // ~0.2 s normally; only a complexity regression comes near this
#endif
}

// ---- Synthetic vocabularies: BPE mechanics without the model file ----

// 256 byte tokens (ids 0..255 in byte order) plus `extra` texts, merges as given.
TokenizerData ByteVocab(std::vector<std::string> extra, std::vector<std::string> merges,
                        std::string pre = "gpt2") {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = std::move(pre);
  uint32_t next_cp = 256;  // GPT-2 bytes_to_unicode()
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next_cp++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    d.tokens.push_back(s);
  }
  for (auto& e : extra) d.tokens.push_back(std::move(e));
  d.merges = std::move(merges);
  return d;
}

TEST(TokenizerSynthetic, MergesByRankThenLeftmost) {
  // "aaa": the pair (a,a) occurs twice with the same rank: the leftmost merges first.
  auto tok = Tokenizer::Create(ByteVocab({"aa", "ab", "aab"}, {"a a", "a b", "aa b"}));
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->Encode("aaa", false, false), (std::vector<int32_t>{256, 'a'}));
  // "aab": rank 0 (a a) before rank 1 (a b), then (aa b).
  EXPECT_EQ(tok->Encode("aab", false, false), (std::vector<int32_t>{258}));
  // Lower rank wins over position: "ab" merges before "aa" when ranked first.
  auto tok2 = Tokenizer::Create(ByteVocab({"aa", "ab"}, {"a b", "a a"}));
  ASSERT_TRUE(tok2.ok());
  EXPECT_EQ(tok2->Encode("aab", false, false), (std::vector<int32_t>{'a', 257}));
}

TEST(TokenizerSynthetic, MergeResultMissingFromVocab) {
  // "ab" is not a token but "ab c" builds on it: the merge chain must still fire.
  auto tok = Tokenizer::Create(ByteVocab({"abc"}, {"a b", "ab c"}));
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->Encode("abc", false, false), (std::vector<int32_t>{256}));
  // Without the final merge the virtual "ab" expands back into byte tokens.
  EXPECT_EQ(tok->Encode("abd", false, false), (std::vector<int32_t>{'a', 'b', 'd'}));
}

TEST(TokenizerSynthetic, BytesMissingFromVocabAreDroppedButStillSeparate) {
  TokenizerData d = ByteVocab({"ab"}, {"a b"});
  d.tokens.erase(d.tokens.begin() + 'q');  // ids above 'q' shift down by one
  auto tok = Tokenizer::Create(d);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_FALSE(tok->CanEncodeByte('q'));
  EXPECT_TRUE(tok->CanEncodeByte('a'));
  const int32_t a = *tok->Find("a"), b = *tok->Find("b"), ab = *tok->Find("ab");
  EXPECT_EQ(tok->Encode("ab", false, false), (std::vector<int32_t>{ab}));
  // As in llama.cpp the missing byte keeps its place in the word: a and b do not merge.
  EXPECT_EQ(tok->Encode("aqb", false, false), (std::vector<int32_t>{a, b}));
  EXPECT_TRUE(tok->Encode("q", false, false).empty());
  EXPECT_EQ(tok->Decode(tok->Encode("xqqy q", false, false)), "xy ");
}

TEST(TokenizerSynthetic, BosAndUserDefinedTokens) {
  TokenizerData d = ByteVocab({"<s>", "<user>"}, {});
  d.token_types.assign(d.tokens.size(), 1);
  d.token_types[256] = 3;  // control
  d.token_types[257] = 4;  // user-defined: matched even without parse_special
  d.bos = 256;
  d.add_bos = true;
  auto tok = Tokenizer::Create(d);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->Encode("x<user>", true, false), (std::vector<int32_t>{256, 'x', 257}));
  EXPECT_EQ(tok->Encode("<s>", false, true), (std::vector<int32_t>{256}));
  EXPECT_EQ(tok->Encode("<s>", false, false).size(), 3u);
  EXPECT_EQ(tok->Encode("", true, false), (std::vector<int32_t>{256}));
  EXPECT_TRUE(tok->Encode("", false, false).empty());
}

TEST(TokenizerSynthetic, RejectsBadData) {
  TokenizerData d = ByteVocab({}, {});
  d.model = "bert";  // WordPiece: not a GGUF tokenizer chorus has
  EXPECT_FALSE(Tokenizer::Create(d).ok());
  d = ByteVocab({}, {}, "no-such-pre");
  auto r = Tokenizer::Create(d);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("smollm"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("no-such-pre"), std::string::npos);
  d = ByteVocab({}, {});
  d.eos = 1000;
  EXPECT_FALSE(Tokenizer::Create(d).ok());
  d = ByteVocab({}, {});
  d.token_types = {1, 2, 3};
  EXPECT_FALSE(Tokenizer::Create(d).ok());
  for (const char* pre : {"default", "gpt2", "smollm", "llama-bpe", "llama3", "qwen2", "starcoder"}) {
    EXPECT_TRUE(Tokenizer::Create(ByteVocab({}, {}, pre)).ok()) << pre;
  }
}

}  // namespace
}  // namespace chorus
