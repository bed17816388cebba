// RemotePrefetcher: the engine's side of the remote block store (EngineOptions::kv_store_url).
// Prompt blocks sealed here are serialized (kv/block_codec.h) and published under
// "chorus:kv2:<salt>:<scope>:<chained key>" (the request's sharing scope, also in each value's
// header: a block is never read under another scope); a request whose leading blocks are not cached here is held in
// the queue while one pipelined MGET asks for them on the store's thread, and the verified blocks
// are installed into the prefix cache exactly as if computed here — the request then borrows them
// at admission and prefills only the rest. Nothing here blocks a decode step: the engine thread
// only queues and collects. Invariants: a fetch in flight is in `fetches_` by ticket, its request
// holds the ticket (Request::fetch) and the prefix cache marks its keys pending for it; a request
// asks the store at most once. Engine-thread only.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_core.h"  // EngineCore
#include "engine/request.h"      // Request
#include "remote/redis_store.h"  // RedisStore
#include "util/timer.h"

namespace chorus {

class RemotePrefetcher {
 public:
  explicit RemotePrefetcher(EngineCore& core) : core_(core) {}

  // Connects the remote store of options.kv_store_url (a malformed URL is an error; an
  // unreachable store a warning through kv_store_log). Without a URL the prefetcher does nothing.
  Status Open();
  // A prompt block just computed here and inserted into the prefix cache: serialized and queued.
  void PublishBlock(uint64_t key, size_t index, std::span<const BlockId> ids, const Scope& scope);
  // Admission of waiting request `a` whose first k blocks are cached here: asks the store (once)
  // for the rest of its full prompt blocks. True while that fetch is in flight (it waits).
  bool MaybeFetch(AgentId id, Request& a, size_t k);
  // Installs the blocks of every finished fetch (verified) into the prefix cache, and gives up on
  // fetches past their deadline; their requests (`find`: the request of an id, or null) then
  // admit as usual. `make_room`: Scheduler::MakeRoom, for each installed block's bytes.
  using FindRequest = std::function<Request*(AgentId)>;
  using MakeRoom = std::function<bool(size_t need, std::string* why)>;
  void CollectFetches(const FindRequest& find, const MakeRoom& make_room);
  // Nothing to compute but fetches in flight: waits a little for one to finish.
  void WaitForFetch();
  // The engine's counters and the store thread's (EngineStats::remote); all zero without a store.
  EngineStats::Remote Stats() const;

 private:
  std::string RemoteKey(uint64_t key, const Scope& scope) const;
  void RemoteLog(const std::string& msg) const;

  EngineCore& core_;
  std::unique_ptr<RedisStore> remote_;
  struct PendingFetch {
    AgentId agent = 0;
    std::vector<uint64_t> keys;  // chained keys asked for, in order; keys[0] continues `parent`
    size_t first_block = 0;      // block index of keys[0]
    uint64_t parent = 0;         // the key keys[0] continues (0: the first block)
    Scope scope;                 // the request's
    Timer timer;
  };
  std::map<uint64_t, PendingFetch> fetches_;  // by ticket
  EngineStats::Remote counters_;              // the engine's side: hits, misses, rejections, latency
};

}  // namespace chorus
