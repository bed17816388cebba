// Scheduler: requests (agents, to the public API) from submission to finish. Admit: waiting
// requests first come first served against the KV budget, borrowing cached prefixes (and remote
// ones, through the RemotePrefetcher) and planning segments. Plan: one row per decoding request,
// then prompt chunks ending on block boundaries. Run: one batched forward. Postprocess: prefill
// progress, prompt blocks offered to the prefix cache, sampled tokens accepted or the request
// finished.
// Invariants: `waiting_` lists exactly the requests in kWaiting, FIFO; a request holds a sequence
// (and its PolicyLease) exactly while in kPrefill or kDecode; an admitted request's projection
// (Request::reserved_bytes) fits the budget beside what is held and reserved, so it never fails for
// lack of KV. Engine-thread only.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/engine.h"
#include "engine/context_registry.h"   // ContextRegistry
#include "engine/engine_core.h"        // EngineCore
#include "engine/remote_prefetcher.h"  // RemotePrefetcher
#include "engine/request.h"            // Request

namespace chorus {

// The log-probability of `token` and the `top` most likely tokens under the logits `row`
// (temperature 1): the sampler's AgentOptions::top_logprobs and Engine::Score's per-token logprobs.
TokenLogprob LogprobsOf(const float* row, size_t V, int32_t token, size_t top);

class Scheduler {
 public:
  Scheduler(EngineCore& core, ContextRegistry& contexts, RemotePrefetcher& remote)
      : core_(core), contexts_(contexts), remote_(remote) {}

  // Engine::Submit: validated and queued.
  Result<AgentId> Submit(std::vector<int32_t> prompt, const AgentOptions& options);
  // Engine::Spawn: admitted now or refused, its prompt (after the context's tokens) prefilled
  // alone and its first token sampled.
  Result<AgentId> Spawn(ContextId context, std::string_view prompt, const AgentOptions& options);
  // One step: schedule (cancellations, admission, the batch's rows), run (one forward over the
  // batch), postprocess (each row's prefill progress and sampled token).
  Status Step();
  void Cancel(AgentId id);
  void Forget(AgentId id);  // a finished request's state goes
  void Clear();             // every request goes (the engine's end)

  const Request* Find(AgentId id) const;
  const std::map<AgentId, Request>& requests() const { return requests_; }
  size_t running() const;
  size_t waiting() const { return waiting_.size(); }
  // Running requests reading `context`.
  size_t Readers(ContextId context) const;
  // Bytes running requests may still take beyond what they hold (their projections), and the
  // pool's slot growth.
  size_t Reserved() const;
  // What a sharing scope holds against its quota: its cached blocks (PrefixCache::ScopeBytes) and
  // its running requests' projections (a running request's own prompt blocks count in both).
  size_t ScopeBytes(uint64_t scope) const;
  // Whether `need` more bytes fit the budget beside what is held and reserved, evicting idle
  // cached blocks if needed; if not, *why says what is free (nothing is reserved either way).
  bool MakeRoom(size_t need, std::string* why);

 private:
  // Validates and registers a request (phase kWaiting, not queued).
  Result<AgentId> NewRequest(std::vector<int32_t> prompt, ContextId context, const AgentOptions& options);
  // Admission: borrow, check the budget (evicting idle cached blocks if needed), register with
  // CoMix. kNotNow: does not fit yet (nothing changed); an error: it can never run.
  enum class Admit { kAdmitted, kNotNow };
  Result<Admit> TryAdmit(AgentId id, Request& a);
  // Prefills the rest of the prompt now, alone (Spawn), and samples the first token.
  Status PrefillNow(AgentId id, Request& a);
  // Offers the request's newly sealed prompt blocks to the prefix cache (the exact ones: those
  // before its first attached segment), each also under its content key.
  void InsertAnswerBlocks(Request& a);
  void InsertPromptBlocks(AgentId id, Request& a);
  // Whether a request reuses segments (its option, the engine's, and a policy that allows it).
  bool UsesSegments(const Request& a) const;
  // Attaches every planned segment whose position the prefill has reached.
  void AttachDueSegments(Request& a);
  // A request's next token and its logit row's log-sum-exp, computed before Accept (a step's rows
  // over the pool: each request's sampler has its own generator and scratch).
  struct Pick {
    int32_t token;
    double lse;
    TokenLogprob logprob = {};  // with AgentOptions::top_logprobs >= 0
  };
  Pick PickFor(AgentId id, const float* row);
  void Accept(AgentId id, const float* row, const Pick* pick = nullptr);
  // comix: a context read by k running requests is one unit of weight k.
  void UpdateReaders(ContextId context);
  void Finish(AgentId id, StopReason why, std::string error = "");
  // Frees the contexts no one holds or reads any more.
  void CollectContexts();

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

  EngineCore& core_;
  ContextRegistry& contexts_;
  RemotePrefetcher& remote_;
  std::map<AgentId, Request> requests_;
  std::deque<AgentId> waiting_;
  AgentId next_request_ = 1;
  std::string last_refusal_;   // why the last TryAdmit said kNotNow
  std::vector<float> logits_;  // (rows, n_vocab)
};

}  // namespace chorus
