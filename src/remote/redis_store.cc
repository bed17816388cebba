// RedisStore: the Redis connection thread, publication queue and pipelined fetches (see redis_store.h).
#include "remote/redis_store.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

timeval ToTimeval(std::chrono::microseconds d) {
  if (d.count() < 1000) d = std::chrono::microseconds(1000);  // hiredis: 0 means "block forever"
  return {.tv_sec = static_cast<time_t>(d.count() / 1000000), .tv_usec = static_cast<suseconds_t>(d.count() % 1000000)};
}

bool ParseInt(std::string_view s, int lo, int hi, int* out) {
  if (s.empty()) return false;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// The kind of a failed hiredis call: a socket timeout, or any other I/O or protocol failure.
std::string IoKind(const redisContext* c) {
  const bool timeout = c->err == REDIS_ERR_IO && (std::strstr(c->errstr, "temporarily unavailable") ||
                                                  std::strstr(c->errstr, "timed out"));
  return timeout ? "timeout" : "io";
}

std::string ErrorKind(std::string_view reply) {
  return reply.starts_with("NOAUTH") || reply.starts_with("WRONGPASS") || reply.starts_with("ERR AUTH") ||
                 reply.find("no password is set") != std::string_view::npos
             ? "auth"
             : "reply";
}

// A flag's file that cannot be opened for reading: an error naming the flag, the file and why.
Status CheckReadable(std::string_view flag, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error("{} {}: cannot read it: {}", flag, path, std::strerror(errno));
  return Status::Ok();
}

// OpenSSL's reason for the last failure ("" when its queue is empty), and the queue emptied.
std::string OpenSslReason() {
  const unsigned long e = ERR_peek_last_error();
  const char* reason = e ? ERR_reason_error_string(e) : nullptr;
  ERR_clear_error();
  return reason ? fmt::format(" ({})", reason) : "";
}

}  // namespace

std::string RedisUrl::Text() const {
  return fmt::format("{}://{}{}{}:{}/{}", tls ? "rediss" : "redis", user, user.empty() ? "" : "@", host, port, db);
}

Result<std::shared_ptr<const RedisTls>> RedisTls::Create(const RedisTlsOptions& o, const RedisUrl& url) {
  if (!o.ca_file.empty()) CHORUS_RETURN_IF_ERROR(CheckReadable("--kv-store-ca", o.ca_file));
  if (o.cert_file.empty() != o.key_file.empty())
    return Status::Error("--kv-store-cert and --kv-store-key go together (a client certificate and its key); got {}",
                         o.cert_file.empty() ? "--kv-store-key only" : "--kv-store-cert only");
  if (!o.cert_file.empty()) {
    CHORUS_RETURN_IF_ERROR(CheckReadable("--kv-store-cert", o.cert_file));
    CHORUS_RETURN_IF_ERROR(CheckReadable("--kv-store-key", o.key_file));
  }
  const std::string& name = o.server_name.empty() ? url.host : o.server_name;
  const auto c_str = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
  redisSSLOptions so{};
  so.cacert_filename = c_str(o.ca_file);
  so.cert_filename = c_str(o.cert_file);
  so.private_key_filename = c_str(o.key_file);
  so.server_name = name.c_str();
  so.verify_mode = REDIS_SSL_VERIFY_PEER;
  so.verify_name = name.c_str();
  ERR_clear_error();
  redisSSLContextError err = REDIS_SSL_CTX_NONE;
  redisSSLContext* ctx = redisCreateSSLContextWithOptions(&so, &err);
  if (ctx) return std::shared_ptr<const RedisTls>(new RedisTls(ctx));
  const std::string why = OpenSslReason();
  switch (err) {
    case REDIS_SSL_CTX_CA_CERT_LOAD_FAILED:
      return Status::Error("--kv-store-ca {}: no PEM CA certificate could be loaded from it{}", o.ca_file, why);
    case REDIS_SSL_CTX_CLIENT_DEFAULT_CERT_FAILED:
      return Status::Error("rediss:// without --kv-store-ca: the system's CA certificates could not be loaded{}", why);
    case REDIS_SSL_CTX_CLIENT_CERT_LOAD_FAILED:
      return Status::Error("--kv-store-cert {}: no PEM certificate could be loaded from it{}", o.cert_file, why);
    case REDIS_SSL_CTX_PRIVATE_KEY_LOAD_FAILED:
      return Status::Error("--kv-store-key {}: not a PEM private key, or not the key of --kv-store-cert {}{}",
                           o.key_file, o.cert_file, why);
    case REDIS_SSL_CTX_VERIFY_NAME_FAILED:
      return Status::Error("--kv-store-sni '{}': not a name or address a certificate can be verified against{}", name,
                           why);
    default: return Status::Error("rediss://: cannot create the TLS context: {}{}", redisSSLContextGetError(err), why);
  }
}

RedisTls::~RedisTls() { redisFreeSSLContext(ctx_); }

Result<RedisUrl> ParseRedisUrl(std::string_view url) {
  const auto bad = [&](std::string_view what) {
    return Status::Error(
        "malformed --kv-store URL '{}': {} (expected redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB], e.g. "
        "redis://127.0.0.1:6379/0; rediss:// is TLS)",
        url, what);
  };
  RedisUrl u;
  std::string_view rest;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("rediss://")) {
    rest = url.substr(9);
    u.tls = true;
  } else {
    return bad("it must start with redis:// or rediss://");
  }
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view cred = rest.substr(0, at);
    const size_t colon = cred.find(':');
    if (colon == std::string_view::npos || colon + 1 == cred.size())
      return bad("credentials must be :PASSWORD@ or USER:PASSWORD@");
    u.user = std::string(cred.substr(0, colon));
    for (char c : u.user)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
        return bad(fmt::format("character '{}' in the user name", c));
    u.password = std::string(cred.substr(colon + 1));
    rest = rest.substr(at + 1);
  }
  std::string_view hostport = rest, db;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    db = rest.substr(slash + 1);
    if (!ParseInt(db, 0, 1 << 20, &u.db)) return bad(fmt::format("database '{}' is not a number >= 0", db));
  }
  std::string_view host = hostport;
  if (const size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
    host = hostport.substr(0, colon);
    if (!ParseInt(hostport.substr(colon + 1), 1, 65535, &u.port))
      return bad(fmt::format("port '{}' is not in [1, 65535]", hostport.substr(colon + 1)));
  }
  if (host.empty()) return bad("the host is empty");
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
      return bad(fmt::format("the host '{}' has a character '{}' no host name has", host, c));
  u.host = std::string(host);
  return u;
}

RedisStore::RedisStore(const RedisStoreOptions& options, std::string* first_error)
    : options_(options), backoff_(options.backoff_min) {
  if (!Connect() && first_error) {
    std::lock_guard lock(mu_);
    *first_error = stats_.last_error;
  }
  thread_ = std::thread([this] { Run(); });
}

RedisStore::~RedisStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
  if (ctx_) redisFree(ctx_);
}

void RedisStore::CountError(const std::string& kind, const std::string& why) {
  stats_.errors[kind]++;
  stats_.last_error = why;
}

bool RedisStore::Connect() {
  const RedisUrl& u = options_.url;
  redisContext* c = redisConnectWithTimeout(u.host.c_str(), u.port, ToTimeval(options_.connect_timeout));
  std::string kind, why;
  if (!c || c->err) {
    kind = "connect";
    why = fmt::format("cannot connect to {}: {}", u.Text(), c ? c->errstr : "out of memory");
  } else if (u.tls && !options_.tls) {
    kind = "tls";
    why = fmt::format("{}: a rediss:// URL needs a TLS context (RedisStoreOptions::tls)", u.Text());
  } else if (u.tls && (redisSetTimeout(c, ToTimeval(options_.connect_timeout)),
                       redisInitiateSSLWithContext(c, options_.tls->context()) != REDIS_OK)) {
    // The handshake reads under the connect timeout: a server that never answers is a timeout.
    kind = "tls";
    why = fmt::format("TLS handshake with {} failed: {}{}", u.Text(), c->errstr,
                      std::strstr(c->errstr, "certificate verify failed")
                          ? " (the server's certificate is not signed by --kv-store-ca, or does not name the host "
                            "or --kv-store-sni)"
                          : " (does that port speak TLS?)");
  } else {
    // Credentials and database first, then PING: an error reply (auth required, wrong password,
    // no such database) means the store is unusable as configured.
    std::vector<std::vector<std::string>> cmds;
    if (!u.password.empty())
      cmds.push_back(u.user.empty() ? std::vector<std::string>{"AUTH", u.password}
                                    : std::vector<std::string>{"AUTH", u.user, u.password});
    if (u.db != 0) cmds.push_back({"SELECT", std::to_string(u.db)});
    cmds.push_back({"PING"});
    redisSetTimeout(c, ToTimeval(options_.connect_timeout));
    for (const auto& cmd : cmds) {
      std::vector<const char*> argv;
      std::vector<size_t> len;
      for (const std::string& a : cmd) argv.push_back(a.data()), len.push_back(a.size());
      auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), len.data()));
      if (!r) {
        kind = IoKind(c);
        // A TLS port drops a plaintext client at its first bytes; a Redis that wants a client
        // certificate drops a TLS client without one after the handshake.
        why = fmt::format("{} did not answer {}: {}{}", u.Text(), cmd[0], c->errstr,
                          kind == "timeout" ? ""
                          : u.tls           ? " (does it require a client certificate? --kv-store-cert, --kv-store-key)"
                                            : " (if that port speaks TLS, use rediss://)");
        break;
      }
      if (r->type == REDIS_REPLY_ERROR) {
        const std::string msg(r->str, r->len);
        kind = ErrorKind(msg);
        why = fmt::format("{} answered {} with an error: {}", u.Text(), cmd[0], msg);
      }
      freeReplyObject(r);
      if (!kind.empty()) break;
    }
  }
  std::lock_guard lock(mu_);
  if (!kind.empty()) {
    if (c) redisFree(c);
    CountError(kind, why);
    stats_.up = false;
    next_retry_ = Clock::now() + backoff_;
    // An answered error (auth) will not heal by itself soon: retry at the slowest pace.
    backoff_ = kind == "connect" || kind == "io" || kind == "timeout" || kind == "tls"
                   ? std::min(backoff_ * 2, options_.backoff_max)
                   : options_.backoff_max;
    return false;
  }
  ctx_ = c;
  stats_.up = true;
  stats_.connects++;
  backoff_ = options_.backoff_min;
  return true;
}

void RedisStore::Drop(const std::string& kind, const std::string& why) {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
  std::lock_guard lock(mu_);
  CountError(kind, why);
  stats_.up = false;
  next_retry_ = Clock::now() + backoff_;
}

bool RedisStore::Publish(std::string key, std::string value) {
  const size_t n = key.size() + value.size();
  {
    std::lock_guard lock(mu_);
    if (stop_ || queued_bytes_ + n > options_.queue_bytes) {
      stats_.publish_dropped++;
      return false;
    }
    queued_bytes_ += n;
    publish_.emplace_back(std::move(key), std::move(value));
  }
  work_cv_.notify_one();
  return true;
}

uint64_t RedisStore::StartFetch(std::vector<std::string> keys) {
  uint64_t t;
  {
    std::lock_guard lock(mu_);
    t = next_ticket_++;
    fetches_.push_back({t, std::move(keys), Clock::now()});
  }
  work_cv_.notify_one();
  return t;
}

std::vector<FetchResult> RedisStore::TakeResults() {
  std::lock_guard lock(mu_);
  return std::exchange(results_, {});
}

bool RedisStore::WaitResult(std::chrono::microseconds max) {
  std::unique_lock lock(mu_);
  return result_cv_.wait_for(lock, max, [&] { return !results_.empty(); });
}

RedisStoreStats RedisStore::Stats() const {
  std::lock_guard lock(mu_);
  RedisStoreStats s = stats_;
  s.queued_bytes = queued_bytes_;
  return s;
}

FetchResult RedisStore::DoFetch(const Fetch& f) {
  FetchResult r;
  r.ticket = f.ticket;
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(f.start + options_.fetch_timeout - Clock::now());
  if (!ctx_) {
    r.error_kind = "down";
    r.error = "the store is not connected";
  } else if (left.count() <= 0) {
    r.error_kind = "timeout";
    r.error = "the deadline passed before the fetch was sent";
    std::lock_guard lock(mu_);
    CountError(r.error_kind, r.error);
  } else {
    std::vector<const char*> argv{"MGET"};
    std::vector<size_t> len{4};
    for (const std::string& k : f.keys) argv.push_back(k.data()), len.push_back(k.size());
    redisSetTimeout(ctx_, ToTimeval(options_.fetch_timeout));  // per read: no progress for this long
    auto* rep = static_cast<redisReply*>(redisCommandArgv(ctx_, int(argv.size()), argv.data(), len.data()));
    if (!rep) {
      r.error_kind = IoKind(ctx_);
      r.error = fmt::format("MGET of {} keys: {}", f.keys.size(), ctx_->errstr);
      Drop(r.error_kind, r.error);  // the reply may still come: this connection is out of step
    } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements != f.keys.size()) {
      r.error_kind = rep->type == REDIS_REPLY_ERROR ? ErrorKind(std::string_view(rep->str, rep->len)) : "reply";
      r.error = rep->type == REDIS_REPLY_ERROR ? std::string(rep->str, rep->len) : "MGET answered no array of the keys";
      std::lock_guard lock(mu_);
      CountError(r.error_kind, r.error);
    } else {
      r.values.resize(f.keys.size());
      for (size_t i = 0; i < rep->elements; ++i)
        if (const redisReply* e = rep->element[i]; e->type == REDIS_REPLY_STRING) r.values[i].emplace(e->str, e->len);
    }
    if (rep) freeReplyObject(rep);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - f.start).count();
  return r;
}

void RedisStore::DoPublish(std::vector<std::pair<std::string, std::string>>& batch) {
  // Pipelined: every SET written, then every reply read.
  const std::string ttl = std::to_string(options_.ttl_seconds);
  for (const auto& [k, v] : batch) {
    const char* argv[] = {"SET", k.data(), v.data(), "EX", ttl.c_str()};
    const size_t len[] = {3, k.size(), v.size(), 2, ttl.size()};
    redisAppendCommandArgv(ctx_, options_.ttl_seconds ? 5 : 3, argv, len);
  }
  redisSetTimeout(ctx_, ToTimeval(options_.write_timeout));
  uint64_t ok = 0, bytes = 0;
  std::string kind, why;
  for (const auto& [k, v] : batch) {
    void* rv = nullptr;
    if (redisGetReply(ctx_, &rv) != REDIS_OK) {
      kind = IoKind(ctx_);
      why = fmt::format("SET: {}", ctx_->errstr);
      break;
    }
    auto* rep = static_cast<redisReply*>(rv);
    if (rep->type == REDIS_REPLY_ERROR) {
      kind = ErrorKind(std::string_view(rep->str, rep->len));
      why = fmt::format("SET: {}", std::string_view(rep->str, rep->len));
    } else {
      ++ok;
      bytes += v.size();
    }
    freeReplyObject(rep);
  }
  {
    std::lock_guard lock(mu_);
    stats_.published_values += ok;
    stats_.published_bytes += bytes;
    stats_.publish_dropped += batch.size() - ok;  // lost with the connection or refused
    if (!kind.empty() && kind != "io" && kind != "timeout") CountError(kind, why);
  }
  if (kind == "io" || kind == "timeout") Drop(kind, why);
}

void RedisStore::Run() {
  constexpr size_t kBatchBytes = size_t{1} << 20;  // publications per pipelined write
  for (;;) {
    std::vector<Fetch> fetches;
    std::vector<std::pair<std::string, std::string>> batch;
    {
      std::unique_lock lock(mu_);
      // Work: a fetch (answered at once, even while down), or publications and a connection —
      // or, down with publications waiting, the time of the next reconnection attempt.
      while (!stop_ && fetches_.empty()) {
        if (publish_.empty()) work_cv_.wait(lock);
        else if (ctx_ || Clock::now() >= next_retry_) break;
        else work_cv_.wait_until(lock, next_retry_);
      }
      if (stop_) return;
      fetches.assign(std::make_move_iterator(fetches_.begin()), std::make_move_iterator(fetches_.end()));
      fetches_.clear();
    }
    if (!ctx_ && Clock::now() >= next_retry_) Connect();
    std::vector<FetchResult> done;
    for (const Fetch& f : fetches) {  // fetches go before publications
      started_ = f.ticket;
      done.push_back(DoFetch(f));
    }
    if (!done.empty()) {
      {
        std::lock_guard lock(mu_);
        for (FetchResult& r : done) results_.push_back(std::move(r));
      }
      result_cv_.notify_all();
    }
    if (!ctx_) continue;
    {
      std::lock_guard lock(mu_);
      size_t bytes = 0;
      while (!publish_.empty() && bytes < kBatchBytes) {
        const size_t n = publish_.front().first.size() + publish_.front().second.size();
        bytes += n;
        queued_bytes_ -= n;
        batch.push_back(std::move(publish_.front()));
        publish_.pop_front();
      }
    }
    if (!batch.empty()) DoPublish(batch);
  }
}

}  // namespace chorus
