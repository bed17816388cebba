// Shared command-line helpers.
#include "tools/common.h"

#include "eval/cpu.h"         // SetCpuTargetByName, kCpuTargetNames, MatMulPath
#include "eval/harness.h"     // LoadAverage
#include "eval/uniform_kv.h"  // ParseWindowFormat (kv/window_codec.h through it)

#include <algorithm>
#include <cctype>
#include <cstdlib>  // getloadavg
#include <fstream>
#include <sstream>
#include <thread>

namespace chorus::cli {

int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 1;
}

Result<std::string> ReadDocument(const std::string& path, const char* flag) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  if (text.find_first_not_of(" \t\r\n\f\v") == std::string::npos)
    return Status::Error("{} '{}' is {}: there is no document to share", flag, path,
                         text.empty() ? "empty" : "only whitespace");
  return text;
}

Result<size_t> ParseBytes(const std::string& text) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(text, &used);
  } catch (...) {
    return Status::Error("'{}' is not a byte size (e.g. 4000000, 64K, 1.5M, 2G)", text);
  }
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else return Status::Error("'{}': unknown size unit '{}' (use K, M or G)", text, text.substr(used));
  if (!(x > 0) || x * mult >= 1e18) return Status::Error("'{}': a byte size must be positive", text);
  return static_cast<size_t>(x * mult);
}

int DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void AddThreadsFlag(CLI::App* cmd, int& threads) {
  cmd->add_option("-t,--threads", threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
}

double LoadAverage() { return eval::LoadAverage(); }

void AddKvFlags(CLI::App* cmd, KvFlags& flags) {
  cmd->add_option("--kv-sink", flags.sink_blocks,
                  "leading 32-token blocks of a context kept f16 (attention sinks); 0 = none")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  cmd->add_option("--kv-window", flags.window,
                  "rows of the newest <32 tokens, before they are sealed: f16, or q8 (one fp16 scale + int8 per "
                  "KV head: about half the bytes; sealed blocks are then encoded from the q8-rounded rows)")
      ->capture_default_str();
}

Status CheckEngineWindowFlag(const std::string& value) {
  if (value == "auto" || ParseWindowFormat(value).ok()) return Status::Ok();
  return Status::Error("--kv-window: unknown window format '{}'; valid: auto, f16, q8", value);
}

void PrintJson(const nlohmann::json& j) {
  if (j.is_object() && !j.contains("kernel_path")) {
    nlohmann::json out = j;
    out["kernel_path"] = MatMulPath();
    if (!out.contains("cpu")) out["cpu"] = CpuModel();
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s\n", j.dump().c_str());
}

void AddCpuTargetFlag(CLI::App& app, std::string* value) {
  for (CLI::App* cmd : app.get_subcommands({})) {
    cmd->add_option("--cpu-target", *value,
                    std::string("cap the SIMD kernels for the whole run: ") + kCpuTargetNames +
                        " (default: auto = the best this CPU runs; the environment variable " + kCpuTargetEnv +
                        " does the same for library users)")
        ->check([](const std::string& v) {
          Result<CpuTarget> t = ParseCpuTarget(v);
          return t.ok() ? std::string() : t.status().message();
        });
    AddCpuTargetFlag(*cmd, value);
  }
}

Status ApplyCpuTargetFlag(const std::string& value) {
  if (value.empty()) return Status::Ok();
  return SetCpuTargetByName(value).Context("--cpu-target " + value);
}

}  // namespace chorus::cli
