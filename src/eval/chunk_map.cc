// Printing Cocktail's chunk map (see chunk_map.h): the paper's scheme — the per-block precision
// string, counts, the similarity range and thresholds — or chorus's cocktail (the allocator with
// relevance) — each block's relevance level and the bits its K and V got per layer; then measured
// bits/element, the encoder that ran, and timings.
#include "eval/chunk_map.h"

#include <array>
#include <string>
#include <vector>

namespace chorus::eval {
namespace {

// Stored maps (F f16, else bits) → counts per code over all layers, e.g. "3: 400, 4: 50, F (f16): 30".
std::string CountBits(const std::vector<std::string>& maps) {
  std::array<size_t, 256> n{};
  for (const std::string& m : maps)
    for (char c : m) n[static_cast<unsigned char>(c)]++;
  std::string out;
  for (const auto& [c, name] : {std::pair{'2', "2"}, {'3', "3"}, {'4', "4"}, {'8', "8 (q8)"}, {'F', "F (f16)"}})
    if (const size_t k = n[static_cast<unsigned char>(c)])
      out += (out.empty() ? "" : ", ") + std::string(name) + ": " + std::to_string(k);
  return out;
}

}  // namespace

void PrintChunkMap(const ChunkMapReport& m, size_t shared_bytes, size_t tokens, const Engine& engine, std::FILE* out) {
  PrintChunkMap(m, shared_bytes, tokens, engine.Fp16Bytes(tokens), out);
}

void PrintChunkMap(const ChunkMapReport& m, size_t shared_bytes, size_t tokens, size_t fp16_bytes, std::FILE* out) {
  if (m.policy == KvPolicyKind::kRelevance) {
    std::fprintf(out,
                 "cocktail (the allocator, weighted by relevance): relevance per 32-token block (%zu chunks of %zu "
                 "tokens; S sink f16, 0..8 = min-max scaled relevance; similarity [%.4f, %.4f]):\n  %s\n",
                 m.chunks, m.chunk_tokens, m.s_min, m.s_max, m.blocks.c_str());
    const size_t n = m.stored_k.size();
    for (size_t l : {size_t{0}, n / 2, n - 1}) {
      if (l >= n) continue;
      std::fprintf(out, "  layer %2zu  K %s\n            V %s\n", l, m.stored_k[l].c_str(), m.stored_v[l].c_str());
    }
    std::fprintf(out, "  blocks x layers stored: K %s; V %s\n", CountBits(m.stored_k).c_str(),
                 CountBits(m.stored_v).c_str());
  } else {
    std::fprintf(
        out,
        "cocktail chunk map (%zu chunks of %zu tokens → 32-token blocks; S sink f16, F fp16, 4 int4, 2 int2):\n"
        "  %s\n",
        m.chunks, m.chunk_tokens, m.blocks.c_str());
    std::fprintf(out,
                 "  sealed blocks: %zu sink, %zu fp16, %zu int4, %zu int2; similarity [%.4f, %.4f], T_low %.4f, "
                 "T_high %.4f\n",
                 m.sink, m.fp16, m.int4, m.int2, m.s_min, m.s_max, m.t_low, m.t_high);
  }
  const double fp16 = double(fp16_bytes);
  std::fprintf(out, "  measured: %.2f MiB for %zu tokens = %.2f bits/element (%.1f %% of fp16)\n",
               shared_bytes / 1048576.0, tokens, 16.0 * shared_bytes / fp16, 100.0 * shared_bytes / fp16);
  std::fprintf(out, "  encoder: %s; search %.2f s, prefill+seal %.2f s, reorder %.2g s\n", m.encoder.c_str(),
               m.search_seconds, m.prefill_seconds, m.reorder_seconds);
}

nlohmann::json ChunkMapJson(const ChunkMapReport& m) {
  nlohmann::json j = {{"policy", ToString(m.policy)},
                      {"encoder", m.encoder},
                      {"blocks", m.blocks},
                      {"sink", m.sink},
                      {"fp16", m.fp16},
                      {"int4", m.int4},
                      {"int2", m.int2},
                      {"chunks", m.chunks},
                      {"chunk_tokens", m.chunk_tokens},
                      {"s_min", m.s_min},
                      {"s_max", m.s_max},
                      {"t_low", m.t_low},
                      {"t_high", m.t_high},
                      {"search_seconds", m.search_seconds},
                      {"prefill_seconds", m.prefill_seconds},
                      {"reorder_seconds", m.reorder_seconds}};
  if (m.policy == KvPolicyKind::kRelevance)  // per layer, one char per sealed block in token order
    j.update({{"alloc_k", m.alloc_k}, {"alloc_v", m.alloc_v}, {"stored_k", m.stored_k}, {"stored_v", m.stored_v}});
  return j;
}

}  // namespace chorus::eval
