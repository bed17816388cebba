// The KV's end-to-end sensitivity per (layer, side, width), measured (`chorus eval sensitivity`,
// `chorus calibrate`): for every layer, side (K, V) and width of a family, the text's chunks run with
// only that layer's side stored at that width (LayerProbePolicy; everything else f16, the sink
// blocks f16) and the next-token distributions of each chunk's second half are compared with the
// f16 KV run; the mean KLD is the table's entry. The allocator's :m rank allocates by it.
// Invariant: the table covers every layer × side × width asked for, or the call fails.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "chorus/kv_policy.h"          // KvPolicy::Family
#include "policy/comix_sensitivity.h"  // ComixSensitivity
#include "util/status.h"

namespace chorus::eval {

struct SensitivityConfig {
  std::string model_path;
  std::string text;       // what is scored (tokenized with BOS as llama-perplexity does)
  std::string text_name;  // for the table's source line
  KvPolicy::Family family = KvPolicy::Family::kKivi;
  std::vector<int> bits = {2, 3, 4, 8};
  size_t ctx = 256;   // tokens per chunk (second halves scored)
  size_t chunks = 4;  // the first N chunks of the text
  int threads = 1;
  size_t sink_blocks = 1;
  std::string window = "f16";  // rows of the newest < 32 tokens: f16 or q8
  // Products in f32 (ModelLoadOptions::f32_weights): without it the engine's int8 activation
  // rounding adds a floor to every entry that hides the differences between widths.
  bool f32_weights = true;
  // After each probe: probes done, probes in all, and a line naming it with its KLD.
  std::function<void(size_t done, size_t total, const std::string& line)> progress = {};
};

struct SensitivityReport {
  ComixSensitivity table;
  uint64_t model_fingerprint = 0;  // engine/model_fingerprint.h (the calibration cache's key)
  size_t scored_tokens = 0;
  double seconds = 0;
};

Result<SensitivityReport> MeasureSensitivity(const SensitivityConfig& config);

// Saves the table (atomically) with how it was measured.
Status SaveSensitivityReport(const SensitivityReport& report, const SensitivityConfig& config, const std::string& path);

// `chorus calibrate`: measures the table of each family and caches it next to the model
// (CalibrationTablePath: keyed by the model's fingerprint), where an allocator policy with the :m
// rank finds it. Returns the paths written, in `families` order. `config.family` is ignored.
Result<std::vector<std::string>> Calibrate(const SensitivityConfig& config,
                                           const std::vector<KvPolicy::Family>& families);

}  // namespace chorus::eval
