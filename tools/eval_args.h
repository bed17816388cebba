// The arguments of `chorus eval ppl|logits|kld|sensitivity` (tools/cmd_eval.cc registers them,
// tools/eval_args.cc turns them into configs) and the runners that live in their own files.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "eval/perplexity_eval.h"  // ChunkedText, KvOptions
#include "tools/common.h"          // KvFlags, DefaultThreads
#include "tools/policy_flags.h"    // PolicyFlags

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

// -m, -f, -t, --json (when `json`), --f32-weights, and -c and --chunks (when `chunks`), in that order.
void AddTextFlags(CLI::App* s, EvalArgs& a, bool json, bool chunks);

// The chunked text (ppl, kld) and the KV (ppl, kld, logits) that the flags describe.
eval::ChunkedText ChunkedTextOf(const EvalArgs& a);
eval::KvOptions KvOptionsOf(const EvalArgs& a);
// `chorus eval logits`: the first -n tokens of -f, their logits written to -o.
eval::LogitsConfig LogitsConfigOf(const EvalArgs& a);

// `chorus eval kld` (tools/cmd_kld.cc): eval::RunKld.
int RunKld(const EvalArgs& a);
// `chorus eval sensitivity` (tools/cmd_sensitivity.cc): -o, --comix-family and --comix-tiers from `a`.
int RunSensitivity(const EvalArgs& a);

}  // namespace chorus::cli
