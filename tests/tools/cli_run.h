// Runs the `chorus` binary (CHORUS_BIN) as a program for the CLI tests: exit code, stdout, stderr apart.
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace cli_test {

inline constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct CliRun {
  int code = -1;
  std::string out, err;
};

// Runs `chorus ARGS` (stdout and stderr captured apart).
inline CliRun Chorus(const std::string& args) {
  const std::string err_path = testing::TempDir() + "cli_test." + std::to_string(getpid()) + ".stderr";
  const std::string cmd = std::string(CHORUS_BIN) + " " + args + " 2>" + err_path;
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

inline nlohmann::json Json(const CliRun& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << r.out << "\n" << r.err;
    return {};
  }
}

}  // namespace cli_test
