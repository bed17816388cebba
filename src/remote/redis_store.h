// RedisStore: a remote byte store for sealed KV blocks, over one hiredis connection driven by its
// own thread. The engine thread never touches the socket: Publish() queues a value (bounded by
// bytes; a full queue drops it and counts the drop), StartFetch() queues one pipelined MGET of
// chained keys whose result comes back through TakeResults() (deadline per fetch, enforced by the
// socket timeout). A lost connection is retried with exponential backoff; while it is down,
// fetches fail at once ("down") and publications wait in the queue. rediss:// connects over TLS
// (hiredis_ssl): the handshake is part of the connection, bounded by connect_timeout, and verifies
// the server's certificate chain and name; a failure is counted as kind "tls" and retried.
// Invariants: every StartFetch ticket gets exactly one FetchResult (unless the store is destroyed
// first); queued_bytes() <= options.queue_bytes; a fetch is answered before any publication
// queued with it is written.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "util/status.h"  // Result

struct redisContext;
struct redisSSLContext;

namespace chorus {

// redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]: USER is a Redis 6 ACL user (AUTH USER PASSWORD),
// none = the default user (AUTH PASSWORD); rediss:// = TLS.
struct RedisUrl {
  bool tls = false;
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;
  std::string password;
  std::string Text() const;  // the URL without the password (the user is shown)
};
// A malformed URL is an error naming the part that is wrong and the expected form.
Result<RedisUrl> ParseRedisUrl(std::string_view url);

// The client side of rediss://: files in PEM. Empty ca_file: the system's trust store. A client
// certificate needs both cert_file and key_file. server_name (empty: the URL's host) is sent as
// SNI and must be a name (or IP address) the server's certificate carries.
struct RedisTlsOptions {
  std::string ca_file, cert_file, key_file, server_name;
};

// An OpenSSL client context with the CA and the client certificate loaded, shared by connections.
class RedisTls {
 public:
  // An unreadable file, a file that is not the PEM it should be, a key that does not match the
  // certificate: an error naming the flag (--kv-store-ca, --kv-store-cert, --kv-store-key) and file.
  static Result<std::shared_ptr<const RedisTls>> Create(const RedisTlsOptions& options, const RedisUrl& url);
  ~RedisTls();
  RedisTls(const RedisTls&) = delete;
  RedisTls& operator=(const RedisTls&) = delete;
  redisSSLContext* context() const { return ctx_; }

 private:
  explicit RedisTls(redisSSLContext* ctx) : ctx_(ctx) {}
  redisSSLContext* ctx_;
};

struct RedisStoreOptions {
  RedisUrl url;
  // A fetch fails when it waited this long to be sent (queued behind writes), or when Redis sends
  // nothing for this long once it is sent (the socket timeout: a large reply that keeps coming
  // is not cut off).
  std::chrono::milliseconds fetch_timeout{200};
  std::chrono::milliseconds connect_timeout{300};
  std::chrono::milliseconds write_timeout{1000};   // a batch of publications
  std::chrono::milliseconds backoff_min{100}, backoff_max{2000};
  size_t queue_bytes = size_t{64} << 20;            // publications waiting to be written
  uint32_t ttl_seconds = 0;                        // SET ... EX ttl (0: none; maxmemory eviction is fine too)
  std::shared_ptr<const RedisTls> tls;             // required by a rediss:// URL, unused otherwise
};

struct FetchResult {
  uint64_t ticket = 0;
  // (keys) the value of each key, nullopt where Redis holds none; empty when the fetch failed.
  std::vector<std::optional<std::string>> values;
  std::string error_kind;  // "" ok; "down", "timeout", "io", "auth", "reply"
  std::string error;
  double seconds = 0;      // from StartFetch to the reply (or the failure)
};

struct RedisStoreStats {
  bool up = false;
  uint64_t published_values = 0, published_bytes = 0, publish_dropped = 0;
  uint64_t connects = 0;
  std::map<std::string, uint64_t> errors;  // by kind: connect, tls, auth, io, timeout, reply
  std::string last_error;
  size_t queued_bytes = 0;
};

class RedisStore {
 public:
  // Starts the thread and makes the first connection attempt before returning; *first_error says
  // why it failed (the store keeps retrying in the background, and the caller serves locally).
  RedisStore(const RedisStoreOptions& options, std::string* first_error);
  ~RedisStore();
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  // Queues SET key value; false (and counted) when the queue has no room for it.
  bool Publish(std::string key, std::string value);
  // Queues MGET keys...; the result comes back through TakeResults with this ticket.
  uint64_t StartFetch(std::vector<std::string> keys);
  std::vector<FetchResult> TakeResults();
  // Waits until a result is ready or `max` passed; true if one is ready.
  bool WaitResult(std::chrono::microseconds max);
  RedisStoreStats Stats() const;
  // The last ticket the thread has begun sending (tickets are served in order): a fetch at or
  // below it is on the wire, governed by the socket timeout; above it, still queued.
  uint64_t started() const { return started_.load(); }
  const RedisStoreOptions& options() const { return options_; }

 private:
  struct Fetch {
    uint64_t ticket;
    std::vector<std::string> keys;
    std::chrono::steady_clock::time_point start;
  };
  void Run();
  bool Connect();                     // worker thread; false: ctx_ stays null, error counted
  void Drop(const std::string& kind, const std::string& why);  // closes the connection, counts
  FetchResult DoFetch(const Fetch& f);
  void DoPublish(std::vector<std::pair<std::string, std::string>>& batch);
  void CountError(const std::string& kind, const std::string& why);  // under mu_

  const RedisStoreOptions options_;
  redisContext* ctx_ = nullptr;  // worker thread only (and the constructor, before it starts)
  std::chrono::steady_clock::time_point next_retry_{};
  std::chrono::milliseconds backoff_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, result_cv_;
  bool stop_ = false;
  std::deque<std::pair<std::string, std::string>> publish_;
  size_t queued_bytes_ = 0;
  std::deque<Fetch> fetches_;
  std::vector<FetchResult> results_;
  uint64_t next_ticket_ = 1;
  std::atomic<uint64_t> started_{0};
  RedisStoreStats stats_;
  std::thread thread_;
};

}  // namespace chorus
