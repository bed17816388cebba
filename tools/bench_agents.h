// Multi-agent decode benchmark beside llama.cpp's shared-sequence batched decode.
#pragma once
#include <string>
#include <vector>

#include "model/model.h"
#include "tools/common.h"

namespace chorus::cli {

struct AgentsBenchArgs {
  std::string model, python = "python3";
  std::vector<size_t> agents;
  size_t doc_tokens = 4096;
  std::vector<std::string> kv{"q8/tq3", "f16/f16"};
  std::vector<std::string> peer_kv{"f16", "q8_0", "q4_0"};
  int threads = 2, tg = 128, reps = 3;  // reps: rounds per chorus config (a fresh engine and prefill each)
                                        // and llama-batched-bench runs per peer variant
  bool json = false;
  std::string window;  // --kv-window; empty = the engine's default
};

// model: the opened model (for the roofline's weight bytes and shapes; the engine opens its own).
int RunAgentsBench(const Model& model, const std::string& doc_text, const AgentsBenchArgs& a);

}  // namespace chorus::cli
