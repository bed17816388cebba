// The llama.cpp peer runner and the process's resident memory (see peer.h).
#include "eval/peer.h"

#include <cstdio>
#include <fstream>

namespace chorus::eval {

size_t ResidentBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

Result<nlohmann::json> RunPeerJson(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (!p) return Status::Error("cannot start the llama.cpp peer: {}", command);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0)
    return Status::Error(
        "the llama.cpp peer failed (exit {}); is llama-cpp-python installed? "
        "(scripts/setup.sh --with-peer). Command: {}",
        rc, command);
  const size_t brace = out.find('{');
  if (brace == std::string::npos) return Status::Error("the llama.cpp peer printed no JSON: {}", command);
  try {
    return nlohmann::json::parse(out.substr(brace));
  } catch (const std::exception& e) {
    return Status::Error("cannot parse the peer's output ({}): {}", e.what(), command);
  }
}

Result<nlohmann::json> RunBestPeerJson(const std::string& best_cmd, const std::string& fallback_cmd,
                                       const std::string& fallback_what, std::string* note,
                                       const std::function<bool(const nlohmann::json&)>& usable) {
  note->clear();
  if (!best_cmd.empty()) {
    auto r = RunPeerJson(best_cmd);
    if (r.ok() && (!usable || usable(r.value()))) return r;
    *note = "llama.cpp's own tools not used (" +
            (r.ok() ? std::string("no usable row in their output") : r.status().message()) +
            "); peer = " + fallback_what;
  }
  return RunPeerJson(fallback_cmd);
}

}  // namespace chorus::eval
