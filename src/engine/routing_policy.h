// RoutingPolicy: the engine's PrecisionPolicy. A sequence's leading blocks that hold prompt tokens
// (a shared document, a request's prompt — any of them may be borrowed by another request) get the
// shared formats; blocks holding generated tokens get the private ones; a Cocktail context's
// blocks follow its chunk map; with CoMix, one policy decides every block.
#pragma once
#include <cstdint>
#include <map>
#include <memory>

#include "engine/kv_config.h"        // KvConfig
#include "policy/cocktail_policy.h"  // CocktailPolicy
#include "policy/uniform_policy.h"   // UniformPolicy

namespace chorus {

class RoutingPolicy : public PrecisionPolicy {
 public:
  RoutingPolicy(const KvConfig& shared, const KvConfig& priv)
      : shared_(shared.k, shared.v, shared.sink_blocks), private_(priv.k, priv.v, priv.sink_blocks) {}
  BlockFormats FormatFor(const BlockInfo& info) override {
    if (auto it = cocktail_.find(info.seq_id); it != cocktail_.end() &&
                                               (it->second.whole || info.block_index < it->second.p->map().size()))
      return it->second.p->FormatFor(info);
    if (all_) return all_->FormatFor(info);
    auto it = shared_blocks_.find(info.seq_id);
    return it != shared_blocks_.end() && info.block_index < it->second ? shared_.FormatFor(info)
                                                                       : private_.FormatFor(info);
  }
  void Observe(const Observation& obs) override {
    if (all_) all_->Observe(obs);
  }
  void Unseal(const BlockInfo& info, const BlockFormats& f) override {  // CoMix counts sealed blocks
    if (all_) all_->Unseal(info, f);
  }
  void UseForAll(PrecisionPolicy* p) { all_ = p; }  // comix: one policy for every sequence
  // Blocks [0, n) of the sequence get the shared formats (SIZE_MAX: all of them).
  void SetSharedBlocks(uint64_t seq_id, size_t n) { shared_blocks_[seq_id] = n; }
  // A Cocktail map decides the blocks it covers: all of a context's blocks (whole), or, for a
  // sequence continuing that context, the blocks the map covers (the document's tail block), the
  // rest by the rules above.
  void SetCocktail(uint64_t seq_id, std::shared_ptr<CocktailPolicy> p, bool whole) {
    cocktail_[seq_id] = {std::move(p), whole};
  }
  void Forget(uint64_t seq_id) {
    shared_blocks_.erase(seq_id);
    cocktail_.erase(seq_id);
  }

 private:
  UniformPolicy shared_, private_;
  std::map<uint64_t, size_t> shared_blocks_;
  PrecisionPolicy* all_ = nullptr;
  struct Map {
    std::shared_ptr<CocktailPolicy> p;
    bool whole;
  };
  std::map<uint64_t, Map> cocktail_;
};

}  // namespace chorus
