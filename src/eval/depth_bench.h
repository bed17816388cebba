// Decode-at-depth benchmark (`chorus bench --depths ... --kv ...`): decode tokens/s after D tokens
// of context for several KV formats, beside llama.cpp with f16 / q8_0 / q4_0 KV at the same depths
// and threads, in one run, each cell against its roofline (eval/roofline.h).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "ops/machine_probe.h"  // MachineLimits
#include "util/status.h"

namespace chorus::eval {

struct DepthBenchConfig {
  std::string model, python = "python3";  // model: the path the peer loads
  std::vector<size_t> depths;
  std::vector<std::string> kv{"f16/f16"};                   // K/V format pairs
  std::vector<std::string> peer_kv{"f16", "q8_0", "q4_0"};  // llama.cpp's KV types (empty: no peer)
  int threads = 2, tg = 32, reps = 3;
  std::FILE* table = stdout;  // the text table, a cell as it is measured, then the roofline rows
};

struct DepthBenchReport {
  std::string model;
  int tg = 0, reps = 0, threads = 0;
  double load_average_before = 0, load_average_after = 0;
  MachineLimits machine;
  // Per depth: {"depth", "chorus": {K/V: {tg, kv_bytes, rss_growth_bytes, roofline}}, "llama_cpp":
  // {type: tg}, "llama_cpp_settings": {type: settings}, "llama_cpp_error": {type: message}}.
  nlohmann::json rows = nlohmann::json::array();
};

// `model`: the opened model (the path in `config.model` is what the peer loads).
Result<DepthBenchReport> RunDepthBench(const Model& model, const DepthBenchConfig& config);
nlohmann::json ToJson(const DepthBenchReport& report);  // kind "depth"

}  // namespace chorus::eval
