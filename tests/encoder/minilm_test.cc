// all-MiniLM-L6-v2 in chorus against the Python oracle (scripts/ref/minilm_ref.py: HF `tokenizers` ids,
// float64 numpy BERT): token ids identical on every golden text, embedding cosine >= 0.999 on each,
// unit norm, batching equal to one-by-one, the similarity matrix sentence-transformers' quickstart
// publishes, and clear errors for missing or corrupt model files.
// Needs models/all-MiniLM-L6-v2 (scripts/fetch_encoder.sh): fails, not skips, without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "encoder/minilm_encoder.h"
#include "util/fp16.h"

namespace chorus {
namespace {

constexpr const char* kDir = "models/all-MiniLM-L6-v2";
constexpr const char* kGoldens = "tests/encoder/testdata/minilm_goldens.jsonl";
constexpr const char* kEmbeddings = "tests/encoder/testdata/minilm_embeddings.f16";

struct Golden {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> emb;
};

std::vector<Golden> LoadGoldens(size_t dim) {
  std::vector<Golden> g;
  std::ifstream in(kGoldens);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    g.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>(), {}});
  }
  std::ifstream eb(kEmbeddings, std::ios::binary);
  std::vector<uint16_t> h(g.size() * dim);
  eb.read(reinterpret_cast<char*>(h.data()), h.size() * 2);
  if (static_cast<size_t>(eb.gcount()) != h.size() * 2) return {};
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t d = 0; d < dim; ++d) g[i].emb.push_back(F16ToF32(h[i * dim + d]));
  return g;
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

std::unique_ptr<BertEncoder>& Encoder() {
  static std::unique_ptr<BertEncoder> e = [] {
    auto r = BertEncoder::Open(kDir, 1);
    if (!r.ok()) ADD_FAILURE() << r.status().message() << " — run scripts/fetch_encoder.sh";
    return r.ok() ? std::move(*r) : nullptr;
  }();
  return e;
}

TEST(MiniLm, ConfigIsAllMiniLmL6V2) {
  ASSERT_NE(Encoder(), nullptr);
  const BertConfig& c = Encoder()->config();
  EXPECT_EQ(c.hidden, 384u);
  EXPECT_EQ(c.heads, 12u);
  EXPECT_EQ(c.layers, 6u);
  EXPECT_EQ(c.intermediate, 1536u);
  EXPECT_EQ(c.max_seq_len, 256u);
  EXPECT_EQ(Encoder()->dim(), 384u);
}

TEST(MiniLm, TokenIdsMatchHfTokenizersOnEveryGolden) {
  ASSERT_NE(Encoder(), nullptr);
  const std::vector<Golden> g = LoadGoldens(384);
  ASSERT_GE(g.size(), 250u) << "goldens missing: " << kGoldens;
  size_t bad = 0;
  for (const Golden& x : g) {
    const std::vector<int32_t> ids = Encoder()->Tokenize(x.text);
    if (ids != x.ids) {
      ++bad;
      std::string got, want;
      for (int32_t i : ids) got += Encoder()->tokenizer().token(i) + " ";
      for (int32_t i : x.ids) want += Encoder()->tokenizer().token(i) + " ";
      ADD_FAILURE() << "text: " << x.text.substr(0, 200) << "\n got: " << got.substr(0, 400) << "\nwant: " << want.substr(0, 400);
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << g.size();
}

// 800 seeded random strings over many scripts, marks, symbols, emoji, controls, private-use and
// unassigned code points (scripts/ref/minilm_ref.py --only-unicode): ids identical to HF tokenizers.
TEST(MiniLm, TokenIdsMatchHfTokenizersOnRandomUnicode) {
  ASSERT_NE(Encoder(), nullptr);
  std::ifstream in("tests/encoder/testdata/minilm_unicode_ids.jsonl");
  std::string line;
  size_t n = 0, bad = 0;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    ++n;
    const std::string text = j["text"].get<std::string>();
    if (Encoder()->Tokenize(text) != j["ids"].get<std::vector<int32_t>>() && ++bad <= 5)
      ADD_FAILURE() << "ids differ for " << j["text"].dump();
  }
  EXPECT_GE(n, 800u);
  EXPECT_EQ(bad, 0u) << "of " << n;
}

TEST(MiniLm, EmbeddingsMatchTheNumpyReference) {
  ASSERT_NE(Encoder(), nullptr);
  const std::vector<Golden> g = LoadGoldens(384);
  ASSERT_GE(g.size(), 250u);
  std::vector<std::vector<int32_t>> seqs;
  for (const Golden& x : g) seqs.push_back(x.ids);  // the reference's ids: this test isolates the forward
  auto e = Encoder()->EmbedIds(seqs);
  ASSERT_TRUE(e.ok()) << e.status().message();
  double min_cos = 1, sum_cos = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double c = Cosine((*e)[i], g[i].emb);
    double n2 = 0;
    for (float v : (*e)[i]) n2 += double(v) * v;
    EXPECT_NEAR(n2, 1.0, 1e-5) << i;
    EXPECT_GE(c, 0.999) << "text " << i << ": " << g[i].text.substr(0, 120);
    min_cos = std::min(min_cos, c);
    sum_cos += c;
  }
  std::printf("cosine vs numpy reference over %zu texts: min %.9f (1-min %.2e) mean %.9f\n", g.size(), min_cos,
              1 - min_cos, sum_cos / g.size());
}

TEST(MiniLm, EmbedManyEqualsEmbedAndSimilarTextsAreCloser) {
  ASSERT_NE(Encoder(), nullptr);
  const std::vector<std::string> texts = {"A man is eating food.", "A man is eating a piece of bread.",
                                          "The stock market fell sharply today.", ""};
  auto many = Encoder()->EmbedMany(texts);
  ASSERT_TRUE(many.ok()) << many.status().message();
  for (size_t i = 0; i < texts.size(); ++i) {
    auto one = Encoder()->Embed(texts[i]);
    ASSERT_TRUE(one.ok());
    EXPECT_GT(Cosine(*one, (*many)[i]), 0.99999) << i;
  }
  EXPECT_GT(Cosine((*many)[0], (*many)[1]), Cosine((*many)[0], (*many)[2]) + 0.3);
  // More texts than one 2048-token group: same results as one by one, in order.
  std::vector<std::string> lots;
  for (int i = 0; i < 40; ++i) {
    std::string t = (i % 3 ? "lobster claws number " : "the weather today, ") + std::to_string(i);
    if (i % 3 == 0) t += std::string(300, '!');  // 300 punctuation tokens: truncated to 256
    lots.push_back(t);
  }
  auto grouped = Encoder()->EmbedMany(lots);
  ASSERT_TRUE(grouped.ok()) << grouped.status().message();
  ASSERT_EQ(grouped->size(), lots.size());
  size_t total = 0;
  for (size_t i = 0; i < lots.size(); ++i) {
    total += Encoder()->Tokenize(lots[i]).size();
    auto one = Encoder()->Embed(lots[i]);
    ASSERT_TRUE(one.ok());
    EXPECT_GT(Cosine(*one, (*grouped)[i]), 0.99999) << i;
  }
  EXPECT_GT(total, 2048u);
}

// The similarity matrix that sentence-transformers' own quickstart prints for all-MiniLM-L6-v2 (its docs
// and README, PyTorch): a check independent of our numpy oracle. Printed to 4 decimals there.
TEST(MiniLm, ReproducesSentenceTransformersQuickstartMatrix) {
  ASSERT_NE(Encoder(), nullptr);
  auto e = Encoder()->EmbedMany({"The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_NEAR(Cosine((*e)[0], (*e)[1]), 0.6660, 1e-4);
  EXPECT_NEAR(Cosine((*e)[0], (*e)[2]), 0.1046, 1e-4);
  EXPECT_NEAR(Cosine((*e)[1], (*e)[2]), 0.1411, 1e-4);
}

TEST(MiniLm, TwoThreadsGiveTheSameEmbeddings) {
  ASSERT_NE(Encoder(), nullptr);
  auto two = BertEncoder::Open(kDir, 2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  const std::vector<std::string> texts = {"Homarus gammarus is a large crustacean.", "", "short", "北京 München"};
  auto a = Encoder()->EmbedMany(texts), b = (*two)->EmbedMany(texts);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ((*a)[i], (*b)[i]) << i;  // same kernel, same order per row
}

TEST(MiniLm, Chunk32TokensTiming) {
  ASSERT_NE(Encoder(), nullptr);
  std::vector<int32_t> ids = Encoder()->Tokenize(
      "The European lobster is a species of clawed lobster from the eastern Atlantic Ocean, the Mediterranean Sea "
      "and parts of the Black Sea, closely related to the American one.");
  ids.resize(31);
  ids.push_back(Encoder()->tokenizer().sep_id());
  ASSERT_TRUE(Encoder()->EmbedIds({ids}).ok());  // warm-up
  const int reps = 20;
  auto cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_ms();
  for (int r = 0; r < reps; ++r) ASSERT_TRUE(Encoder()->EmbedIds({ids}).ok());
  const double cpu = (cpu_ms() - c0) / reps;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  std::printf("32-token chunk, 1 thread: %.2f ms wall, %.2f ms CPU per embed (mean of %d)\n", ms, cpu, reps);
  const std::vector<std::vector<int32_t>> batch(16, ids);  // EmbedMany's path: one forward for 16 chunks
  const double b0 = cpu_ms();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(Encoder()->EmbedIds(batch).ok());
  std::printf("32-token chunks batched by 16, 1 thread: %.2f ms CPU per chunk\n", (cpu_ms() - b0) / (4 * 16));
}

TEST(MiniLm, RejectsBadIdsAndLengths) {
  ASSERT_NE(Encoder(), nullptr);
  EXPECT_FALSE(Encoder()->EmbedIds({{101, 999999, 102}}).ok());
  EXPECT_FALSE(Encoder()->EmbedIds({{101, -1, 102}}).ok());
  EXPECT_FALSE(Encoder()->EmbedIds({{}}).ok());
  EXPECT_FALSE(Encoder()->EmbedIds({std::vector<int32_t>(257, 1000)}).ok());
  EXPECT_EQ(Encoder()->Tokenize(std::string(5000, 'a') + std::string(" word") + std::string(3000, '.')).size(), 256u);
}

namespace fs = std::filesystem;

// A copy of the model directory's small files in a temp dir, with model.safetensors as given.
fs::path ScratchDir(const std::vector<uint8_t>& safetensors) {
  fs::path d = fs::temp_directory_path() / ("chorus_minilm_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "1_Pooling");
  for (const char* f : {"config.json", "tokenizer.json", "sentence_bert_config.json", "1_Pooling/config.json"})
    fs::copy_file(fs::path(kDir) / f, d / f);
  std::ofstream(d / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(safetensors.data()), safetensors.size());
  return d;
}

std::string OpenError(const std::string& dir) {
  auto e = OpenMiniLmEncoder(dir);
  return e.ok() ? std::string("(opened)") : e.status().message();
}

TEST(MiniLm, MissingAndCorruptFilesAreErrors) {
  ASSERT_TRUE(fs::exists(kDir)) << kDir << " missing — run scripts/fetch_encoder.sh";
  EXPECT_NE(OpenError("/nonexistent/minilm").find("does not exist"), std::string::npos);
  // Truncated safetensors: the real header, data cut short.
  std::ifstream in(fs::path(kDir) / "model.safetensors", std::ios::binary);
  std::vector<uint8_t> head(1 << 16);
  in.read(reinterpret_cast<char*>(head.data()), head.size());
  fs::path d = ScratchDir(head);
  std::string err = OpenError(d);
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  // Garbage safetensors.
  d = ScratchDir({1, 2, 3});
  EXPECT_NE(OpenError(d).find("too short"), std::string::npos) << OpenError(d);
  // A valid safetensors that lacks the weights.
  const std::string hdr = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::vector<uint8_t> small(8, 0);
  small[0] = static_cast<uint8_t>(hdr.size());
  small.insert(small.end(), hdr.begin(), hdr.end());
  small.insert(small.end(), 4, 0);
  d = ScratchDir(small);
  EXPECT_NE(OpenError(d).find("word_embeddings.weight' not found"), std::string::npos) << OpenError(d);
  // Missing tokenizer.json.
  fs::remove(d / "tokenizer.json");
  EXPECT_NE(OpenError(d).find("tokenizer.json"), std::string::npos) << OpenError(d);
  // Unsupported architecture.
  d = ScratchDir(small);
  std::ofstream(d / "config.json", std::ios::trunc) << R"({"model_type":"roberta","hidden_size":384})";
  EXPECT_NE(OpenError(d).find("model_type 'roberta' is not supported"), std::string::npos) << OpenError(d);
  fs::remove_all(d);
}

}  // namespace
}  // namespace chorus
