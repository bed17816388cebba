// `chorus eval sensitivity`: flags, then eval::MeasureSensitivity (src/eval/sensitivity_eval.h); prints
// and writes the table that the allocator's :m rank (`--comix-sensitivity FILE`) allocates by.
#include <fmt/format.h>

#include <chrono>
#include <sstream>

#include "eval/sensitivity_eval.h"
#include "tools/eval_args.h"

namespace chorus::cli {

// "2,3,4,8" → {2, 3, 4, 8}; an item that is not a number is an error naming it (the widths
// themselves are checked by ComixSensitivity::Check).
Result<std::vector<int>> ParseWidths(const std::string& list) {
  std::vector<int> bits;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long b = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != 0) return Status::Error("--comix-tiers '{}': '{}' is not a bit width", list, item);
    bits.push_back(int(b));
  }
  return bits;
}

void PrintSensitivityTable(const ComixSensitivity& table) {
  std::printf("%-6s", "layer");
  for (const char* s : {"K", "V"})
    for (int b : table.bits) std::printf(" %9s", fmt::format("{}{}", s, b).c_str());
  std::printf("\n");
  for (size_t l = 0; l < table.n_layer; ++l) {
    std::printf("%-6zu", l);
    for (KvSide side : {KvSide::kKey, KvSide::kValue})
      for (size_t w = 0; w < table.bits.size(); ++w) std::printf(" %9.5f", table.kld[table.Index(l, side, w)]);
    std::printf("\n");
  }
}

std::function<void(size_t, size_t, const std::string&)> SensitivityProgress() {
  const auto start = std::chrono::steady_clock::now();
  return [start](size_t done, size_t total, const std::string& line) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\r[%zu/%zu] %s  %.0f s, ~%.0f s left   %s", done, total, line.c_str(), el,
                 el / double(done) * double(total - done), done == total ? "\n" : "");
  };
}

int RunSensitivity(const EvalArgs& a) {
  auto bits = ParseWidths(a.tiers);
  if (!bits.ok()) return Fail(bits.status());
  auto text = ReadFile(a.file);
  if (!text.ok()) return Fail(text.status());
  const eval::SensitivityConfig cfg{.model_path = a.model,
                                    .text = *text,
                                    .text_name = a.file,
                                    .family = a.family == "kivi" ? KvPolicy::Family::kKivi : KvPolicy::Family::kTq,
                                    .bits = *bits,
                                    .ctx = size_t(a.ctx),
                                    .chunks = a.chunks > 0 ? size_t(a.chunks) : SIZE_MAX,
                                    .threads = a.threads,
                                    .sink_blocks = a.kv.sink_blocks,
                                    .window = a.kv.window,
                                    .f32_weights = a.f32_weights,
                                    .progress = SensitivityProgress()};
  auto r = eval::MeasureSensitivity(cfg);
  if (!r.ok()) return Fail(r.status());
  if (Status st = eval::SaveSensitivityReport(*r, cfg, a.out); !st.ok()) return Fail(st);
  PrintSensitivityTable(r->table);
  std::printf("wrote %s (%.0f s)\n", a.out.c_str(), r->seconds);
  return 0;
}

}  // namespace chorus::cli
