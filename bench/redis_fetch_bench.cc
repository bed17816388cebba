// The cost of TLS on a block fetch: RedisStore fetches of the same values from one redis-server
// through its plaintext port and its TLS port, interleaved, for 1 block and for many in one MGET.
// scripts/bench_redis_tls.sh starts the server with a throwaway CA and runs this
// (docs/results/tenants.md).
// Usage: redis_fetch_bench PLAIN_PORT TLS_PORT CA_FILE [BLOCKS] [VALUE_BYTES] [REPS]
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "remote/redis_store.h"

namespace {

using chorus::RedisStore;

// One fetch of `keys`: its seconds (StartFetch to reply), or exit on a failed fetch.
double Fetch(RedisStore& store, const std::vector<std::string>& keys) {
  store.StartFetch(keys);
  while (!store.WaitResult(std::chrono::seconds(10))) {}
  std::vector<chorus::FetchResult> r = store.TakeResults();
  if (r.size() != 1 || !r[0].error_kind.empty() || r[0].values.size() != keys.size() || !r[0].values.back()) {
    fmt::print(stderr, "fetch failed: {} {}\n", r.empty() ? "no result" : r[0].error_kind, r.empty() ? "" : r[0].error);
    std::exit(1);
  }
  return r[0].seconds;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: {} PLAIN_PORT TLS_PORT CA_FILE [BLOCKS] [VALUE_BYTES] [REPS]\n", argv[0]);
    return 2;
  }
  const int plain_port = std::atoi(argv[1]), tls_port = std::atoi(argv[2]);
  const size_t blocks = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 55;
  const size_t value_bytes = argc > 5 ? std::strtoul(argv[5], nullptr, 10) : 183488;
  const int reps = argc > 6 ? std::atoi(argv[6]) : 40;
  chorus::RedisStoreOptions po{.url = {.host = "127.0.0.1", .port = plain_port},
                               .fetch_timeout = std::chrono::seconds(5)};
  chorus::RedisStoreOptions to = po;
  to.url = {.tls = true, .host = "127.0.0.1", .port = tls_port};
  auto tls = chorus::RedisTls::Create({.ca_file = argv[3]}, to.url);
  if (!tls.ok()) {
    fmt::print(stderr, "{}\n", tls.status().message());
    return 1;
  }
  to.tls = *tls;
  std::string why;
  RedisStore plain(po, &why), secure(to, &why);
  if (!why.empty()) {
    fmt::print(stderr, "{}\n", why);
    return 1;
  }
  std::vector<std::string> keys;
  for (size_t i = 0; i < blocks; ++i) {
    keys.push_back(fmt::format("chorus:bench:{}", i));
    plain.Publish(keys.back(), std::string(value_bytes, static_cast<char>('a' + i % 26)));
  }
  while (plain.Stats().published_values < blocks) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  fmt::print("{} values of {} bytes; {} interleaved fetches each (median / p90 ms)\n", blocks, value_bytes, reps);
  for (size_t n : {size_t{1}, blocks}) {
    const std::vector<std::string> ks(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n));
    Fetch(plain, ks), Fetch(secure, ks);  // warm: the connection, the server's buffers
    std::vector<double> p, s;
    for (int r = 0; r < reps; ++r) {
      if (r % 2) {
        p.push_back(Fetch(plain, ks));
        s.push_back(Fetch(secure, ks));
      } else {
        s.push_back(Fetch(secure, ks));
        p.push_back(Fetch(plain, ks));
      }
    }
    fmt::print(
        "MGET of {:3} ({:.1f} MB): plaintext {:.3f} / {:.3f}, TLS {:.3f} / {:.3f}, TLS/plaintext median {:.2f}x\n", n,
        static_cast<double>(n * value_bytes) / 1e6, 1e3 * Quantile(p, 0.5), 1e3 * Quantile(p, 0.9),
        1e3 * Quantile(s, 0.5), 1e3 * Quantile(s, 0.9), Quantile(s, 0.5) / Quantile(p, 0.5));
  }
  return 0;
}
