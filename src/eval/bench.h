// `chorus bench` in one call: the config names one of the benchmarks, RunBench runs it. Modes, in
// this order: machine (ProbeMachines: the machine's limits, no model), policy cost
// (RunPolicyCost), agents (RunAgentsBench), depth (RunDepthBench), else pp/tg speed beside
// llama.cpp (RunSpeedBench). The agents and policy-cost modes share a document of doc_tokens cut
// from doc_file.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace chorus::eval {

// WikiText-2's test split where docs/EVAL.md puts it (beside the checkout, not in it): the default
// text of `bench --doc-file` and `eval comix -f`.
inline constexpr const char* kWikiTextTest = "../shared/data/wikitext-2/test.txt";
// ReadFile of a flag's default text: when it is kWikiTextTest and missing, the error says where to
// put WikiText-2 and which file the repository ships instead (`flag FILE`).
Result<std::string> ReadDefaultText(const std::string& path, const char* flag);

struct BenchConfig {
  std::string model;               // required but in machine mode
  std::vector<int> threads{1, 2};  // pp/tg and machine: each; the other modes: the last
  int pp = 512, tg = 128, reps = 3;
  bool no_peer = false;            // no llama.cpp beside (every mode that has one)
  bool machine = false;            // machine mode
  std::string python = "python3";  // with llama-cpp-python
  std::string peer = "best";       // pp/tg: best (llama-bench over weights/FA variants) or python
  std::vector<size_t> depths;      // depth mode: context depths
  std::vector<size_t> agents;      // agents mode: agent counts
  size_t doc_tokens = 4096;        // agents and policy cost: the document's tokens
  std::string doc_file = kWikiTextTest;
  std::vector<std::string> kv{"f16/f16"};  // depth: chorus K/V formats; agents: this default = q8/tq3,f16/f16
  std::vector<std::string> peer_kv{"f16", "q8_0", "q4_0"};  // depth and agents: llama.cpp KV types
  std::string window;                                       // agents: EngineOptions::kv_window ("" = its default)
  bool policy_cost = false;                                 // policy-cost mode
  std::vector<std::string> policy_configs{"f16", "kivi4", "comix-kivi:4:t348:k4", "cocktail-kivi:4:t348:k4"};
  std::string question = "Which roles did the actor play, and in which years?";  // policy cost: the agent's
  std::string encoder;  // policy cost: cocktail's sentence encoder ("" = the default)
  bool json = false;    // the report as JSON: RunBench returns it and prints its tables to stderr
};

// Runs the mode the config names. Text: its table (and progress) on `out`, returns null. JSON: the
// tables that print while it runs go to stderr, and it returns the report's JSON (ToJson).
Result<nlohmann::json> RunBench(const BenchConfig& config, std::FILE* out);

}  // namespace chorus::eval
