// The arguments of `chorus eval ppl|logits|kld` (tools/cmd_eval.cc registers them) and the runners
// that live in their own files.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/common.h"        // KvFlags, DefaultThreads
#include "tools/policy_flags.h"  // PolicyFlags

namespace chorus::cli {

struct EvalArgs {
  std::string model, file, out;
  KvFlags kv;
  PolicyFlags pol;                               // --policy SPEC (ppl, kld, logits)
  bool policy_given = false;                     // kld: --policy is one more row after --configs
  std::vector<std::string> configs;              // kld: more policies
  std::string family = "tq", tiers = "2,3,4,8";  // sensitivity: the table's formats and widths
  int ctx = 512;
  int chunks = 0;  // 0 = all
  int n_tokens = 1024;
  int threads = DefaultThreads();
  bool json = false;
  bool f32_weights = false;  // --f32-weights: ModelLoadOptions::f32_weights
};

struct EvalInputs {
  std::string text;
  std::unique_ptr<Model> model;
};

// The text file and the model of an eval command (errors name the path).
Result<EvalInputs> LoadInputs(const EvalArgs& a);

// The chunked evaluations (ppl, kld): inputs, the text's tokens and its chunks of -c tokens
// (errors: -c beyond the model's training context, a text shorter than one chunk).
struct EvalChunks : EvalInputs {
  std::vector<int32_t> tokens;
  size_t n_ctx = 0, n_chunks = 0;
  std::optional<int32_t> bos;  // replaces each chunk's first token when the model adds BOS
  double tokenize_seconds = 0;
  std::vector<int32_t> Chunk(size_t ch) const;
};
Result<EvalChunks> LoadEvalChunks(const EvalArgs& a);

// `chorus eval kld` (tools/cmd_kld.cc).
int RunKld(const EvalArgs& a);
// `chorus eval sensitivity` (tools/cmd_sensitivity.cc): -o, --comix-family and --comix-tiers from `a`.
int RunSensitivity(const EvalArgs& a);

}  // namespace chorus::cli
