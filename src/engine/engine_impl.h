// Engine::Impl: one engine, composed of named parts, each owning its own state:
//   EngineCore        the model, the KV store and its policies, the prefix cache, the forward
//                     pass, the settings and counters (engine_core.h), built by Engine::Open;
//   RemotePrefetcher  the remote block store's publications and fetches (remote_prefetcher.h);
//   ContextRegistry   the shared contexts (context_registry.h);
//   Scheduler         the requests: admission, the step's plan, the forward, postprocess
//                     (scheduler.h).
// Engine's methods delegate here; what needs several parts at once (sharing a document, scoring,
// the reports) is done here. Internal to src/engine.
// Invariants: every live block is held by a sequence, a context or the prefix cache (refcounts);
// the parts are destroyed before the core (the requests and contexts end their policy leases and
// block references first). Engine-thread only.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/engine.h"
#include "chorus/research.h"           // research::SequenceKv
#include "engine/cocktail_plan.h"      // CocktailPlan
#include "engine/context_registry.h"   // ContextRegistry
#include "engine/engine_core.h"        // EngineCore
#include "engine/remote_prefetcher.h"  // RemotePrefetcher
#include "engine/request.h"            // PolicyLease
#include "engine/scheduler.h"          // Scheduler

namespace chorus {

struct Engine::Impl {
 public:
  // The parts over a core Engine::Open built (the remote store connected here).
  static Result<std::unique_ptr<Impl>> Create(std::unique_ptr<EngineCore> core);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  const EngineCore& core() const { return *core_; }
  Scheduler& scheduler() { return scheduler_; }
  const Scheduler& scheduler() const { return scheduler_; }
  ContextRegistry& contexts() { return contexts_; }
  const ContextRegistry& contexts() const { return contexts_; }

  Result<ContextId> Share(std::string_view text, const ShareOptions& options);
  Result<ContextId> ShareFor(std::string_view text, const std::vector<std::string>& queries,
                             const ShareOptions& options);
  void Release(ContextId context);
  Result<ScoreResult> Score(ContextId context, std::span<const int32_t> tokens, int top_logprobs);
  Result<research::SequenceKv> ScoreSequence(std::span<const int32_t> tokens,
                                             const research::SequenceOptions& options);  // research.cc
  EngineKvReport KvReport() const;
  EngineStats Stats() const;
  EngineSnapshot Snapshot(const SnapshotOptions& o) const;  // snapshot.cc

 private:
  explicit Impl(std::unique_ptr<EngineCore> core);

  // Prefills `tokens` into a new sequence (borrowing what the prefix cache holds, for a plain
  // document), sealed with the shared formats or under a Cocktail map, and returns it with its full
  // blocks and, under comix, its unit. Cache keys are salted with `scope`.
  // comix: `readers` units of reader_tokens each are planned first (their leases in *planned).
  // cocktail (the allocator): `relevance` (one per 32-token block) weights the unit's blocks; such a
  // document borrows nothing from the prefix cache (its bits were chosen for its questions).
  struct Document {
    std::unique_ptr<KvSequence> seq;
    PolicyLease unit;  // comix: the document's unit, which its context keeps
  };
  Result<Document> PrefillDocument(std::span<const int32_t> tokens, const Scope& scope,
                                   std::shared_ptr<CocktailPolicy> cocktail, const Progress& progress,
                                   size_t readers = 0, size_t reader_tokens = 0,
                                   std::vector<PolicyLease>* planned = nullptr, std::span<const float> relevance = {});
  // ShareFor under policy "cocktail": the document as one allocator unit weighted by the plan's
  // relevance per block (not pinned, not reordered), with its ChunkMapReport.
  // share.readers are planned as Share plans them under comix.
  Result<ContextId> ShareRelevant(std::vector<int32_t> tokens, const std::vector<std::string>& queries,
                                  const CocktailPlan& plan, const ShareOptions& share);

  std::unique_ptr<EngineCore> core_;  // first: the parts below hold references into it
  RemotePrefetcher remote_;
  ContextRegistry contexts_;
  Scheduler scheduler_;
  // ScoreSequence's logit rows (tokens × n_vocab), kept between calls: an eval scores chunk after
  // chunk of one size, and a fresh buffer each time would fault its pages in again.
  std::vector<float> score_logits_;
};

// research.h's door into the engine: Engine's private constructor and its Impl.
namespace research {
struct Access {
  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options, const OpenOptions& research);
  static Engine::Impl& impl(Engine& engine) { return *engine.impl_; }
};
}  // namespace research

}  // namespace chorus
