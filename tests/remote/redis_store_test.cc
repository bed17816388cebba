// RedisStore without a Redis: URL parsing (every malformed form named), the TLS context's flag
// errors (each names its flag and file), and a store whose server
// is not there (a closed loopback port): it says why at start, answers fetches at once as "down",
// keeps publications queued within its byte bound and counts what it drops. The behaviour against
// a real redis-server is tested end to end by tests/e2e/kv_store_test.py (TLS:
// kv_store_tls_test.py).
#include "remote/redis_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <tuple>

namespace chorus {
namespace {

TEST(RedisUrl, ParsesHostPortDbAndPassword) {
  auto u = ParseRedisUrl("redis://127.0.0.1:6380/2");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 2);
  EXPECT_TRUE(u->password.empty());
  u = ParseRedisUrl("redis://cache.internal");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->db, 0);
  u = ParseRedisUrl("redis://:p@ss@10.0.0.5:7000/0");  // the last @ ends the password
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->password, "p@ss");
  EXPECT_EQ(u->host, "10.0.0.5");
  EXPECT_EQ(u->Text().find("p@ss"), std::string::npos);  // never printed
  u = ParseRedisUrl("redis://replica-7:s3cret@10.0.0.5/1");  // a Redis 6 ACL user
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->user, "replica-7");
  EXPECT_EQ(u->password, "s3cret");
  EXPECT_EQ(u->Text(), "redis://replica-7@10.0.0.5:6379/1");
}

TEST(RedisUrl, RedissIsTls) {
  auto u = ParseRedisUrl("rediss://replica:pw@cache.internal:6380/1");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "cache.internal");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->Text(), "rediss://replica@cache.internal:6380/1");
  u = ParseRedisUrl("redis://cache.internal");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->tls);
  EXPECT_FALSE(ParseRedisUrl("redisss://h").ok());
  EXPECT_FALSE(ParseRedisUrl("rediss:/h").ok());
}

TEST(RedisTls, FlagErrorsNameTheFlagAndFile) {
  const RedisUrl url{.tls = true, .host = "127.0.0.1"};
  const std::tuple<RedisTlsOptions, const char*, const char*> cases[] = {
      {{.ca_file = "/nonexistent/ca.pem"}, "--kv-store-ca /nonexistent/ca.pem", "cannot read it"},
      {{.ca_file = "/proc/self/status"}, "--kv-store-ca /proc/self/status", "no PEM CA certificate"},
      {{.cert_file = "/proc/self/status"}, "--kv-store-key", "go together"},
      {{.key_file = "/proc/self/status"}, "--kv-store-cert", "go together"},
      {{.cert_file = "/nonexistent/c.pem", .key_file = "/proc/self/status"},
       "--kv-store-cert /nonexistent/c.pem",
       "cannot read it"},
      {{.cert_file = "/proc/self/status", .key_file = "/proc/self/status"},
       "--kv-store-cert /proc/self/status",
       "no PEM certificate"},
  };
  for (const auto& [o, flag, what] : cases) {
    auto t = RedisTls::Create(o, url);
    ASSERT_FALSE(t.ok()) << flag;
    EXPECT_NE(t.status().message().find(flag), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find(what), std::string::npos) << t.status().message();
  }
  // No CA file: the system's trust store, which loads (or is empty) without an error.
  EXPECT_TRUE(RedisTls::Create({}, url).ok());
}

// Catches a parser that accepts a typo and then connects somewhere else (or to port 0).
TEST(RedisUrl, MalformedIsAnErrorNamingThePart) {
  const std::pair<const char*, const char*> cases[] = {
      {"http://127.0.0.1:6379", "redis://"}, {"redis://", "host is empty"},
      {"redis://:6379", "host is empty"},    {"redis://h:0", "port '0'"},
      {"redis://h:99999", "port '99999'"},   {"redis://h:63x9", "port '63x9'"},
      {"redis://h:6379/x", "database 'x'"},  {"redis://h:6379/-1", "database '-1'"},
      {"redis://us er:pw@h", "user name"},   {"redis://pw@h", ":PASSWORD@"},
      {"redis://h h:1", "character ' '"},    {"redis://h:", "port ''"},
  };
  for (const auto& [url, what] : cases) {
    auto u = ParseRedisUrl(url);
    ASSERT_FALSE(u.ok()) << url;
    EXPECT_NE(u.status().message().find("malformed --kv-store URL"), std::string::npos) << u.status().message();
    EXPECT_NE(u.status().message().find(what), std::string::npos) << url << ": " << u.status().message();
  }
}

// A loopback port nothing listens on (bound, then closed).
int ClosedPort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  close(s);
  return ntohs(a.sin_port);
}

TEST(RedisStore, UnreachableServerIsDownNotFatal) {
  RedisStoreOptions o{.url = {.host = "127.0.0.1", .port = ClosedPort()}, .queue_bytes = 1000};
  std::string why;
  RedisStore store(o, &why);
  EXPECT_NE(why.find("cannot connect"), std::string::npos) << why;
  RedisStoreStats s = store.Stats();
  EXPECT_FALSE(s.up);
  EXPECT_EQ(s.errors["connect"], 1u);
  // A fetch is answered at once, not after the deadline.
  const uint64_t t = store.StartFetch({"a", "b"});
  ASSERT_TRUE(store.WaitResult(std::chrono::seconds(5)));
  std::vector<FetchResult> r = store.TakeResults();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ticket, t);
  EXPECT_EQ(r[0].error_kind, "down");
  EXPECT_TRUE(r[0].values.empty());
  EXPECT_LT(r[0].seconds, 0.2);
  // Publications wait (bounded by bytes); beyond the bound they are dropped and counted.
  EXPECT_TRUE(store.Publish("k1", std::string(600, 'x')));
  EXPECT_FALSE(store.Publish("k2", std::string(600, 'x')));
  s = store.Stats();
  EXPECT_EQ(s.publish_dropped, 1u);
  EXPECT_EQ(s.queued_bytes, 602u);
  EXPECT_EQ(s.published_values, 0u);
}

// A rediss:// store given no TLS context (a caller's mistake) is an error at connection, not a
// plaintext connection to a TLS port.
// A listening loopback socket (fd, port): TCP connections succeed (the kernel's backlog) and
// nothing ever answers.
std::pair<int, int> SilentServer() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(s, 4);
  socklen_t n = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  return {s, ntohs(a.sin_port)};
}

TEST(RedisStore, RedissWithoutTlsContextDoesNotConnect) {
  const auto [fd, port] = SilentServer();
  RedisStoreOptions o{.url = {.tls = true, .host = "127.0.0.1", .port = port}};
  std::string why;
  {
    RedisStore store(o, &why);
    EXPECT_FALSE(store.Stats().up);
    EXPECT_EQ(store.Stats().errors["tls"], 1u);
  }
  close(fd);
  EXPECT_NE(why.find("needs a TLS context"), std::string::npos) << why;
}

// A TLS handshake with a server that accepts and never answers ends at the connect timeout: the
// constructor (and so `chorus serve`'s start) does not hang.
TEST(RedisStore, SilentTlsServerTimesOutTheHandshake) {
  const auto [fd, port] = SilentServer();
  RedisStoreOptions o{.url = {.tls = true, .host = "127.0.0.1", .port = port},
                      .connect_timeout = std::chrono::milliseconds(200)};
  auto tls = RedisTls::Create({}, o.url);
  ASSERT_TRUE(tls.ok()) << tls.status().message();
  o.tls = *tls;
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  {
    RedisStore store(o, &why);
    EXPECT_FALSE(store.Stats().up);
    EXPECT_EQ(store.Stats().errors["tls"], 1u);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  EXPECT_LT(s, 2.0);
  EXPECT_NE(why.find("TLS handshake"), std::string::npos) << why;
}

}  // namespace
}  // namespace chorus
