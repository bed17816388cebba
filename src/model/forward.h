// ForwardPass: runs the transformer (llama, mistral, qwen2, gemma3: ModelConfig's switches) over a
// batch of tokens of one sequence, appending their K/V to the cache, and returns logits. Owns the
// activation scratch, sized once for max_batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/dense_kv_cache.h"  // DenseKvCache
#include "kv/kv_store.h"        // KvStoreOptions
#include "kv/sequence_kv.h"     // SequenceKv
#include "model/model.h"        // Model
#include "util/aligned_buffer.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace chorus {

enum class LogitsFor { kLast, kAll };

class ForwardPass {
 public:
  // max_batch: tokens per internal micro-batch of Run (longer inputs are processed in pieces).
  // max_rows: the most rows one RunRows call may take (a batch of several sequences is one
  // micro-batch); 0 = max_batch. Scratch is sized for the larger of the two.
  explicit ForwardPass(const Model& model, size_t max_batch = 512, size_t max_rows = 0);

  // Appends `tokens` at positions [kv.size(), kv.size() + n) and writes logits:
  // kLast → (n_vocab) of the last token; kAll → (n, n_vocab).
  // Errors: empty input, token id out of range, cache capacity exceeded (nothing is written then),
  // or the KV could not store a micro-batch (kv.Rollback(): that micro-batch leaves no trace; the
  // ones before it stay committed).
  Status Run(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool, LogitsFor which,
             float* logits);

  // One micro-batch (tokens.size() ≤ max_rows()): e.g. the rows of a KvBatch (several sequences,
  // decode and prefill rows together). Logits (logit_rows.size(), n_vocab) of the listed rows
  // only, in that order (ascending row indices). All or nothing: on an error no row of kv changed
  // (kv.Rollback(), e.g. KvBatch::failed() names the sequence that could not store its K/V).
  Status RunRows(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool,
                 std::span<const size_t> logit_rows, float* logits);
  size_t max_rows() const { return max_rows_; }

  // Like Run, but instead of logits writes the mean over the tokens of the final-norm hidden states
  // (n_embd floats): the model's own sentence embedding (Cocktail's fallback encoder).
  Status MeanHidden(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool, float* mean);

  // The fp16 dense reference cache sized for this model.
  DenseKvCache MakeCache(size_t capacity) const;
  // Options for a block KvStore of this model.
  KvStoreOptions StoreOptions(size_t budget_bytes = 0) const;

 private:
  // Token ids inside the vocabulary, at least one, and room for them in kv.
  Status CheckInput(std::span<const int32_t> tokens, const SequenceKv& kv) const;
  Status RunBatch(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool,
                  std::span<const size_t> logit_rows, float* logits);
  // Per head of the n rows of q_/k_: QK-norm (when the model has it), RoPE with the layer's table;
  // queries scaled by ModelConfig::query_scale().
  void PrepareQk(size_t layer, size_t n, ThreadPool& pool);

  const Model& model_;
  const ModelConfig& c_;
  size_t max_batch_, max_rows_;
  std::vector<size_t> rows_;     // scratch: the logit rows of a Run micro-batch
  AlignedBuffer<float> x_;       // (max_batch, n_embd) residual stream
  AlignedBuffer<float> xn_;      // (max_batch, n_embd) normed input
  AlignedBuffer<float> q_;       // (max_batch, q_dim)
  AlignedBuffer<float> k_;       // (max_batch, kv_dim)
  AlignedBuffer<float> v_;       // (max_batch, kv_dim)
  AlignedBuffer<float> attn_;    // (max_batch, q_dim)
  AlignedBuffer<float> gate_;    // (max_batch, n_ff)
  AlignedBuffer<float> up_;      // (max_batch, n_ff)
  AlignedBuffer<float> proj_;    // (max_batch, n_embd)
  AlignedBuffer<float> rope_;    // (max_batch, rope_dim) cos/sin pairs per token, global layers
  AlignedBuffer<float> rope_local_;  // (max_batch, rope_dim) the same for sliding-window layers
  bool has_local_ = false;           // some layer has a sliding window
};

}  // namespace chorus
