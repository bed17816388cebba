// KvRecord: the per-chunk KV measurements of a policy and their report (see kv_record.h).
#include "eval/kv_record.h"

#include <fmt/format.h>

#include <algorithm>

namespace chorus::eval {

EngineOptions EvalEngineOptions(const KvOptions& kv, const std::string& model_path, int threads, size_t ctx) {
  return {.model_path = model_path,
          .threads = threads,
          .n_ctx = ctx,
          .policy = kv.policy,
          .sink_blocks = kv.sink_blocks,
          .kv_window = kv.window,
          .kv_budget_bytes = kv.policy.allocator() ? kv.budget_bytes : 0,
          .encoder_path = kv.encoder};
}

double BitsPerElement(const Engine& engine, size_t bytes, size_t tokens) {
  const double elems = double(engine.Fp16Bytes(tokens) / 2);  // tokens x layers x kv_dim x 2 (K, V)
  return elems > 0 ? 8.0 * bytes / elems : 0.0;
}

namespace {
// One character per layer: the bits most of the layer's non-sink blocks were sealed with (F: only
// f16 sink blocks).
std::string BitsLine(const std::vector<std::vector<std::string>>& formats) {
  std::string out;
  for (const std::vector<std::string>& layer : formats) {
    std::map<char, size_t> n;
    for (const std::string& name : layer)
      if (name != "f16") ++n[name.back()];
    char best = 'F';
    for (const auto& [bits, count] : n)
      if (best == 'F' || count > n[best]) best = bits;
    out += best;
  }
  return out;
}
}  // namespace

void KvRecord::Add(const research::SequenceKv& seq, size_t tokens) {
  ++chunks_;
  n_layer_ = seq.k_formats.size();
  if (!seq.encoder.empty()) encoder_ = seq.encoder;
  last_ = seq;
  const size_t bytes = seq.total_bytes;
  peak_bytes_ = std::max(peak_bytes_, bytes);
  total_bytes_ += bytes;
  if (paper()) {
    CocktailChunk ch{.map = seq.blocks,
                     .s_min = seq.s_min,
                     .s_max = seq.s_max,
                     .t_low = seq.t_low,
                     .t_high = seq.t_high,
                     .search_seconds = seq.search_seconds,
                     .bytes = bytes};
    for (size_t b = 0; b < tokens / 32; ++b)  // sealed 32-token blocks only
      (ch.map[b] == 'S' ? ch.sink : ch.map[b] == 'F' ? ch.fp16 : ch.map[b] == '4' ? ch.int4 : ch.int2)++;
    cocktail_chunks_.push_back(std::move(ch));
  }
  if (allocator()) {
    for (size_t l = 0; l < n_layer_; ++l) {
      for (const std::string& f : seq.k_formats[l]) ++k_formats_[f];
      for (const std::string& f : seq.v_formats[l]) ++v_formats_[f];
    }
    ComixChunk ch{.k_bits = BitsLine(seq.k_formats),
                  .v_bits = BitsLine(seq.v_formats),
                  .relevance = relevance() ? seq.blocks : "",
                  .bytes = bytes};
    if (relevance())  // the value bits per block of the middle layer: where the relevance put them
      for (const std::string& name : seq.v_formats[n_layer_ / 2]) ch.v_blocks += name == "f16" ? 'F' : name.back();
    comix_chunks_.push_back(std::move(ch));
  }
}

std::string KvRecord::Name() const {
  return FormatSpec(kv_.policy) + (allocator() && kv_.budget_bytes ? fmt::format("@{}B", kv_.budget_bytes) : "");
}

KvPolicy::CocktailPaper KvRecord::Paper() const {
  const auto* p = std::get_if<KvPolicy::CocktailPaper>(&kv_.policy.rule);
  return p ? *p : KvPolicy::CocktailPaper{};
}

namespace {
std::string Counts(const std::map<std::string, size_t>& m) {
  std::string s;
  for (const auto& [name, n] : m) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, n);
  return s;
}
}  // namespace

void KvRecord::PrintReport(std::FILE* out, size_t chunk_tokens) const {
  const size_t n = std::max<size_t>(1, chunks_);
  const double mean = double(total_bytes_) / n;
  if (paper()) {
    std::fprintf(out,
                 "cocktail-paper chunk maps (query \"%s\"; alpha %g, beta %g, %zu-token chunks → 32-token blocks; "
                 "S sink f16, F fp16, 4 int4, 2 int2; encoder: %s):\n",
                 kv_.query.c_str(), Paper().alpha, Paper().beta, kv_.policy.chunk_tokens(), encoder_.c_str());
    size_t sink = 0, fp16 = 0, int4 = 0, int2 = 0;
    for (size_t i = 0; i < cocktail_chunks_.size(); ++i) {
      const CocktailChunk& ch = cocktail_chunks_[i];
      sink += ch.sink, fp16 += ch.fp16, int4 += ch.int4, int2 += ch.int2;
      if (i < 16)
        std::fprintf(out, "  chunk %-3zu %s  similarity [%.4f, %.4f] T_low %.4f T_high %.4f  %.2f bits/element\n",
                     i + 1, ch.map.c_str(), ch.s_min, ch.s_max, ch.t_low, ch.t_high,
                     BitsPerElement(*engine_, ch.bytes, chunk_tokens));
      else if (i == 16)
        std::fprintf(out, "  ... (%zu more chunks; --json lists them all)\n", cocktail_chunks_.size() - 16);
    }
    std::fprintf(out, "  sealed blocks: %zu sink, %zu fp16, %zu int4, %zu int2\n", sink, fp16, int4, int2);
  } else if (allocator()) {
    const KvPolicy::Allocator& alloc = *kv_.policy.allocator();
    const auto* rel = std::get_if<KvPolicy::Relevance>(&kv_.policy.rule);
    if (rel)
      std::fprintf(out,
                   "cocktail: CoMix's allocator, block errors weighted by 1 + %g x relevance%s (query \"%s\", "
                   "%zu-token chunks, encoder %s); per chunk: relevance level 0..8 per block, then the middle "
                   "layer's value bits per block\n",
                   rel->gain, rel->values_only ? " (values only)" : "", kv_.query.c_str(), rel->chunk_tokens,
                   encoder_.c_str());
    std::fprintf(out,
                 "%s (%s formats, %s): bits per layer 0..%zu of each chunk's sealed blocks (most blocks of "
                 "the layer; F: f16 sink only), K row then V row\n",
                 relevance() ? "cocktail" : "comix", std::string(FamilyName(alloc.family)).c_str(),
                 kv_.budget_bytes ? fmt::format("--kv-budget {} bytes", kv_.budget_bytes).c_str()
                                  : fmt::format("{} bits on average", alloc.avg_bits).c_str(),
                 n_layer_ - 1);
    for (size_t i = 0; i < comix_chunks_.size(); ++i) {
      const ComixChunk& ch = comix_chunks_[i];
      if (i < 16)
        std::fprintf(out, "  chunk %-3zu K %s\n            V %s  %.2f bits/element%s\n", i + 1, ch.k_bits.c_str(),
                     ch.v_bits.c_str(), BitsPerElement(*engine_, ch.bytes, chunk_tokens),
                     ch.relevance.empty() ? ""
                                          : fmt::format("\n            relevance {}\n            V bits    {}",
                                                        ch.relevance, ch.v_blocks)
                                                .c_str());
      else if (i == 16)
        std::fprintf(out, "  ... (%zu more chunks; --json lists them all)\n", comix_chunks_.size() - 16);
    }
    std::fprintf(out, "  sealed blocks, all chunks: K %s; V %s\n", Counts(k_formats_).c_str(),
                 Counts(v_formats_).c_str());
    const Engine::AllocationStats t = engine_->AllocationTiming();
    std::fprintf(out, "  %zu reallocations, %.1f us mean, %.1f us max\n", t.count, t.mean_us, t.max_us);
  }
  std::fprintf(out,
               "  measured KV: %.2f MiB mean, %.2f MiB peak per %zu-token chunk = %.2f bits/element mean "
               "(fp16 KV: %.2f MiB)%s\n",
               mean / 1048576.0, peak_bytes_ / 1048576.0, chunk_tokens,
               BitsPerElement(*engine_, size_t(mean), chunk_tokens), engine_->Fp16Bytes(chunk_tokens) / 1048576.0,
               allocator() && kv_.budget_bytes ? fmt::format("; budget {} bytes", kv_.budget_bytes).c_str() : "");
}

nlohmann::json KvRecord::ReportJson(size_t chunk_tokens) const {
  const double mean = double(total_bytes_) / std::max<size_t>(1, chunks_);
  nlohmann::json j = {{"policy", ToString(kv_.policy.kind())},
                      {"name", Name()},
                      {"kv_peak_bytes", peak_bytes_},
                      {"kv_mean_bytes", mean},
                      {"kv_mean_bits_per_element", BitsPerElement(*engine_, size_t(mean), chunk_tokens)}};
  if (allocator()) {
    const KvPolicy::Allocator& alloc = *kv_.policy.allocator();
    j["budget_bytes"] = kv_.budget_bytes;
    j["avg_bits"] = alloc.avg_bits;
    j["family"] = FamilyName(alloc.family);
    j["tiers"] = fmt::format("{}", fmt::join(alloc.tiers, ","));
    j["min_k_bits"] = alloc.min_k_bits;
    j["rank"] = alloc.rank == KvPolicy::Rank::kMeasured     ? "measured"
                : alloc.rank == KvPolicy::Rank::kCalibrated ? "calibrated"
                : alloc.rank == KvPolicy::Rank::kBound      ? "bound"
                                                            : "expected";
    if (const auto* rel = std::get_if<KvPolicy::Relevance>(&kv_.policy.rule)) {
      j["query"] = kv_.query;
      j["relevance_gain"] = rel->gain;
      j["relevance_values_only"] = rel->values_only;
      j["encoder"] = encoder_;
    }
    for (const ComixChunk& ch : comix_chunks_)
      j["chunk_bits"].push_back({{"k", ch.k_bits},
                                 {"v", ch.v_bits},
                                 {"relevance", ch.relevance},
                                 {"v_bits_per_block", ch.v_blocks},
                                 {"kv_bytes", ch.bytes},
                                 {"bits_per_element", BitsPerElement(*engine_, ch.bytes, chunk_tokens)}});
    j["k_formats"] = k_formats_;
    j["v_formats"] = v_formats_;
    j["reallocations"] = engine_->AllocationTiming().count;
  }
  if (paper()) {
    j["query"] = kv_.query;
    j["alpha"] = Paper().alpha;
    j["beta"] = Paper().beta;
    j["chunk_tokens"] = kv_.policy.chunk_tokens();
    j["encoder"] = encoder_;
    for (const CocktailChunk& ch : cocktail_chunks_)
      j["chunk_maps"].push_back({{"map", ch.map},
                                 {"sink", ch.sink},
                                 {"fp16", ch.fp16},
                                 {"int4", ch.int4},
                                 {"int2", ch.int2},
                                 {"s_min", ch.s_min},
                                 {"s_max", ch.s_max},
                                 {"t_low", ch.t_low},
                                 {"t_high", ch.t_high},
                                 {"search_seconds", ch.search_seconds},
                                 {"kv_bytes", ch.bytes},
                                 {"bits_per_element", BitsPerElement(*engine_, ch.bytes, chunk_tokens)}});
  }
  return j;
}

}  // namespace chorus::eval
