// `chorus bench` (pp/tg mode): prompt-processing and generation tokens/s of the forward pass for
// each thread count (a dense f16 cache, random prompt tokens, greedy decode; median of `reps`
// after one warm-up), beside llama.cpp on the same model and threads (its own llama-bench over
// weight and flash-attention variants, else llama-cpp-python), each against its roofline
// (eval/roofline.h) and the machine's measured limits.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/roofline.h"  // StepCost
#include "model/model.h"
#include "ops/machine_probe.h"  // MachineLimits
#include "util/status.h"

namespace chorus::eval {

struct SpeedBenchConfig {
  std::string model, python = "python3";  // model: the path the peer opens (the same file as `model`)
  std::vector<int> threads{1, 2};
  int pp = 512, tg = 128, reps = 3;
  std::string peer = "best";  // best (llama.cpp's llama-bench, llama-cpp-python as fallback), python, or
                              // none (no peer run)
  std::FILE* log = stderr;    // a line per phase as it starts (nullptr: none)
};

struct SpeedBenchReport {
  struct Speeds {
    int threads = 0;
    double pp = 0, tg = 0;                                  // tokens/s, median of the reps
    double pp_min = 0, pp_max = 0, tg_min = 0, tg_max = 0;  // spread of the reps
    double kv_bytes_per_token = 0;                          // the live cache's bytes / its token capacity
    MachineLimits machine;                                  // measured with this many threads
    StepCost tg_cost;                                       // a decode step at the run's mean depth (tg / 2)
  };
  std::string model;
  int pp = 0, tg = 0, reps = 0;
  std::vector<Speeds> chorus;  // per thread count, in the order asked for
  StepCost pp_cost;            // one pass over the prompt
  double load_average_before = 0, load_average_after = 0;
  size_t rss_bytes = 0, model_file_weight_bytes = 0;
  bool peer_run = false;
  nlohmann::json llama_cpp;     // the peer's JSON (null if not run or failed)
  std::string llama_cpp_note;   // non-empty: llama.cpp's own tools were not used, and why
  std::string llama_cpp_error;  // non-empty: the peer failed, and why
};

Result<SpeedBenchReport> RunSpeedBench(const Model& model, const SpeedBenchConfig& config);
// The fields `chorus bench --json` prints in pp/tg mode; kind "speed".
nlohmann::json ToJson(const SpeedBenchReport& report);
// The table, spreads, machine limits and peer settings `chorus bench` prints.
void PrintTable(const SpeedBenchReport& report, std::FILE* out);

}  // namespace chorus::eval
