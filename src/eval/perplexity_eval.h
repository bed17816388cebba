// Perplexity the way llama.cpp's llama-perplexity computes it (`chorus eval ppl`), the KL divergence
// of a compressed KV's next-token distributions against the f16 KV's (`chorus eval kld`), and a
// full-logits dump for comparing against a reference implementation (`chorus eval logits`).
// Chunked protocol (ppl, kld): the text tokenized whole with BOS when the model adds one, cut into
// non-overlapping chunks of `ctx` tokens, each run from an empty cache with its first token replaced
// by BOS, the second half scored (logits ctx/2 .. ctx-2 predict the next token: 255 per chunk at 512).
// Each chunk is one sequence scored through an Engine opened with the policy
// (research::ScoreSequence); eval/kv_record.h keeps what it was stored in.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/kv_record.h"  // KvOptions
#include "util/status.h"

namespace chorus::eval {

// The text and model of a chunked evaluation.
struct ChunkedText {
  std::string model_path, text_path;  // errors name them
  size_t ctx = 512;                   // tokens per chunk
  size_t chunks = 0;                  // the first N chunks (0 = all)
  int threads = 1;
  bool f32_weights = false;  // ModelLoadOptions::f32_weights (a reference for small differences)
};

struct PerplexityConfig {
  ChunkedText text;
  KvOptions kv;
  std::FILE* log = nullptr;  // progress: one line rewritten per chunk on a terminal, else one per tenth
};

struct PerplexityReport {
  double ppl = 0, ppl_stderr = 0;
  size_t ctx = 0, chunks = 0, scored_tokens = 0, file_tokens = 0;
  double seconds = 0, tokenize_seconds = 0;
  int threads = 0;
  size_t kv_sink_blocks = 0;
  size_t kv_bytes_per_chunk = 0;  // a policy: the chunks' mean
  double kv_bits_per_element = 0;
  std::string kv_k, kv_v;    // uniform: the formats; a policy: its name
  nlohmann::json kv_policy;  // a policy: KvRecord::ReportJson (null for uniform formats)
  std::string kv_text;       // the KV's lines of the text report
};

Result<PerplexityReport> RunPerplexity(const PerplexityConfig& config);
nlohmann::json ToJson(const PerplexityReport& report);  // kind "perplexity"
void PrintText(const PerplexityReport& report, std::FILE* out);

struct KldConfig {
  ChunkedText text;
  // One row per spec (KvPolicy's grammar), each with `kv`'s budget, encoder, query, sink and window;
  // a non-empty `sensitivity` ranks every allocator row by that table.
  std::vector<std::string> specs;
  KvOptions kv;
  std::string sensitivity;
  std::FILE* log = nullptr;  // progress: one line rewritten per chunk
};

struct KldRow {
  std::string name, k, v;  // a policy: its name in all three
  double ppl = 0, ppl_delta_pct = 0, kld_mean = 0, kld_p99 = 0, top1 = 0;
  size_t kv_bytes = 0, kv_peak_bytes = 0;
  double bits_per_element = 0;
  std::vector<double> chunk_kld, chunk_nll;  // per chunk: mean KLD, summed NLL (paired tests)
  nlohmann::json kv_policy;                  // a policy: KvRecord::ReportJson
  std::string kv_text;                       // a policy: its report's lines
};

struct KldReport {
  size_t kv_sink_blocks = 0, ctx = 0, chunks = 0, scored_tokens = 0;
  double base_ppl = 0, seconds = 0;
  int threads = 0;
  std::vector<double> base_chunk_nll;
  std::vector<KldRow> configs;
};

Result<KldReport> RunKld(const KldConfig& config);
nlohmann::json ToJson(const KldReport& report);  // kind "kld"
void PrintText(const KldReport& report, std::FILE* out);

struct LogitsConfig {
  std::string model_path, text_path, out_path;
  size_t n_tokens = 1024;  // the first N tokens, one sequence from position 0
  KvOptions kv;            // uniform formats only
  int threads = 1;
  bool f32_weights = false;
};
struct LogitsReport {
  std::string out;
  std::vector<int32_t> tokens;
  size_t n_vocab = 0;
};
// Writes raw little-endian f32 logits (n_tokens, n_vocab) to out_path.
Result<LogitsReport> RunLogits(const LogitsConfig& config);
nlohmann::json ToJson(const LogitsReport& report);  // kind "logits"

}  // namespace chorus::eval
