// EngineCore's byte arithmetic and prompt helpers (engine_core.h).
#include "engine/engine_core.h"

#include <xxhash.h>

#include <algorithm>

#include "kv/kv_footprint.h"  // KvFootprint

namespace chorus {

Scope EngineCore::ScopeOf(std::string_view scope) const {
  if (scope.empty()) return {.id = 0, .salt = salt};
  const uint64_t id = XXH3_64bits(scope.data(), scope.size()) | 1;  // never 0 (the public scope)
  return {.id = id, .salt = XXH3_64bits_withSeed(&id, sizeof id, salt)};
}

size_t EngineCore::fp16_bytes(size_t tokens) const {
  const ModelConfig& c = model->config();
  return tokens * c.n_layer * c.kv_dim() * 2 * sizeof(uint16_t);
}

Result<std::vector<int32_t>> EngineCore::DocumentTokens(std::string_view text) const {
  std::vector<int32_t> tokens = model->tokenizer().Encode(text, /*add_special=*/true, /*parse_special=*/true);
  const size_t specials = model->tokenizer().Encode("", true, true).size();  // BOS, when the model adds one
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos || tokens.size() <= specials)
    return Status::Error("the shared document is empty");
  if (tokens.size() >= n_ctx)
    return Status::Error("the document has {} tokens but an agent's context holds {} (document + prompt + answer)",
                         tokens.size(), n_ctx);
  return tokens;
}

size_t EngineCore::OverheadBytes() const {
  // The scratch, and the pool's slot table beyond the live blocks' slots (BlockCost has those).
  const BlockPool& bp = store->pool();
  return store->Usage().scratch_bytes + bp.table_bytes() - bp.live_blocks() * BlockPool::BlockCost(0, 0);
}

size_t EngineCore::SequenceOwnBytes(const KvSequence& s) const {
  size_t b = s.window_bytes() + s.table_bytes();
  const BlockPool& bp = store->pool();
  for (size_t l = 0; l < model->config().n_layer; ++l)
    for (size_t j = std::max(s.borrowed_blocks(), s.first_block(l)); j < s.sealed_blocks(l); ++j) {
      if (s.attached(j)) continue;  // a segment's block: another request's
      const BlockId id = s.block(l, j);
      b += BlockPool::BlockCost(bp.meta(id).k_bytes, bp.meta(id).v_bytes);
    }
  return b;
}

size_t EngineCore::BlockBytes(size_t from, size_t prompt_blocks, size_t all_blocks, bool f16_prompt) const {
  const KvFootprint fp(store->options());
  const size_t f16 = fp.Block(KvFormat::kF16, KvFormat::kF16), own = fp.Block(private_cfg.k, private_cfg.v);
  const size_t shared = f16_prompt ? f16 : fp.Block(shared_cfg.k, shared_cfg.v);
  size_t bytes = 0;  // per layer (a sliding-window layer frees some: an upper bound)
  for (size_t b = from; b < all_blocks; ++b)
    bytes += b < shared_cfg.sink_blocks ? f16 : b < prompt_blocks ? shared : own;
  return model->config().n_layer * bytes;
}

size_t EngineCore::ProjectedBytes(size_t len, size_t max_tokens, size_t borrowed, bool cocktail) const {
  const size_t total = len + max_tokens;
  // Prompt rows go in at block boundaries, at most prefill_rows per forward call (Scheduler::PlanRows).
  return BlockBytes(borrowed, len / kBlockTokens, total / kBlockTokens, cocktail) +
         KvFootprint(store->options()).Sequence(total, std::min(len - borrowed * kBlockTokens, prefill_rows));
}

EngineCore::Borrow EngineCore::BorrowFromCache(std::span<const uint64_t> keys, size_t max_blocks) const {
  const size_t L = model->config().n_layer;
  size_t k = std::min(cache->Match(keys), max_blocks);
  // A windowed layer's first computed token (at 32·k) must find every block it sees in the cache.
  auto usable = [&](size_t n) {
    for (size_t l = 0; l < L; ++l)
      for (size_t j = store->FirstVisibleBlock(l, n * kBlockTokens); j < n; ++j)
        if ((*cache->Blocks(keys[j]))[l] == kNoBlock) return false;
    return true;
  };
  while (k > 0 && !usable(k)) --k;
  Borrow b{.blocks = k};
  if (k == 0) return b;
  b.tables.assign(L, {});
  b.first.assign(L, 0);
  for (size_t l = 0; l < L; ++l) {
    b.first[l] = store->FirstVisibleBlock(l, k * kBlockTokens);
    for (size_t j = b.first[l]; j < k; ++j) b.tables[l].push_back((*cache->Blocks(keys[j]))[l]);
  }
  return b;
}

}  // namespace chorus
