// `chorus bench --policy-cost`: what a KV policy costs (issue 19 item 4). One shared document of
// --doc-tokens tokens and one question, per config: the relevance search (cocktail: the chunks' and
// the question's embeddings and their cosines) per 1K document tokens, the allocator's
// reallocations, the sealing of the document's blocks (formats chosen + encoded), the document's
// prefill, and one agent decoding after it (depth = document + question) in tok/s. Every config's
// engine stays open and the decode reps run interleaved across configs (A/B under the same load).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tools/common.h"

namespace chorus::cli {

struct PolicyCostArgs {
  std::string model;
  std::string doc;       // the document's text (already cut to about doc_tokens)
  std::string question;  // the agent's question (cocktail: the query)
  std::pair<std::string, std::string> frame;  // ChatFrame: document + question form one user turn
  // "f16", "kivi4" (= kivi4/kivi4), "K/V", "comix-FAMILY:AVG[:tTIERS][:kB]",
  // "cocktail-FAMILY:AVG[:tTIERS][:kB]" (the engine's policies; eval comix's :bound/:cal/:joint/
  // :budget are refused: the engine has no such options)
  std::vector<std::string> configs;
  std::string encoder;   // cocktail: EngineOptions::encoder_path ("" = installed MiniLM, else the fallback)
  int threads = 2, tg = 64, reps = 3;
  bool json = false;
};

int RunPolicyCostBench(const PolicyCostArgs& a);

}  // namespace chorus::cli
