// chorus::Serve (chorus/server.h), `chorus serve` in one call, on the tiny random-weight model: bad
// settings are refused before serving with the message `chorus serve` prints; a good one serves
// /v1/models under the model's file name until SIGTERM, then returns Ok.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "../model/synthetic_model.h"
#include "chorus/server.h"

namespace chorus {
namespace {

// The tiny model written to a temporary file named `stem`.gguf (removed by the destructor).
struct TinyFile {
  std::string stem, path;
  explicit TinyFile(std::string s) : stem(s + "_" + std::to_string(getpid())) {
    path = std::string(::testing::TempDir()) + "/" + stem + ".gguf";
    EXPECT_TRUE(testing::SyntheticModel(testing::TinySpec("serve")).WriteFile(path).ok());
  }
  ~TinyFile() { std::remove(path.c_str()); }
};

ServeConfig Config(const std::string& model) {
  ServeConfig c;
  c.engine.model_path = model;
  c.engine.threads = 2;
  c.engine.n_ctx = 256;
  c.http.port = 0;
  c.http.default_max_tokens = 16;
  c.embedding_model = "";
  return c;
}

// A TCP port free now on loopback.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t n = sizeof a;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n), 0);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(ServeTest, RefusesBadSettingsBeforeServing) {
  TinyFile model("serve_bad");
  ServeConfig c = Config(model.path);
  c.prefill_chunk = 33;
  EXPECT_EQ(Serve(c).message(), "--prefill-chunk must be a positive multiple of 32, got 33");

  c = Config(model.path);
  c.http.api_keys_file = "/nonexistent/keys.txt";
  Status s = Serve(c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/keys.txt"), std::string::npos) << s.message();

  c = Config(model.path);
  c.engine.kv_budget_bytes = 1024;
  c.budget_text = "1K";
  s = Serve(c);
  EXPECT_EQ(s.message().rfind("--kv-budget 1K is too small for one request: a 32-token prompt with the default 16 "
                              "answer tokens needs about ",
                              0),
            0u)
      << s.message();

  c = Config(model.path + ".missing");
  EXPECT_FALSE(Serve(c).ok());

  c = Config(model.path);
  c.embedding_model = "/nonexistent/encoder";
  s = Serve(c);
  EXPECT_EQ(s.message().rfind("--embedding-model: ", 0), 0u) << s.message();
}

TEST(ServeTest, ServesUntilSigterm) {
  // SIGTERM blocked here first, so the one Serve waits for is the only thread that takes it.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &sigs, nullptr), 0);
  TinyFile model("serve_ok");
  ServeConfig c = Config(model.path);
  c.http.port = FreePort();
  c.budget_text = "2G";
  c.engine.kv_budget_bytes = size_t{2} << 30;
  Status served = Status::Error("not returned");
  std::thread server([&] { served = Serve(c); });
  httplib::Client client("127.0.0.1", c.http.port);
  auto r = client.Get("/v1/models");
  for (int i = 0; i < 200 && !r; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r = client.Get("/v1/models");
  }
  ASSERT_TRUE(r) << "no answer on port " << c.http.port;
  EXPECT_EQ(r->status, 200);
  const nlohmann::json j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["data"][0]["id"], model.stem);  // the file name without .gguf
  EXPECT_EQ(j["data"][0]["context_length"], 256);
  kill(getpid(), SIGTERM);
  server.join();
  EXPECT_TRUE(served.ok()) << served.message();
  EXPECT_FALSE(client.Get("/v1/models"));  // stopped listening
}

}  // namespace
}  // namespace chorus
