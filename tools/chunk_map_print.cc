// Printing Cocktail's chunk map (tools/common.h): the per-block precision string, counts, the
// similarity range and thresholds, measured bits/element, the encoder that ran, and timings.
#include "tools/common.h"

namespace chorus::cli {

void PrintChunkMap(const ChunkMapReport& m, size_t shared_bytes, size_t tokens, const Engine& engine, std::FILE* out) {
  std::fprintf(out, "cocktail chunk map (%zu chunks of %zu tokens → 32-token blocks; S sink f16, F fp16, 4 int4, 2 int2):\n"
              "  %s\n",
              m.chunks, m.chunk_tokens, m.blocks.c_str());
  std::fprintf(out, "  sealed blocks: %zu sink, %zu fp16, %zu int4, %zu int2; similarity [%.4f, %.4f], T_low %.4f, "
              "T_high %.4f\n",
              m.sink, m.fp16, m.int4, m.int2, m.s_min, m.s_max, m.t_low, m.t_high);
  const double fp16 = double(engine.Fp16Bytes(tokens));
  std::fprintf(out, "  measured: %.2f MiB for %zu tokens = %.2f bits/element (%.1f %% of fp16)\n", shared_bytes / 1048576.0,
              tokens, 16.0 * shared_bytes / fp16, 100.0 * shared_bytes / fp16);
  std::fprintf(out, "  encoder: %s; search %.2f s, prefill+seal %.2f s, reorder %.2g s\n", m.encoder.c_str(),
              m.search_seconds, m.prefill_seconds, m.reorder_seconds);
}

nlohmann::json ChunkMapJson(const ChunkMapReport& m) {
  return {{"encoder", m.encoder}, {"blocks", m.blocks}, {"sink", m.sink}, {"fp16", m.fp16}, {"int4", m.int4},
          {"int2", m.int2}, {"chunks", m.chunks}, {"chunk_tokens", m.chunk_tokens}, {"s_min", m.s_min},
          {"s_max", m.s_max}, {"t_low", m.t_low}, {"t_high", m.t_high}, {"search_seconds", m.search_seconds},
          {"prefill_seconds", m.prefill_seconds}, {"reorder_seconds", m.reorder_seconds}};
}

}  // namespace chorus::cli
