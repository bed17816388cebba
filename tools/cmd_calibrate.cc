// `chorus calibrate`: measure a model's KV sensitivity tables once and cache them next to the model
// (src/eval/sensitivity_eval.h: Calibrate); every allocator policy with the :m rank then uses them.
#include <unistd.h>

#include <filesystem>

#include "eval/sensitivity_eval.h"
#include "tools/common.h"

namespace chorus::cli {

std::function<void(size_t, size_t, const std::string&)> SensitivityProgress();  // cmd_sensitivity.cc
void PrintSensitivityTable(const ComixSensitivity& table);                      // cmd_sensitivity.cc

namespace {

// The repository's examples/du_fu.txt: next to the binary's tree (build/bin/chorus) or the working
// directory.
std::string DefaultText() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (const std::filesystem::path& p :
       {exe.parent_path() / "../../examples/du_fu.txt", std::filesystem::path("examples/du_fu.txt")})
    if (!ec && std::filesystem::exists(p)) return std::filesystem::weakly_canonical(p).string();
  return "";
}

}  // namespace

RunFn AddCalibrate(CLI::App& app) {
  struct Args {
    std::string model, file;
    std::vector<std::string> families = {"kivi", "tq"};
    int threads = DefaultThreads(), ctx = 256, chunks = 8;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure once how much each layer's keys and values cost end to end at 2, 3, 4 and 8 bits (KLD against f16 "
      "KV, f32 products) and cache the table next to the model (MODEL.chorus-FAMILY-FINGERPRINT.json); allocator "
      "policies with the :m rank (e.g. --policy comix-kivi:3:m) then rank by it. A few minutes, with progress.");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("-f,--file", a->file, "text to score (default: the repository's examples/du_fu.txt)");
  cmd->add_option("--family", a->families, "format families to calibrate: kivi, tq")
      ->delimiter(',')
      ->check(CLI::IsMember({"kivi", "tq"}))
      ->capture_default_str();
  cmd->add_option("-c,--ctx", a->ctx, "tokens per chunk (second halves scored)")
      ->check(CLI::Range(128, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "chunks of the text to score")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  AddThreadsFlag(cmd, a->threads);
  return [a] {
    const std::string file = a->file.empty() ? DefaultText() : a->file;
    if (file.empty())
      return Fail(
          Status::Error("no text to score: examples/du_fu.txt is not next to the binary or in the working "
                        "directory; give -f FILE (any few thousand words of prose)"));
    auto text = ReadFile(file);
    if (!text.ok()) return Fail(text.status());
    std::vector<KvPolicy::Family> families;
    for (const std::string& f : a->families)
      families.push_back(f == "kivi" ? KvPolicy::Family::kKivi : KvPolicy::Family::kTq);
    std::fprintf(stderr, "chorus calibrate: %s on %s (%d chunks x %d tokens, %zu famil%s)\n", a->model.c_str(),
                 file.c_str(), a->chunks, a->ctx, families.size(), families.size() == 1 ? "y" : "ies");
    auto paths = eval::Calibrate({.model_path = a->model,
                                  .text = *text,
                                  .text_name = file,
                                  .ctx = size_t(a->ctx),
                                  .chunks = size_t(a->chunks),
                                  .threads = a->threads,
                                  .f32_weights = true,
                                  .progress = SensitivityProgress()},
                                 families);
    if (!paths.ok()) return Fail(paths.status());
    for (const std::string& p : *paths) std::printf("wrote %s\n", p.c_str());
    return 0;
  };
}

}  // namespace chorus::cli
