// EngineCore: what the engine's parts share, built once by Engine::Open — the options, the model,
// the KV store and its policies, the prefix cache, the forward pass and the prefix keys' salt —
// with the monotonic counters every part adds to, and the byte arithmetic that needs nothing else.
// The parts (Scheduler, ContextRegistry, RemotePrefetcher) hold a reference; each owns its own
// state. Invariants: after Open only `counters`, `encoder` (opened on first use) and what the
// objects behind the pointers hold change; `cache` is destroyed before `store` (it holds pool refs).
// Engine-thread only.
#pragma once
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "chorus/engine.h"
#include "encoder/text_encoder.h"       // TextEncoder
#include "engine/kv_config.h"           // KvConfig
#include "engine/output_constraints.h"  // OutputConstraints
#include "engine/prefix_cache.h"        // PrefixCache
#include "engine/routing_policy.h"      // RoutingPolicy
#include "kv/kv_store.h"                // KvStore, KvSequence
#include "model/forward.h"              // ForwardPass
#include "model/model.h"                // Model
#include "policy/comix_policy.h"        // ComixPolicy
#include "util/thread_pool.h"

namespace chorus {

// A sharing scope (AgentOptions::scope) as the keys use it: id 0 is the public scope, whose salt
// is the engine's; any other scope's salt folds its id into it.
struct Scope {
  uint64_t id = 0;
  uint64_t salt = 0;
};

struct EngineCore {
  EngineOptions options;
  std::shared_ptr<Model> model;  // shared with other engines only through research::OpenOptions::weights_of
  KvConfig shared_cfg, private_cfg;
  std::unique_ptr<RoutingPolicy> policy;
  std::unique_ptr<ComixPolicy> comix;  // set with --policy comix
  std::unique_ptr<KvStore> store;
  std::unique_ptr<PrefixCache> cache;  // after store: destroyed first (it holds pool refs)
  std::unique_ptr<ForwardPass> fwd;
  std::unique_ptr<ThreadPool> pool;
  size_t n_ctx = 0;
  size_t prefill_rows = 0;               // the most prompt rows one forward call appends to a sequence
  uint64_t salt = 0;                     // prefix keys: model fingerprint + every KV setting
  uint64_t model_fp = 0;                 // the model file's fingerprint (remote blocks' header)
  std::string table_source;              // where a :m policy's table came from (AllocatorTableSource)
  std::string policy_note;               // set when the policy fell back for want of a table
  std::unique_ptr<TextEncoder> encoder;  // Cocktail's, opened on first use
  std::unique_ptr<OutputConstraints> constraints;  // AgentOptions::constraint's grammars (thread-safe)
  EngineStats counters;                  // the monotonic counters of Stats()

  Scope ScopeOf(std::string_view scope) const;
  size_t fp16_bytes(size_t tokens) const;
  Result<std::vector<int32_t>> DocumentTokens(std::string_view text) const;
  // The bytes of a sequence's own KV: window, table and the blocks it sealed (not borrowed, not attached).
  size_t SequenceOwnBytes(const KvSequence& s) const;
  // What the store holds that is no request's or context's: its scratch and free pool slots.
  size_t OverheadBytes() const;
  // Bytes of a sequence's own blocks [from, all_blocks) (all layers): sinks f16, prompt blocks at
  // the shared formats (f16 with f16_prompt), the rest at the private ones.
  size_t BlockBytes(size_t from, size_t prompt_blocks, size_t all_blocks, bool f16_prompt = false) const;
  // The most bytes a request's own KV can hold at any instant (prompt of len tokens, max_tokens
  // answer) if `borrowed` leading blocks come from elsewhere: KvFootprint, the one projection.
  // cocktail: the prompt's own blocks follow a Cocktail map (f16 at most).
  size_t ProjectedBytes(size_t len, size_t max_tokens, size_t borrowed, bool cocktail = false) const;
  // The longest run of the keys' blocks a sequence may borrow from the cache (at most max_blocks;
  // a sliding-window layer needs the blocks its first computed token sees): the run's length, and
  // its tables and first blocks per layer.
  struct Borrow {
    size_t blocks = 0;
    std::vector<std::vector<BlockId>> tables;
    std::vector<size_t> first;
    BorrowedBlocks view() const { return {.tables = tables, .first = first}; }
  };
  Borrow BorrowFromCache(std::span<const uint64_t> keys, size_t max_blocks) const;
};

}  // namespace chorus
