// What the benchmarks run beside chorus: the llama.cpp peer (scripts/ref/, llama-cpp-python or
// llama.cpp's own tools), and the process's resident memory.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace chorus::eval {

// Runs a llama.cpp reference script (scripts/ref/, llama-cpp-python) and parses the JSON object it
// prints; the error names the command and says how to install the peer.
Result<nlohmann::json> RunPeerJson(const std::string& command);
// llama.cpp at its best when its own tools are built, else llama-cpp-python: runs best_cmd (a
// scripts/ref/*_best.py over llama-bench / llama-batched-bench) and keeps its JSON if `usable` accepts
// it; otherwise (tools not built, a failed run, no usable row) runs fallback_cmd and sets *note to why
// and what the fallback is (fallback_what). An empty best_cmd runs the fallback alone, note empty.
Result<nlohmann::json> RunBestPeerJson(const std::string& best_cmd, const std::string& fallback_cmd,
                                       const std::string& fallback_what, std::string* note,
                                       const std::function<bool(const nlohmann::json&)>& usable = {});
// Current resident set size of this process in bytes (from /proc/self/status), 0 if unknown.
size_t ResidentBytes();

}  // namespace chorus::eval
