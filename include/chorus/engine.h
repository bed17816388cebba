// chorus public API: one engine, shared documents (compressed once, read by every agent), agents
// that decode together in one batch per step, and requests that reuse every cached prompt prefix.
//
//   auto engine = chorus::Engine::Open({.model_path = "model.gguf"}).value();
//   auto doc = engine->Share(document_text).value();          // prefilled and compressed once
//   auto a = engine->Spawn(doc, "\n\nQuestion: ...", {}).value();
//   while (engine->running() > 0) engine->Step();             // one token for every agent
//   engine->agent(a)->text;
//
// Serving: Submit(prompt tokens) queues a request; each Step admits what fits the KV budget
// (leading 32-token blocks already held by the prefix cache — a running or finished request's, or
// a context's — are borrowed, not recomputed), prefills waiting prompts in chunks beside the
// running decodes, and decodes every running request by one token.
//
// The Engine is not thread-safe: one thread drives it (the server's engine loop does). Only
// Tokenize, RenderChat, EstimateBytes, CheckConstraint and the const getters of the model
// (context_size, vocab_size, model_name, fingerprint) may be called from any thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chorus/kv_policy.h"  // KvPolicy
#include "chorus/status.h"     // Status, Result

namespace chorus {

namespace research {
struct Access;  // research.h's calls (src/engine)
}  // namespace research

// The sharing scope of requests and contexts that everyone may reuse (AgentOptions::scope,
// ShareOptions::scope). Any other string names a scope of its own (a server: a tenant, a group).
inline constexpr const char* kPublicScope = "";

// EngineOptions::encoder_path value that selects Cocktail's fallback encoder explicitly.
inline constexpr const char* kHiddenStateEncoder = "hidden-states";

// How a request reuses KV that other prompts computed. kExact: only its exact prompt prefix (the
// prefix cache: bit-identical to a full prefill). kSegments: also any run of >= 32 tokens another
// prompt holds after other text (a document after another agent's role, a tool result, another
// agent's message), attached at its new offset with exact positions and its first tokens
// recomputed (METHODS.md §5b; approximate: the run never saw this prompt's prefix). kDefault
// (AgentOptions only): the engine's setting.
enum class Reuse { kDefault, kExact, kSegments };

struct SegmentOptions {
  Reuse reuse = Reuse::kExact;
  // Recomputed at the head of each reused span: max(repair_min_tokens, repair · span tokens), then
  // up to the next block boundary (where the run's blocks can be attached).
  double repair = 0.05;  // measured: docs/results/segments.md (quality flat from 0 to 30 %)
  size_t repair_min_tokens = 16;
};

// Serving knobs (EngineOptions::serve).
struct ServeOptions {
  size_t prefill_chunk = 256;   // prompt tokens prefilled per step while others decode (multiple of 32)
  size_t max_prefill = 512;     // per step when nothing decodes
  size_t max_running = 256;     // requests decoding at once
};

struct EngineOptions {
  std::string model_path;
  int threads = 0;           // 0 = every core
  size_t n_ctx = 0;          // positions per agent (document + prompt + answer); 0 = min(training, 8192)
  // What picks the formats of shared (prompt and context) blocks: KvPolicy::Parse("chorus") = uniform
  // kivi4/tq3 (include/chorus/kv_policy.h has the grammar and the presets). An allocator policy's
  // bytes come from kv_budget_bytes, or its average-bits target when the budget is 0.
  KvPolicy policy;
  std::string private_k = "q8", private_v = "q8";   // formats of each agent's own blocks
  size_t sink_blocks = 1;  // leading blocks of a context kept f16 (a uniform policy's :sN overrides)
  // Rows of every sequence's newest < 32 tokens before sealing: "f16", "q8" (half the bytes; the
  // measured default for compressed contexts, docs/results/polykv.md) or "auto" = q8 unless the
  // policy is uniform f16/f16 (the exact baseline).
  std::string kv_window = "auto";
  size_t kv_budget_bytes = 0;  // 0 = unlimited; agents that do not fit are refused with a message
  // The two Cocktails: a sentence-embedding model directory; "" = the all-MiniLM-L6-v2 installed next
  // to the model (scripts/fetch_encoder.sh) if present, else the fallback (the model's own mean-pooled
  // hidden states); kHiddenStateEncoder forces the fallback.
  std::string encoder_path = "";
  ServeOptions serve;
  // Segment reuse (Reuse). Uniform policy only: comix and cocktail requests reuse exact prefixes.
  SegmentOptions segments;
  // A remote block store shared by replicas: "redis[s]://HOST[:PORT][/DB]" (docs/SCALE_OUT.md), or
  // empty for none. Every prompt block sealed here is published to it (its own thread, a bounded
  // queue); a request whose leading blocks are not held here asks it for them before prefilling
  // and waits at most kv_store_timeout_ms. A malformed URL fails Open; an unreachable store (or
  // one that answers with an error, e.g. auth required) is reported through kv_store_log and
  // retried in the background while the engine serves locally. Uniform policies only.
  std::string kv_store_url = "";
  int kv_store_timeout_ms = 200;
  size_t kv_store_queue_bytes = size_t{64} << 20;  // publications waiting to be written
  // A secret every replica shares (empty: none): each published value carries a keyed MAC
  // (HMAC-SHA256 over its Redis key and bytes), and a fetched value whose MAC fails is refused and
  // counted (errors kind "mac"), so a writer without the secret cannot forge a block. Replicas must
  // agree on it: a value of a replica without it is refused by one with it, and the other way round.
  std::string kv_store_secret = "";
  // rediss:// (TLS): PEM files. The CA bundle that signs the server's certificate (empty: the
  // system's trust store), an optional client certificate and its key, and the name the server's
  // certificate must carry (empty: the URL's host; also sent as SNI). An unreadable or malformed
  // file fails Open; a failed handshake (e.g. certificate verify failed) is reported through
  // kv_store_log and retried like an unreachable store. Set with a redis:// URL: an error.
  std::string kv_store_ca = "", kv_store_cert = "", kv_store_key = "", kv_store_sni = "";
  std::function<void(const std::string&)> kv_store_log = {};  // warnings (connection, rejected blocks)
  // Tests of the all-or-nothing paths: the n-th KV block allocation fails as if the budget were
  // exhausted (KvStoreOptions::fail_block_allocation). 0 = never.
  size_t test_fail_block = 0;
};

// How a Cocktail context was compressed (Engine::chunk_map).
struct ChunkMapReport {
  std::string encoder;    // which encoder ran (a real one, or "fallback: ...")
  std::string blocks;     // one char per 32-token block: S sink (f16), F fp16, 4 int4, 2 int2
  size_t sink = 0, fp16 = 0, int4 = 0, int2 = 0;  // sealed blocks per precision (an unsealed tail is not counted)
  size_t chunks = 0, chunk_tokens = 32;
  float s_min = 0, s_max = 0, t_low = 0, t_high = 0;  // similarity range and thresholds (of the first query)
  double search_seconds = 0;   // chunk + query embedding, cosine, thresholds
  double prefill_seconds = 0;  // prefill with per-block sealing
  double reorder_seconds = 0;  // block-table permutation after sealing
  // Policy kRelevance (the allocator with relevance): `blocks` is each block's relevance level (S
  // sink, 0..8 of its min–max scaled relevance), the precision counts above stay 0, and per layer
  // (n_layer strings, one char per sealed block in token order: F f16, else the bits 2/3/4/8):
  // the bits the allocator handed out, and the formats the store's blocks hold (pool metadata).
  KvPolicyKind policy = KvPolicyKind::kCocktailPaper;
  std::vector<std::string> alloc_k, alloc_v, stored_k, stored_v;
};

// Where an agent (request) is: queued for admission, prefilling its prompt, decoding, finished.
enum class AgentPhase { kWaiting, kPrefill, kDecode, kDone };

// Why an agent finished (AgentState::stop); kNone until it has. kError: the request failed — e.g.
// its KV could not be stored — and AgentState::error says why; a failed step leaves every other
// request as it was.
enum class StopReason { kNone, kEndOfGeneration, kMaxTokens, kContextFull, kForcedTokens, kCancelled, kError };

// The words tools print and write to JSON ("" for kNone).
constexpr const char* ToString(StopReason r) {
  switch (r) {
    case StopReason::kNone: return "";
    case StopReason::kEndOfGeneration: return "end of generation";
    case StopReason::kMaxTokens: return "max tokens";
    case StopReason::kContextFull: return "context full";
    case StopReason::kForcedTokens: return "forced tokens";
    case StopReason::kCancelled: return "cancelled";
    case StopReason::kError: return "error";
  }
  return "";
}

// What a request may generate, enforced at every token by grammar-constrained sampling: tokens the
// grammar does not allow next are never sampled, and the end of generation only where it may end.
// A constraint that cannot be enforced in full (an unsupported JSON Schema feature) is refused
// with the feature named, never run unconstrained.
struct OutputConstraint {
  enum class Kind {
    kNone,
    kJsonObject,     // any JSON object (text ignored)
    kJsonSchema,     // text: a JSON Schema, strict (no properties beyond those listed)
    kEbnf,           // text: an EBNF grammar (xgrammar's dialect), start rule `root`
    kStructuralTag,  // text: an xgrammar structural tag (free text with schema-constrained tags)
  };
  Kind kind = Kind::kNone;
  std::string text;
};

struct AgentOptions {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  int max_tokens = 128;
  bool ignore_eog = false;  // benchmarks: keep generating past end-of-generation tokens
  // Teacher forcing (evaluations): the agent emits these ids instead of sampling, one per step
  // (AgentState::nll sums −log p of each under the model); max_tokens is then their count.
  std::vector<int32_t> forced_tokens = {};
  Reuse reuse = Reuse::kDefault;  // segments for this request (kDefault: EngineOptions::segments)
  // Evaluations: AgentState::logits keeps the model's raw logit row of every token it emits
  // (n_vocab floats each: KLD against another configuration). Off: nothing is kept.
  bool capture_logits = false;
  OutputConstraint constraint = {};  // kNone: unconstrained (ignored with forced_tokens)
  // OpenAI's adjustments of the logits before sampling, in this order: logit_bias (token id →
  // added value), then −presence_penalty once and −frequency_penalty × count for every token the
  // answer already holds, then the constraint's mask. Temperature, top-k and top-p follow.
  std::vector<std::pair<int32_t, float>> logit_bias = {};
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  // AgentState::logprobs: the log-probability of every token emitted and of the `top_logprobs`
  // most likely ones (0-20), under the adjusted logits at temperature 1. -1: none kept.
  int top_logprobs = -1;
  // When it finishes, the answer's full blocks join its prompt's in the prefix cache, keyed by the
  // prompt + answer tokens, so a request whose prompt continues them (a stored conversation's next
  // turn) borrows them instead of prefilling. Models with sliding-window layers keep prompts only.
  bool cache_answer = false;
  // The sharing scope (kPublicScope: everyone's). Every key of the KV a request computes or reads
  // (prefix-cache blocks, segments, remote-store blocks) is salted with it: requests of one scope
  // share, of two scopes never do. A scoped request also reads public contexts' blocks as segments.
  std::string scope = kPublicScope;
  // The most KV bytes its scope may hold when it is admitted (0: no quota): the scope's cached blocks
  // and running requests' projections. Over it, the scope's idle cached blocks are evicted, then
  // the request fails (AgentState::quota_exceeded); other scopes are never touched.
  size_t kv_quota_bytes = 0;
};

// One generated token's log-probability and its most likely alternatives (AgentOptions::top_logprobs).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first
};

// How a shared context will be read (Engine::Share). The readers a caller knows of are planned
// for before the context is sealed: with policy "comix" each planned reader is a unit of
// reader_tokens own tokens in the allocation, so the document's bits leave room for them (a
// context sealed alone would take every byte the budget has). A reader that attaches takes over
// a planned unit; readers beyond them are admitted as they come (within CoMix's join reserve).
// Ignored by the other policies (their formats are fixed).
struct ShareOptions {
  size_t readers = 0;        // agents that will read the context (0: unknown)
  size_t reader_tokens = 0;  // own tokens of each (prompt + max_tokens); 0 with readers > 0 is an error
  std::function<void(size_t done, size_t total)> progress = {};
  // Who may reuse its blocks (AgentOptions::scope). The same text in two scopes is two contexts.
  std::string scope = kPublicScope;
};

using ContextId = uint64_t;
using AgentId = uint64_t;

struct AgentState {
  std::string text;             // generated so far
  std::vector<int32_t> tokens;  // generated ids
  size_t prompt_tokens = 0;     // the whole prompt (a context's tokens included)
  size_t cached_tokens = 0;     // prompt tokens whose KV was borrowed (context or prefix cache): exact
  size_t reused_tokens = 0;     // prompt tokens whose KV came from segments at another offset (approximate)
  size_t repaired_tokens = 0;   // prompt tokens recomputed at the heads of those segments
  AgentPhase phase = AgentPhase::kWaiting;
  bool done = false;
  StopReason stop = StopReason::kNone;  // set when done (ToString prints it)
  std::string error;
  bool quota_exceeded = false;    // the error is AgentOptions::kv_quota_bytes (a server answers 429)
  size_t peak_private_bytes = 0;  // measured bytes of its own KV (blocks + window + table)
  // What admission projected its own KV may hold at most (KvFootprint); 0 under comix (CoMix's
  // allocation bounds it instead).
  size_t projected_private_bytes = 0;
  double nll = 0;               // Σ −log p(token) of the tokens emitted (sampled or forced) under the model
  std::vector<float> logits;    // (tokens, n_vocab) with AgentOptions::capture_logits
  std::vector<TokenLogprob> logprobs;  // one per token, with AgentOptions::top_logprobs >= 0
  double seconds = 0;           // wall time from spawn to done
  double first_token_seconds = 0;  // wall time from admission to its first token (prefill included)
};

// Counters and the prefix cache's bytes by kind (measured), for /metrics.
struct EngineStats {
  size_t waiting = 0, prefilling = 0, decoding = 0;
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;          // prompts of admitted requests
  uint64_t prefilled_tokens = 0;       // prompt tokens computed
  uint64_t generated_tokens = 0;
  uint64_t prefix_queried_tokens = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_hit_tokens = 0;      // of which borrowed
  // Segments (Reuse::kSegments): runs attached at another offset, the prompt tokens they held, and
  // the tokens recomputed at their heads (repair). Never counted as prefix hits.
  uint64_t segment_runs = 0, segment_reused_tokens = 0, segment_repaired_tokens = 0;
  uint64_t evicted_blocks = 0;         // 32-token blocks (all layers) evicted from the cache
  size_t cached_blocks = 0;
  // Bytes: pinned contexts, unpinned cached blocks no sequence reads (evictable), everything
  // else held (running requests' blocks, windows, tables), free under the budget.
  size_t pinned_bytes = 0, cached_bytes = 0, in_use_bytes = 0, free_bytes = 0, total_bytes = 0, budget_bytes = 0;
  size_t high_water_bytes = 0;  // the most the KV layer held at any instant since start, inside steps included
  size_t overhead_bytes = 0;    // of total: the store's scratch and the pool's free slots (no request's)
  // Blocks stored once for whoever reads them: every prefix-cache block (pinned, read by running
  // requests, or idle) and Cocktail contexts' blocks. Overlaps pinned/cached/in_use (a shared block
  // read by a running request is in use).
  size_t shared_bytes = 0;
  size_t last_step_rows = 0, last_step_prefill_tokens = 0;
  // Blocks sealed (one per layer and 32-token block) and the wall time spent sealing them: the
  // policy choosing their formats (a CoMix / cocktail reallocation included) and the encoding.
  uint64_t sealed_blocks = 0;
  double seal_seconds = 0;
  // The remote block store (EngineOptions::kv_store_url); all zero without one.
  struct Remote {
    bool enabled = false, up = false;
    uint64_t hits = 0, misses = 0;                 // blocks asked for: installed / not (absent, rejected, late)
    uint64_t fetched_bytes = 0, published_bytes = 0, published_blocks = 0, publish_dropped = 0;
    std::map<std::string, uint64_t> errors;        // by kind: connect, tls, auth, io, timeout, checksum, model, ...
    std::vector<double> fetch_bounds;              // fetch latency histogram (seconds): upper bounds
    std::vector<uint64_t> fetch_counts;            // per bucket (last = +Inf), not cumulative
    double fetch_seconds_sum = 0;
    uint64_t fetches = 0;
  } remote;
};

// A picture of the engine for dashboards and scripts (Engine::Snapshot), measured from the live
// objects. Precision maps are strings of format codes (EngineSnapshot::formats), one char per
// 32-token block; '.' = a block a sliding-window layer freed.
struct KvFormatLegend {
  char code = '?';
  std::string name;           // "tq4", "f16", ...
  double k_bits = 0, v_bits = 0;  // stored bits per element of a K / V block side, metadata included
};
struct RequestSnapshot {
  AgentId id = 0;
  AgentPhase phase = AgentPhase::kWaiting;
  size_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  size_t private_bytes = 0;     // measured: its own blocks, window and table (0 while waiting)
  size_t projected_private_bytes = 0;
  size_t context_tokens = 0;    // prompt + generated: what an fp16 copy of its KV would hold
  // Segments it reads (Reuse::kSegments): where in its prompt, how many tokens, and the offset
  // from where their keys were computed (position here − there).
  size_t reused_tokens = 0, repaired_tokens = 0;
  struct Segment {
    size_t at = 0, tokens = 0;
    int32_t shift = 0;
  };
  std::vector<Segment> segments;
};
struct SharedRunSnapshot {
  // "context": a pinned document (POST /v1/contexts, Engine::Share); "prefix": cached prompt blocks
  // (a chain of the prefix cache with the same readers); "cocktail": a ShareFor context.
  std::string kind;
  ContextId context = 0;        // kind context/cocktail
  size_t first_token = 0;       // position of its first token in the prompts that contain it
  size_t tokens = 0, bytes = 0; // full blocks × 32; measured bytes of its blocks (all layers)
  size_t readers = 0;           // running requests reading these blocks now
  uint64_t hits = 0;            // requests (or documents) that borrowed its first block
  uint64_t hit_tokens = 0;      // prompt tokens served from its blocks, summed over borrows
  std::string preview;          // its first tokens as text (empty when no live prompt holds them)
  bool has_map = false;         // maps below filled (EngineSnapshot::max_maps)
  std::vector<std::string> k_map, v_map;  // (n_layer) one format code per block
  std::string chunk_map;        // cocktail: ChunkMapReport::blocks (S sink, F fp16, 4 int4, 2 int2)
};
struct EngineSnapshot {
  EngineStats stats;
  KvPolicy policy;  // EngineOptions::policy
  size_t n_layer = 0;
  size_t fp16_bytes_per_token = 0;  // all layers, K and V
  std::vector<KvFormatLegend> formats;
  std::vector<RequestSnapshot> requests;  // every request not finished (waiting, prefilling, decoding)
  std::vector<SharedRunSnapshot> runs;    // contexts first, then prefix chains depth first
  size_t runs_total = 0;                  // runs may be cut to max_runs (the largest kept)
};
struct SnapshotOptions {
  size_t max_runs = 64;   // runs listed (the largest by bytes; contexts always)
  size_t max_maps = 8;    // runs with precision maps (contexts first, then the largest)
  size_t preview_tokens = 24;
};

struct EngineKvReport {
  size_t shared_bytes = 0;   // blocks + tails of live shared contexts
  size_t private_bytes = 0;  // every running agent's own KV
  size_t total_bytes = 0;    // everything the KV layer holds (pool + windows + tables + scratch)
  size_t overhead_bytes = 0;    // of which no one's: the store's scratch and the pool's free slots
  size_t high_water_bytes = 0;  // the most it held at any instant, inside steps included (<= budget)
  // The most it can hold from now on with the running requests: held + what each may still take
  // under its projection (KvFootprint) and the pool's slot growth; comix: CoMix's projection.
  size_t projected_bytes = 0;
  size_t budget_bytes = 0;
};

// Not thread-safe: an Engine and everything it returns are used from one thread at a time (a
// server drives it from a single engine-loop thread; several threads need their own locking).
// Its ThreadPool parallelizes inside each call.
class Engine {
 public:
  using Progress = std::function<void(size_t done, size_t total)>;

  static Result<std::unique_ptr<Engine>> Open(const EngineOptions& options);
  ~Engine();

  // Prefills `text` once (raw, special tokens parsed), compresses it with the shared formats and
  // seals it read-only. The same model + tokens twice returns the same context (stored once).
  Result<ContextId> Share(std::string_view text, const Progress& progress = {});
  // The same, saying how many readers the context will have (ShareOptions).
  Result<ContextId> Share(std::string_view text, const ShareOptions& options);
  // Cocktail: like Share, but each 32-token block's precision (f16 / kivi4 / kivi2) is chosen by
  // the relevance of its text to `queries` (the highest precision any query asks for: the agents
  // attached when the context is sealed decide together), then the frozen block tables are
  // reordered by format. Errors: bad α/β/chunk size, encoder problems, no query.
  // Under policy "cocktail" the blocks' bits come from the allocator instead (the context is one
  // unit, its blocks weighted by their relevance to the queries, bytes from kv_budget_bytes /
  // kv_avg_bits; not reordered: ChunkMapReport::stored_k/v are in token order).
  Result<ContextId> ShareFor(std::string_view text, const std::vector<std::string>& queries,
                             const Progress& progress = {});
  // The same, saying how many readers the context will have (ShareOptions): under policy
  // "cocktail" they are planned before the document is sealed, as Share plans them under "comix"
  // (the document's bits leave room for them); the other policies ignore them.
  Result<ContextId> ShareFor(std::string_view text, const std::vector<std::string>& queries,
                             const ShareOptions& options);
  // The chunk map of a context made by ShareFor (nullptr for other or unknown contexts).
  const ChunkMapReport* chunk_map(ContextId context) const;
  // The caller's reference to a context is dropped; it is freed when no running agent reads it.
  void Release(ContextId context);

  // An agent whose prompt continues the context (context 0 = none); its prompt is prefilled now
  // (refused with the numbers if its KV does not fit the budget). The id is the capability: the
  // context's blocks are read whatever options.scope is (its own prompt's blocks are keyed by it).
  Result<AgentId> Spawn(ContextId context, std::string_view prompt, const AgentOptions& options);
  // Queues a request with these prompt tokens (special tokens already in, e.g. from Tokenize of a
  // rendered chat). Errors now: empty, ids outside the vocabulary, prompt + max_tokens beyond the
  // context, or a KV need larger than the whole budget; otherwise a later Step admits it.
  Result<AgentId> Submit(std::vector<int32_t> prompt, const AgentOptions& options);
  // Ends a request at the next Step (stop kCancelled); its private blocks go back to the pool.
  void Cancel(AgentId id);
  // Drops a finished agent's state (a long-running server must, or it grows). No-op otherwise.
  void Forget(AgentId id);
  // One scheduler step: admits waiting requests that fit, prefills a chunk of waiting prompts
  // (32-token aligned, up to EngineOptions::prefill_chunk tokens while others decode) and advances
  // every decoding agent by one token, all in one batched forward pass.
  Status Step();
  size_t running() const;   // admitted and not finished
  size_t waiting() const;   // submitted, not yet admitted
  const AgentState* agent(AgentId id) const;

  // Compiles a constraint (cached: Submit with the same text reuses it) or says why it cannot be
  // enforced. Thread-safe, unlike the rest: a server checks requests on its HTTP threads.
  Status CheckConstraint(const OutputConstraint& constraint) const;

  // The model's tokenizer and chat template, for callers that build prompts (the server).
  std::vector<int32_t> Tokenize(std::string_view text, bool add_special, bool parse_special) const;
  std::string TokenPiece(int32_t token) const;  // the token's text (bytes; a piece of a character possible)
  struct ChatTurn {
    std::string role, content;
  };
  // The prompt text for these messages with the model's chat template (generation prompt added).
  Result<std::string> RenderChat(const std::vector<ChatTurn>& messages) const;
  bool has_chat_template() const;  // whether RenderChat can succeed (the GGUF has tokenizer.chat_template)
  size_t context_size() const;  // positions per agent
  size_t vocab_size() const;
  // Bytes a request's own KV would take with nothing borrowed (prompt blocks at the shared
  // formats, the answer at the private ones, window and tables): admission's projection.
  size_t EstimateBytes(size_t prompt_tokens, size_t max_tokens) const;
  // Live contexts and the measured bytes of a context's blocks.
  std::vector<ContextId> Contexts() const;
  size_t ContextBytes(ContextId context) const;
  const std::string& model_name() const;
  // Hex digest of the model and every KV setting that changes stored bytes (prefix keys use it).
  std::string fingerprint() const;
  // The KV settings in force, for /v1/models: {"policy", "private_k", "private_v", "window",
  // "budget_bytes", "sink_blocks"}, plus "table" (where a measured ranking's table came from) and
  // "note" (a policy that fell back for want of a table: which, and how to calibrate), as JSON text.
  std::string KvSettings() const;
  EngineStats Stats() const;

  // Teacher-forced scoring of `text` as the continuation of a context (perplexity protocol):
  // the summed negative log-likelihood of its tokens 2..n (token 1 has no logits in the
  // continuation) and their count. Nothing is kept afterwards. Context 0: none (the text starts
  // the sequence; evaluation harnesses scoring a prompt, `echo` with `logprobs`).
  struct ScoreResult {
    double nll = 0;
    size_t count = 0;
    // With top_logprobs >= 0 (at most 20): per scored token (tokens 2..n) its log-probability and
    // the top_logprobs most likely tokens at that position, as AgentOptions::top_logprobs gives
    // them for generated tokens (the model's logits, temperature 1).
    std::vector<TokenLogprob> logprobs;
  };
  Result<ScoreResult> Score(ContextId context, std::string_view text);
  // The same for tokens given as ids (e.g. a prompt tokenized as Spawn does, with special tokens
  // parsed, then an answer's tokens): NLL of tokens[1..n-1], count n - 1.
  Result<ScoreResult> Score(ContextId context, std::span<const int32_t> tokens, int top_logprobs = -1);

  EngineKvReport KvReport() const;
  // Everything a dashboard shows, walked from the live objects (cost: every running request, cache
  // entry and mapped block once; call it now and then, not per token).
  EngineSnapshot Snapshot(const SnapshotOptions& options = {}) const;
  // comix: the allocation in force (bits per sequence × layer, K and V rows) and, with
  // `events`, every reallocation so far (why, bytes projected vs capacity, time). Empty otherwise.
  std::string AllocationReport(bool events = false) const;
  // comix: reallocations so far and their mean / max time in microseconds.
  struct AllocationStats {
    size_t count = 0;
    double mean_us = 0, max_us = 0;
  };
  AllocationStats AllocationTiming() const;
  // Tokens of a context, and bytes an fp16 KV of n tokens would take (the baseline).
  size_t ContextTokens(ContextId context) const;
  size_t Fp16Bytes(size_t tokens) const;
  // Number of live shared contexts (a context freed when unused disappears).
  size_t live_contexts() const;

  struct Impl;

 private:
  friend struct research::Access;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
