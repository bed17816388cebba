// RemotePrefetcher: the remote block store's publications and fetches (remote_prefetcher.h).
#include "engine/remote_prefetcher.h"

#include <fmt/format.h>

#include <algorithm>

#include "kv/block_codec.h"    // SerializeBlock, ParseBlock
#include "remote/value_mac.h"  // SealValue, OpenValue

namespace chorus {
namespace {

// Upper bounds (seconds) of the fetch latency histogram.
const std::vector<double> kFetchBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0};

// An engine-side deadline for a fetch the store's thread has not begun (stuck behind a slow
// publication), so no request waits in that queue past it.
constexpr double kFetchGraceSeconds = 0.05;

}  // namespace

void RemotePrefetcher::RemoteLog(const std::string& msg) const {
  if (core_.options.kv_store_log) core_.options.kv_store_log(msg);
}

Status RemotePrefetcher::Open() {
  const EngineOptions& options = core_.options;
  const ComixPolicy* comix = core_.comix.get();
  if (options.kv_store_url.empty()) return Status::Ok();
  CHORUS_ASSIGN_OR_RETURN(RedisUrl url, ParseRedisUrl(options.kv_store_url));
  if (comix || !options.policy.is_uniform())
    return Status::Error(
        "--kv-store works with the uniform policies only (a block's formats must be the same on every "
        "replica); policy '{}' decides them per replica",
        FormatSpec(options.policy));
  if (options.kv_store_timeout_ms < 1 || options.kv_store_timeout_ms > 60000)
    return Status::Error("kv-store timeout must be in [1, 60000] ms, got {}", options.kv_store_timeout_ms);
  if (options.kv_store_queue_bytes < (size_t{1} << 20))
    return Status::Error("kv-store queue must be at least 1 MiB, got {} bytes", options.kv_store_queue_bytes);
  RedisStoreOptions ro{.url = url,
                       .fetch_timeout = std::chrono::milliseconds(options.kv_store_timeout_ms),
                       .queue_bytes = options.kv_store_queue_bytes};
  const RedisTlsOptions tls{.ca_file = options.kv_store_ca,
                            .cert_file = options.kv_store_cert,
                            .key_file = options.kv_store_key,
                            .server_name = options.kv_store_sni};
  if (url.tls) {
    CHORUS_ASSIGN_OR_RETURN(ro.tls, RedisTls::Create(tls, url));
  } else if (!tls.ca_file.empty() || !tls.cert_file.empty() || !tls.key_file.empty() || !tls.server_name.empty()) {
    return Status::Error(
        "--kv-store-ca, --kv-store-cert, --kv-store-key and --kv-store-sni are for TLS: the URL "
        "{} is plaintext (use rediss://)",
        url.Text());
  }
  std::string first_error;
  remote_ = std::make_unique<RedisStore>(ro, &first_error);
  counters_.enabled = true;
  counters_.fetch_bounds = kFetchBounds;
  counters_.fetch_counts.assign(kFetchBounds.size() + 1, 0);
  if (!first_error.empty())
    RemoteLog(fmt::format("warning: kv-store {}: {}; serving without it (retrying in the background)", url.Text(),
                          first_error));
  else
    RemoteLog(fmt::format("kv-store {}: connected", url.Text()));
  return Status::Ok();
}

std::string RemotePrefetcher::RemoteKey(uint64_t key, const Scope& scope) const {
  return fmt::format("chorus:kv2:{:016x}:{:016x}:{:016x}", core_.salt, scope.id, key);
}

void RemotePrefetcher::PublishBlock(uint64_t key, size_t index, std::span<const BlockId> ids, const Scope& scope) {
  if (!remote_) return;
  for (BlockId id : ids)
    if (id == kNoBlock) return;  // a sliding-window layer freed it: not a whole block
  const ModelConfig& c = core_.model->config();
  const KvGeometry g = core_.store->geometry();
  const BlockIdentity bid{.model = core_.model_fp,
                          .salt = core_.salt,
                          .scope = scope.id,
                          .key = key,
                          .index = static_cast<uint32_t>(index),
                          .geometry = g,
                          .n_layer = c.n_layer};
  const std::string name = RemoteKey(key, scope);
  std::string value = SerializeBlock(bid, core_.store->pool(), ids);
  if (!core_.options.kv_store_secret.empty()) value = SealValue(core_.options.kv_store_secret, name, value);
  remote_->Publish(name, std::move(value));  // a full queue counts the drop
}

bool RemotePrefetcher::MaybeFetch(AgentId id, Request& a, size_t k) {
  if (!remote_ || a.fetch.checked) return a.fetch.ticket != 0;
  a.fetch.checked = true;
  const size_t want = (a.prompt.size() - 1) / kBlockTokens;  // at least one token is computed
  if (k >= want || !remote_->Stats().up) return false;       // down: serve locally at once
  PendingFetch f;
  f.agent = id;
  f.keys.assign(a.keys.begin() + k, a.keys.begin() + want);
  f.first_block = k;
  f.parent = k ? a.keys[k - 1] : 0;
  f.scope = a.scope;
  std::vector<std::string> names;
  names.reserve(f.keys.size());
  for (uint64_t key : f.keys) names.push_back(RemoteKey(key, f.scope));
  a.fetch.ticket = remote_->StartFetch(std::move(names));
  core_.cache->MarkPending(id, f.keys);  // requests with the same prefix wait for these, not compute them
  fetches_.emplace(a.fetch.ticket, std::move(f));
  return true;
}

void RemotePrefetcher::CollectFetches(const FindRequest& find, const MakeRoom& make_room) {
  if (!remote_) return;
  const ModelConfig& c = core_.model->config();
  const size_t L = c.n_layer;
  const KvGeometry g = core_.store->geometry();
  EngineStats::Remote& rc = counters_;
  const auto release = [&](const PendingFetch& f) {
    if (Request* a = find(f.agent)) a->fetch.ticket = 0;
    core_.cache->ClearPending(f.agent);
  };
  for (FetchResult& r : remote_->TakeResults()) {
    auto fit = fetches_.find(r.ticket);
    if (fit == fetches_.end()) continue;  // given up on at its deadline
    PendingFetch f = std::move(fit->second);
    fetches_.erase(fit);
    release(f);
    rc.fetches++;
    rc.fetch_seconds_sum += r.seconds;
    rc.fetch_counts[std::lower_bound(kFetchBounds.begin(), kFetchBounds.end(), r.seconds) - kFetchBounds.begin()]++;
    size_t hits = 0, local = 0;
    // The run of verified blocks from the first asked (each continues the one before it); the
    // first absent, rejected or unplaceable block ends it: the rest is computed here.
    std::vector<BlockId> ids;
    for (size_t i = 0; i < r.values.size() && r.values[i]; ++i) {
      const size_t j = f.first_block + i;
      const uint64_t key = f.keys[i], parent = i ? f.keys[i - 1] : f.parent;
      if (core_.cache->Blocks(key)) {  // computed here meanwhile: neither a hit nor a miss
        ++local;
        continue;
      }
      if (parent != 0 && !core_.cache->Blocks(parent)) break;
      const KvFormat kf = j < core_.shared_cfg.sink_blocks ? KvFormat::kF16 : core_.shared_cfg.k;
      const KvFormat vf = j < core_.shared_cfg.sink_blocks ? KvFormat::kF16 : core_.shared_cfg.v;
      const BlockIdentity bid{.model = core_.model_fp,
                              .salt = core_.salt,
                              .scope = f.scope.id,
                              .key = key,
                              .index = static_cast<uint32_t>(j),
                              .geometry = g,
                              .n_layer = L};
      std::optional<std::string_view> bytes = *r.values[i];
      if (const std::string& secret = core_.options.kv_store_secret; !secret.empty())
        bytes = OpenValue(secret, RemoteKey(key, f.scope), *r.values[i]);
      if (!bytes) {
        rc.errors["mac"]++;
        RemoteLog(
            fmt::format("warning: kv-store block {} ({}) rejected: its MAC does not match this replica's "
                        "--kv-store-secret-file; computing it here",
                        j, RemoteKey(key, f.scope)));
        break;
      }
      const BlockParse p = ParseBlock(*bytes, bid, kf, vf);
      if (!p.ok()) {
        rc.errors[std::string(BlockRejectName(p.reject))]++;
        RemoteLog(fmt::format("warning: kv-store block {} ({}) rejected: {}; computing it here", j,
                              RemoteKey(key, f.scope), p.why));
        break;
      }
      size_t cost = 0;
      for (size_t l = 0; l < L; ++l) cost += BlockPool::BlockCost(p.block.k[l].size(), p.block.v[l].size());
      std::string why;
      if (!make_room(cost, &why) || (parent != 0 && !core_.cache->Blocks(parent))) {  // room may evict the parent
        rc.errors["budget"]++;
        break;
      }
      ids.clear();
      for (size_t l = 0; l < L; ++l) {
        Result<BlockId> b =
            core_.store->AdoptBlock(p.block.k_format[l], p.block.k[l], p.block.v_format[l], p.block.v[l]);
        if (!b.ok()) break;
        ids.push_back(*b);
      }
      const bool whole = ids.size() == L && core_.cache->Insert(key, parent, ids, f.scope.id);
      for (BlockId b : ids) core_.store->pool().Unref(b);  // the cache holds its own reference
      if (!whole) {
        rc.errors["budget"]++;
        break;
      }
      ++hits;
      rc.fetched_bytes += r.values[i]->size();
    }
    rc.hits += hits;
    rc.misses += f.keys.size() - hits - local;
  }
  // Fetches still queued past their deadline (the store's thread stuck behind a slow write): given
  // up. One on the wire is the socket timeout's (no byte from Redis for the deadline fails it).
  const double limit = core_.options.kv_store_timeout_ms / 1000.0 + kFetchGraceSeconds;
  const uint64_t started = remote_->started();
  for (auto it = fetches_.begin(); it != fetches_.end();) {
    if (it->first <= started || it->second.timer.Seconds() < limit) {
      ++it;
      continue;
    }
    release(it->second);
    rc.errors["deadline"]++;
    rc.misses += it->second.keys.size();
    it = fetches_.erase(it);
  }
}

void RemotePrefetcher::WaitForFetch() {
  if (remote_ && !fetches_.empty()) remote_->WaitResult(std::chrono::milliseconds(5));
}

EngineStats::Remote RemotePrefetcher::Stats() const {
  if (!remote_) return {};
  EngineStats::Remote s = counters_;  // the engine's counters and the store thread's
  const RedisStoreStats rs = remote_->Stats();
  s.up = rs.up;
  s.published_bytes = rs.published_bytes;
  s.published_blocks = rs.published_values;
  s.publish_dropped = rs.publish_dropped;
  for (const auto& [kind, n] : rs.errors) s.errors[kind] += n;
  return s;
}

}  // namespace chorus
