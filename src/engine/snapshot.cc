// Engine::Snapshot: the engine as a dashboard shows it — requests, shared runs of blocks (contexts
// and prefix-cache chains) with their readers and hits, and per-layer precision maps — walked from
// the live objects (include/chorus/engine.h). Read-only; the engine's thread calls it now and then.
#include <algorithm>
#include <unordered_map>

#include "chorus/engine.h"
#include "engine/engine_impl.h"  // Engine::Impl

namespace chorus {
namespace {

// Format codes of the precision maps: one char per KvFormat (kAllKvFormats order).
char FormatCode(KvFormat f) {
  static constexpr char kCodes[] = "abcdefghijklmnopqrstuvwxyz";
  for (size_t i = 0; i < std::size(kAllKvFormats); ++i)
    if (kAllKvFormats[i] == f) return kCodes[i];
  return '?';
}

const char* KindOf(bool pinned) { return pinned ? "context" : "prefix"; }

}  // namespace

EngineSnapshot Engine::Impl::Snapshot(const SnapshotOptions& o) const {
  const EngineCore& m = *core_;
  const ModelConfig& cfg = m.model->config();
  const size_t L = cfg.n_layer;
  const BlockPool& bp = m.store->pool();
  EngineSnapshot s;
  s.stats = Stats();
  s.policy = m.options.policy;
  s.n_layer = L;
  s.fp16_bytes_per_token = m.fp16_bytes(1);
  const KvGeometry geo = m.store->geometry();
  for (KvFormat f : kAllKvFormats) {
    if (CheckKvFormat(f, KvSide::kKey, geo).ok() && CheckKvFormat(f, KvSide::kValue, geo).ok())
      s.formats.push_back({.code = FormatCode(f), .name = std::string(KvFormatName(f)),
                           .k_bits = KvNominalBits(f, KvSide::kKey, geo), .v_bits = KvNominalBits(f, KvSide::kValue, geo)});
  }

  // A layer that never frees blocks (no sliding window) identifies a block by its id.
  size_t global = 0;
  const auto& win = m.store->options().layer_window;
  while (global < win.size() && win[global] != 0) ++global;
  if (global >= L) global = 0;

  // Requests, and which cached blocks each one reads (its borrowed prompt blocks and the prompt
  // blocks it sealed and gave to the cache).
  std::unordered_map<uint64_t, size_t> readers;       // cache key → running requests reading it
  std::unordered_map<uint64_t, const Request*> holder;  // cache key → a prompt that has it (preview)
  for (const auto& [id, a] : scheduler_.requests()) {
    if (a.state.done) continue;
    RequestSnapshot r{.id = id,
                      .phase = a.state.phase,
                      .prompt_tokens = a.prompt.size(),
                      .cached_tokens = a.state.cached_tokens,
                      .generated_tokens = a.state.tokens.size(),
                      .private_bytes = a.seq ? m.SequenceOwnBytes(*a.seq) : 0,
                      .projected_private_bytes = a.state.projected_private_bytes,
                      .context_tokens = a.prompt.size() + a.state.tokens.size(),
                      .reused_tokens = a.state.reused_tokens,
                      .repaired_tokens = a.state.repaired_tokens};
    for (size_t i = 0; i < a.segments.runs(); ++i)
      r.segments.push_back(
          {.at = a.segments.run(i).at, .tokens = a.segments.run(i).tokens, .shift = a.segments.run(i).shift});
    s.requests.push_back(r);
    for (size_t j = 0; j < a.keys.size(); ++j) holder.emplace(a.keys[j], &a);
    if (!a.seq) continue;
    for (size_t j = 0; j < std::min(a.inserted, a.keys.size()); ++j) {
      const std::vector<BlockId>* ids = m.cache->Blocks(a.keys[j]);
      if (!ids) break;
      if ((*ids)[global] != kNoBlock && (*ids)[global] == a.seq->block(global, j)) readers[a.keys[j]]++;
    }
  }

  auto preview = [&](std::span<const int32_t> tokens) {
    std::string t;
    for (size_t i = 0; i < std::min(o.preview_tokens, tokens.size()); ++i) t += m.model->tokenizer().TokenToPiece(tokens[i]);
    return t;
  };
  auto fill_map = [&](SharedRunSnapshot& run, const std::vector<const std::vector<BlockId>*>& blocks) {
    run.has_map = true;
    run.k_map.assign(L, std::string(blocks.size(), '.'));
    run.v_map.assign(L, std::string(blocks.size(), '.'));
    for (size_t j = 0; j < blocks.size(); ++j)
      for (size_t l = 0; l < L; ++l) {
        const BlockId id = (*blocks[j])[l];
        if (id == kNoBlock) continue;
        run.k_map[l][j] = FormatCode(bp.meta(id).k_format);
        run.v_map[l][j] = FormatCode(bp.meta(id).v_format);
      }
  };

  // Prefix-cache chains: a run starts at a root, after a branch, or where the pin or the readers
  // change, and follows single children.
  const std::vector<PrefixCache::EntryInfo> entries = m.cache->Entries();
  std::unordered_map<uint64_t, const PrefixCache::EntryInfo*> by_key;
  std::unordered_map<uint64_t, std::vector<const PrefixCache::EntryInfo*>> children;
  for (const auto& e : entries) by_key[e.key] = &e;
  for (const auto& e : entries) children[e.parent].push_back(&e);
  auto readers_of = [&](uint64_t k) {
    auto it = readers.find(k);
    return it == readers.end() ? size_t{0} : it->second;
  };
  auto starts_run = [&](const PrefixCache::EntryInfo& e) {
    if (e.parent == 0) return true;
    const PrefixCache::EntryInfo& p = *by_key.at(e.parent);
    return p.children != 1 || (p.pins > 0) != (e.pins > 0) || readers_of(p.key) != readers_of(e.key);
  };
  struct Chain {
    SharedRunSnapshot run;
    std::vector<const std::vector<BlockId>*> blocks;
    std::vector<uint64_t> keys;
  };
  std::vector<Chain> chains;
  // Depth first from the roots (children in key order: deterministic), so a document comes before
  // the prompts that continue it.
  std::vector<std::pair<const PrefixCache::EntryInfo*, size_t>> stack;  // (entry, block index)
  auto kids = [&](uint64_t key) {
    std::vector<const PrefixCache::EntryInfo*> v;
    if (auto it = children.find(key); it != children.end()) v = it->second;
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->key > b->key; });  // popped in ascending order
    return v;
  };
  for (auto* r : kids(0)) stack.push_back({r, 0});
  while (!stack.empty()) {
    auto [e, depth] = stack.back();
    stack.pop_back();
    Chain c;
    c.run.kind = KindOf(e->pins > 0);
    c.run.first_token = depth * kBlockTokens;
    c.run.readers = readers_of(e->key);
    c.run.hits = e->hits;
    const PrefixCache::EntryInfo* cur = e;
    size_t d = depth;
    for (;;) {
      c.blocks.push_back(cur->ids);
      c.keys.push_back(cur->key);
      c.run.bytes += cur->bytes;
      c.run.hit_tokens += cur->hits * kBlockTokens;
      const auto next = kids(cur->key);
      if (next.size() == 1 && !starts_run(*next[0])) {
        cur = next[0];
        ++d;
        continue;
      }
      for (auto* n : next) stack.push_back({n, d + 1});
      break;
    }
    c.run.tokens = c.blocks.size() * kBlockTokens;
    if (auto h = holder.find(c.keys[0]); h != holder.end())
      c.run.preview = preview(std::span<const int32_t>(h->second->prompt).subspan(c.run.first_token));
    chains.push_back(std::move(c));
  }
  // A pinned chain is a context's: name it (and preview it from the context's own tokens).
  for (const auto& [cid, ctx] : contexts_.all()) {
    if (ctx.keys.empty()) continue;
    for (Chain& c : chains)
      if (c.run.kind == std::string("context") && c.run.context == 0 &&
          std::find(ctx.keys.begin(), ctx.keys.end(), c.keys[0]) != ctx.keys.end()) {
        c.run.context = cid;
        if (c.run.preview.empty())
          c.run.preview = preview(std::span<const int32_t>(ctx.tokens).subspan(c.run.first_token));
      }
  }
  // Cocktail contexts: held by the context, not the cache; their tables are reordered by format,
  // so the map in token order is the chunk map.
  std::vector<Chain> cocktail;
  for (const auto& [cid, ctx] : contexts_.all()) {
    if (!ctx.keys.empty()) continue;
    Chain c;
    c.run.kind = "cocktail";
    c.run.context = cid;
    c.run.tokens = ctx.tokens.size() / kBlockTokens * kBlockTokens;
    c.run.bytes = ctx.bytes;
    c.run.hits = ctx.hits;
    c.run.readers = scheduler_.Readers(cid);
    c.run.preview = preview(ctx.tokens);
    if (const ChunkMapReport* map = contexts_.chunk_map(cid)) c.run.chunk_map = map->blocks;
    cocktail.push_back(std::move(c));
  }

  // Contexts first, then the chains; cut to the largest max_runs, maps for the first max_maps
  // (contexts, then by bytes).
  std::vector<Chain> all = std::move(cocktail);
  for (Chain& c : chains) all.push_back(std::move(c));
  s.runs_total = all.size();
  auto is_context = [](const Chain& c) { return c.run.kind != std::string("prefix"); };
  std::vector<size_t> order(all.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (is_context(all[a]) != is_context(all[b])) return is_context(all[a]);
    return all[a].run.bytes > all[b].run.bytes;
  });
  std::vector<bool> keep(all.size(), false), map(all.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    keep[order[i]] = i < o.max_runs || is_context(all[order[i]]);
    map[order[i]] = i < o.max_maps;
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (!keep[i]) continue;
    if (map[i] && all[i].run.kind != std::string("cocktail")) fill_map(all[i].run, all[i].blocks);
    s.runs.push_back(std::move(all[i].run));
  }
  return s;
}

}  // namespace chorus
