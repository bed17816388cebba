// Engine::Impl: what one engine holds — the model, the KV store and its policies, the prefix cache,
// contexts and requests (agents, to the public API) — and the steps they go through. Internal to src/engine.
// Invariants: every live block is held by a sequence, a context or the prefix cache (refcounts);
// a request is in exactly one phase; `waiting` lists exactly the requests in kWaiting, FIFO.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "chorus/engine.h"
#include "encoder/text_encoder.h"   // TextEncoder
#include "engine/cocktail_plan.h"   // CocktailPlan
#include "engine/kv_config.h"       // KvConfig
#include "engine/prefix_cache.h"    // PrefixCache
#include "engine/request.h"         // Request, PolicyLease
#include "engine/routing_policy.h"  // RoutingPolicy
#include "engine/segments.h"        // SegmentPlan
#include "kv/kv_batch.h"            // KvBatch
#include "kv/kv_store.h"            // KvStore, KvSequence
#include "model/forward.h"          // ForwardPass
#include "model/model.h"            // Model
#include "model/sampler.h"          // Sampler
#include "policy/comix_policy.h"    // ComixPolicy
#include "remote/redis_store.h"     // RedisStore
#include "util/thread_pool.h"
#include "util/timer.h"

namespace chorus {

struct Engine::Impl {
  EngineOptions options;
  std::unique_ptr<Model> model;
  KvConfig shared_cfg, private_cfg;
  std::unique_ptr<RoutingPolicy> policy;
  std::unique_ptr<ComixPolicy> comix;  // set with --policy comix
  std::unique_ptr<KvStore> store;
  std::unique_ptr<PrefixCache> cache;  // after store: destroyed first (it holds pool refs)
  std::unique_ptr<ForwardPass> fwd;
  std::unique_ptr<ThreadPool> pool;
  size_t n_ctx = 0;
  size_t prefill_rows = 0;       // the most prompt rows one forward call appends to a sequence
  uint64_t salt = 0;             // prefix keys: model fingerprint + every KV setting
  uint64_t model_fp = 0;         // the model file's fingerprint (remote blocks' header)
  std::vector<float> logits;     // (rows, n_vocab)
  EngineStats counters;          // the monotonic counters of Stats()

  struct Context {
    std::vector<int32_t> tokens;
    std::vector<std::vector<BlockId>> tables;  // (n_layer) live full blocks [first[l], n), one ref each
    std::vector<size_t> first;                 // (n_layer) a sliding-window layer keeps only its tail
    std::vector<uint64_t> keys;                // pinned in the cache (empty for Cocktail contexts)
    uint64_t hash = 0;
    size_t user_refs = 0;
    size_t bytes = 0;                          // measured: the blocks' cost
    PolicyLease unit;                          // comix: the unit its blocks were sealed under
    std::vector<PolicyLease> planned;          // comix: units of readers planned by Share, not yet attached
    size_t reader_tokens = 0;                  // comix: prompt + max_tokens of each planned reader
    std::shared_ptr<CocktailPolicy> cocktail;  // a Cocktail context's map (its readers' tail block follows it)
    uint64_t hits = 0;                         // requests admitted reading it (Spawn / Submit with a context)
  };
  std::map<ContextId, Context> contexts;
  std::map<uint64_t, ContextId> by_hash;
  ContextId next_context = 1;
  static constexpr uint64_t kPlannedReaderBit = uint64_t{1} << 63;  // planned units' ids: no sequence has one
  uint64_t next_planned = 1;
  std::unique_ptr<TextEncoder> encoder;             // Cocktail's, opened on first use
  std::map<ContextId, ChunkMapReport> chunk_maps;   // Cocktail contexts (stale ids are never reused)

  std::map<AgentId, Request> requests;
  std::deque<AgentId> waiting;
  AgentId next_request = 1;
  std::string last_refusal;      // why the last TryAdmit said kNotNow

  // The remote block store (EngineOptions::kv_store_url; remote_blocks.cc).
  std::unique_ptr<RedisStore> remote;
  struct PendingFetch {
    AgentId agent = 0;
    std::vector<uint64_t> keys;  // chained keys asked for, in order; keys[0] continues `parent`
    size_t first_block = 0;      // block index of keys[0]
    uint64_t parent = 0;         // the key keys[0] continues (0: the first block)
    Timer timer;
  };
  std::map<uint64_t, PendingFetch> fetches;  // by ticket
  EngineStats::Remote remote_counters;       // the engine's side: hits, misses, rejections, latency

  // --- engine.cc
  size_t fp16_bytes(size_t tokens) const;
  Result<std::vector<int32_t>> DocumentTokens(std::string_view text) const;
  // A reader of a document of doc_tokens planned as CoMix unit `id`: its own reader_tokens and the
  // document's tail (< 32 tokens), which it recomputes in its own KV, from the tail's first position.
  Result<PolicyLease> AddPlannedReader(uint64_t id, size_t reader_tokens, size_t doc_tokens, std::string label);
  // Prefills `tokens` into a new sequence (borrowing what the prefix cache holds, for a plain
  // document), sealed with the shared formats or under a Cocktail map, and returns it with its full
  // blocks and, under comix, its unit.
  // comix: `readers` units of reader_tokens each are planned first (their leases in *planned).
  // cocktail (the allocator): `relevance` (one per 32-token block) weights the unit's blocks; such a
  // document borrows nothing from the prefix cache (its bits were chosen for its questions).
  struct Document {
    std::unique_ptr<KvSequence> seq;
    PolicyLease unit;  // comix: the document's unit, which its context keeps
  };
  Result<Document> PrefillDocument(std::span<const int32_t> tokens, std::shared_ptr<CocktailPolicy> cocktail,
                                   const Progress& progress, size_t readers = 0, size_t reader_tokens = 0,
                                   std::vector<PolicyLease>* planned = nullptr, std::span<const float> relevance = {});
  // ShareFor under policy "cocktail": the document as one allocator unit weighted by the plan's
  // relevance per block (not pinned, not reordered), with its ChunkMapReport.
  // share.readers are planned as Share plans them under comix.
  Result<ContextId> ShareRelevant(std::vector<int32_t> tokens, const std::vector<std::string>& queries,
                                  const CocktailPlan& plan, const ShareOptions& share);
  ContextId AddContext(std::vector<int32_t> tokens, const KvSequence& seq, uint64_t hash, bool pin);
  void CollectContexts();
  size_t SequenceOwnBytes(const KvSequence& s) const;
  // What the store holds that is no request's or context's: its scratch and free pool slots.
  size_t OverheadBytes() const;

  // --- scheduler.cc
  // Validates and registers a request (phase kWaiting, not queued).
  Result<AgentId> NewRequest(std::vector<int32_t> prompt, ContextId context, const AgentOptions& options);
  // The longest run of the keys' blocks a request may borrow from the cache (at most max_blocks;
  // a sliding-window layer needs the blocks its first computed token sees): the run's length, and
  // its tables and first blocks per layer.
  struct Borrow {
    size_t blocks = 0;
    std::vector<std::vector<BlockId>> tables;
    std::vector<size_t> first;
    BorrowedBlocks view() const { return {.tables = tables, .first = first}; }
  };
  Borrow BorrowFromCache(std::span<const uint64_t> keys, size_t max_blocks) const;
  // The most bytes a request's own KV can hold at any instant (prompt of len tokens, max_tokens
  // answer) if `borrowed` leading blocks come from elsewhere: KvFootprint, the one projection.
  // cocktail: the prompt's own blocks follow a Cocktail map (f16 at most).
  size_t ProjectedBytes(size_t len, size_t max_tokens, size_t borrowed, bool cocktail = false) const;
  // Bytes of a sequence's own blocks [from, all_blocks) (all layers): sinks f16, prompt blocks at
  // the shared formats (f16 with f16_prompt), the rest at the private ones.
  size_t BlockBytes(size_t from, size_t prompt_blocks, size_t all_blocks, bool f16_prompt = false) const;
  // Bytes running requests may still take beyond what they hold (their projections), and the
  // pool's slot growth.
  size_t Reserved() const;
  // Whether `need` more bytes fit the budget beside what is held and reserved, evicting idle
  // cached blocks if needed; if not, *why says what is free (nothing is reserved either way).
  bool MakeRoom(size_t need, std::string* why);
  // Admission: borrow, check the budget (evicting idle cached blocks if needed), register with
  // CoMix. kNotNow: does not fit yet (nothing changed); an error: it can never run.
  enum class Admit { kAdmitted, kNotNow };
  Result<Admit> TryAdmit(AgentId id, Request& a);
  // Prefills the rest of the prompt now, alone (Spawn), and samples the first token.
  Status PrefillNow(AgentId id, Request& a);
  // Offers the agent's newly sealed prompt blocks to the prefix cache (the exact ones: those before
  // its first attached segment), each also under its content key.
  void InsertPromptBlocks(AgentId id, Request& a);
  // Whether a request reuses segments (its option, the engine's, and a policy that allows it).
  bool UsesSegments(const Request& a) const;
  // Attaches every planned segment whose position the prefill has reached.
  void AttachDueSegments(Request& a);
  // An agent's next token and its logit row's log-sum-exp, computed before Accept (a step's rows over
  // the pool: each agent's sampler has its own generator and scratch).
  struct Pick {
    int32_t token;
    double lse;
  };
  Pick PickFor(AgentId id, const float* row);
  void Accept(AgentId id, const float* row, const Pick* pick = nullptr);
  // comix: a context read by k running requests is one unit of weight k.
  void UpdateReaders(ContextId context);
  void Finish(AgentId id, StopReason why, std::string error = "");
  // One step: schedule (cancellations, admission, the batch's rows), run (one forward over the
  // batch), postprocess (each row's prefill progress and sampled token).
  Status RunStep();
  struct StepPlan {
    struct Row {
      AgentId id;
      size_t n;     // tokens
      bool logits;  // its last row is sampled
    };
    std::vector<Row> rows;        // decoding requests first, then prompt chunks
    std::vector<int32_t> tokens;  // the rows' tokens, in order
    size_t decode_rows = 0;
  };
  StepPlan Schedule();
  // Admits waiting requests first come first served, up to ServeOptions::max_running.
  void AdmitWaiting();
  // Every decoding request's next token, then prompt chunks (ServeOptions' prefill budget).
  StepPlan PlanRows();
  // The plan's rows as one KvBatch through ForwardPass::RunRows; on failure *failed is the
  // sequence whose KV could not be stored (null if none).
  Status Run(const StepPlan& plan, const KvSequence** failed);
  // A failed Run: fails that request, or every request of the plan (then returns `s`).
  Status FailStep(const StepPlan& plan, const KvSequence* failed, const Status& s);
  void Postprocess(const StepPlan& plan);

  // --- remote_blocks.cc
  // Connects the remote store of options.kv_store_url (a malformed URL is an error; an
  // unreachable store a warning through kv_store_log).
  Status OpenRemote();
  std::string RemoteKey(uint64_t key) const;
  // A prompt block just computed here and inserted into the prefix cache: serialized and queued.
  void PublishBlock(uint64_t key, size_t index, std::span<const BlockId> ids);
  // Admission of a waiting request whose first k blocks are cached here: asks the store (once)
  // for the rest of its full prompt blocks. True while that fetch is in flight (it waits).
  bool MaybeFetch(AgentId id, Request& a, size_t k);
  // Installs the blocks of every finished fetch (verified) into the prefix cache, and gives up on
  // fetches past their deadline; their requests then admit as usual.
  void CollectFetches();
  // Nothing to compute but fetches in flight: waits a little for one to finish.
  void WaitForFetch();
  void RemoteLog(const std::string& msg) const;
};

}  // namespace chorus
