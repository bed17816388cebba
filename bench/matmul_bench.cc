// MatMul micro-benchmarks on the SmolLM2-135M and Gemma 3 270M shapes (Q4_1 / Q5_0 / Q4_K / Q6_K / Q4_0
// projections, Q8_0 token_embd/output): n_tok 1 (decode, memory-bound) and 512 (prefill, compute-bound),
// 1 and 2 threads; ModelMatMuls / GemmaMatMuls: every matrix of a model (distinct memory) per iteration.
// Weights are random valid blocks in enough copies (≥ 96 MB, the model's per-token weight traffic)
// that every iteration reads them from L3/DRAM as decode does, not from L2.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <memory>
#include <random>
#include <vector>

#include "ops/matmul.h"
#include "ops/repack.h"
#include "util/aligned_buffer.h"
#include "util/fp16.h"

namespace chorus {
namespace {

struct Shape {
  const char* name;
  GgmlType type;
  size_t rows, cols;
};
constexpr Shape kShapes[] = {
    {"attn_q_576x576_Q4_1", GgmlType::kQ4_1, 576, 576},
    {"attn_kv_192x576_Q4_1", GgmlType::kQ4_1, 192, 576},
    {"ffn_up_1536x576_Q4_1", GgmlType::kQ4_1, 1536, 576},
    {"ffn_down_576x1536_Q4_1", GgmlType::kQ4_1, 576, 1536},
    {"output_49152x576_Q8_0", GgmlType::kQ8_0, 49152, 576},
    {"ffn_up_1536x576_Q4_0", GgmlType::kQ4_0, 1536, 576},
    {"ffn_up_1536x576_Q4_K", GgmlType::kQ4_K, 1536, 768},
    {"ffn_up_1536x576_Q6_K", GgmlType::kQ6_K, 1536, 768},
    {"ffn_up_1536x576_F16", GgmlType::kF16, 1536, 576},
    // Gemma 3 270M Q4_K_M (models/gemma-3-270m-q4_k_m.gguf): the tied output and one of each other type
    {"gemma3_output_262144x640_Q8_0", GgmlType::kQ8_0, 262144, 640},
    {"gemma3_ffn_up_2048x640_Q5_0", GgmlType::kQ5_0, 2048, 640},
    {"gemma3_attn_q_1024x640_Q5_0", GgmlType::kQ5_0, 1024, 640},
    {"gemma3_attn_k_256x640_Q5_0", GgmlType::kQ5_0, 256, 640},
    {"gemma3_attn_output_640x1024_Q4_K", GgmlType::kQ4_K, 640, 1024},
    {"gemma3_ffn_down_640x2048_Q6_K", GgmlType::kQ6_K, 640, 2048},
    // the same shapes in Q4_0 (llama-quantize's Q4_0 conversion of that file): the per-weight speed
    // the Q5_0 / Q4_K / Q6_K kernels are measured against
    {"gemma3_ffn_up_2048x640_Q4_0", GgmlType::kQ4_0, 2048, 640},
    {"gemma3_attn_output_640x1024_Q4_0", GgmlType::kQ4_0, 640, 1024},
    {"gemma3_ffn_down_640x2048_Q4_0", GgmlType::kQ4_0, 640, 2048},
};

// Random bytes with every block's f16 scale fields set to small finite values.
void FillRandomBlocks(GgmlType type, uint8_t* p, size_t bytes, std::mt19937& rng) {
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(rng());
  const auto& tr = GgmlTraitsOf(type);
  const uint16_t h = F32ToF16(0.01f);
  for (size_t b = 0; b + tr.block_bytes <= bytes; b += tr.block_bytes) {
    uint8_t* blk = p + b;
    switch (type) {
      case GgmlType::kQ6_K: std::memcpy(blk + 208, &h, 2); break;
      case GgmlType::kF16: std::memcpy(blk, &h, 2); break;
      case GgmlType::kQ4_1: case GgmlType::kQ5_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
        std::memcpy(blk, &h, 2);
        std::memcpy(blk + 2, &h, 2);
        break;
      default: std::memcpy(blk, &h, 2); break;
    }
  }
}

struct Weights {
  AlignedBuffer<uint8_t> bytes;
  std::vector<WeightView> copies;
};

const Weights& WeightsFor(const Shape& s) {
  static std::unique_ptr<Weights> cache[std::size(kShapes)];
  const size_t idx = &s - kShapes;
  if (!cache[idx]) {
    auto w = std::make_unique<Weights>();
    const size_t row_bytes = *GgmlRowBytes(s.type, s.cols), mat = (s.rows * row_bytes + 63) / 64 * 64;
    // distinct copies read in turn: 96 MiB by default, CHORUS_BENCH_MIB to read past a large L3 (this
    // VM reports 480 MiB: 96 MiB of copies may be served from it, not from DRAM)
    const char* mib = std::getenv("CHORUS_BENCH_MIB");
    const int set_mib = mib ? std::atoi(mib) : 96;
    if (set_mib <= 0) {
      std::fprintf(stderr, "matmul_bench: CHORUS_BENCH_MIB=%s is not a positive number of MiB\n", mib);
      std::exit(2);
    }
    const size_t set = static_cast<size_t>(set_mib) * (size_t{1} << 20);
    const size_t n_copies = std::max<size_t>(1, set / mat);
    w->bytes.Resize(mat * n_copies);
    std::mt19937 rng(1);
    FillRandomBlocks(s.type, w->bytes.data(), mat * n_copies, rng);
    for (size_t c = 0; c < n_copies; ++c)
      w->copies.push_back(WeightView{s.type, w->bytes.data() + c * mat, s.rows, s.cols, row_bytes});
    cache[idx] = std::move(w);
  }
  return *cache[idx];
}

void BM_MatMul(benchmark::State& state, const Shape* s) {
  const size_t n_tok = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const Weights& w = WeightsFor(*s);
  ThreadPool pool(threads);
  std::vector<float> x(n_tok * s->cols), y(n_tok * s->rows);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  size_t c = 0;
  for (auto _ : state) {
    MatMul(w.copies[c], x.data(), n_tok, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    c = c + 1 == w.copies.size() ? 0 : c + 1;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * s->rows * s->cols * n_tok * iters / 1e9,
                                                 benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(s->rows) * w.copies[0].row_bytes * iters / 1e9,
                                              benchmark::Counter::kIsRate);
  state.SetLabel(MatMulPath());
}

// Distinct random matrices of the given shapes, laid out one after another (64-byte aligned).
struct ModelMats {
  AlignedBuffer<uint8_t> bytes, packed;
  std::vector<WeightView> views;
  std::vector<WeightView> packed_views;  // views + the repacked copies a model makes at load (MatMulReadsPacked)
  std::vector<WeightView> q4_packed_views;  // the same with only the Q4 types' copies
  double flops_per_tok = 0, weight_bytes = 0;
};
void BuildModelMats(const std::vector<Shape>& all, uint32_t seed, ModelMats* m) {
  size_t total = 0;
  for (const Shape& s : all) total += (s.rows * *GgmlRowBytes(s.type, s.cols) + 63) / 64 * 64;
  m->bytes.Resize(total);
  std::mt19937 rng(seed);
  size_t off = 0;
  for (const Shape& s : all) {
    const size_t rb = *GgmlRowBytes(s.type, s.cols), n = (s.rows * rb + 63) / 64 * 64;
    FillRandomBlocks(s.type, m->bytes.data() + off, n, rng);
    m->views.push_back(WeightView{s.type, m->bytes.data() + off, s.rows, s.cols, rb});
    m->flops_per_tok += 2.0 * s.rows * s.cols;
    m->weight_bytes += static_cast<double>(s.rows) * rb;
    off += n;
  }
  size_t packed = 0;
  for (const WeightView& v : m->views)
    if (IsRepackableType(v.type) && MatMulReadsPacked(v.type)) packed += RepackedBytes(v);
  m->packed.Resize(packed);
  m->packed_views = m->views;
  off = 0;
  for (WeightView& v : m->packed_views) {
    if (!IsRepackableType(v.type) || !MatMulReadsPacked(v.type)) continue;
    RepackPanels(v, m->packed.data() + off);
    v.packed = m->packed.data() + off;
    off += RepackedBytes(v);
  }
  m->q4_packed_views = m->packed_views;
  for (WeightView& v : m->q4_packed_views)
    if (v.type == GgmlType::kQ8_0) v.packed = nullptr;
}

void SetModelCounters(benchmark::State& state, double flops_per_tok, double weight_bytes, size_t n_tok) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flops_per_tok * n_tok * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(weight_bytes * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["ms/token"] = benchmark::Counter(iters * n_tok / 1e3,
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// One decode token's worth of SmolLM2-135M projections: 30 layers × (q, k, v, o, gate, up, down)
// Q4_1 + the Q8_0 output matrix, all distinct memory (≈ 96 MB), n_tok tokens at once.
// fused = 1: q/k/v and gate/up go through MatMulMany (one quantization + dispatch each).
void BM_ModelMatMuls(benchmark::State& state) {
  const size_t n_tok = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const bool fused = state.range(2) != 0;
  const int64_t packed = state.range(3);  // 1: repacked as the model loads them; 2: the Q4_1 ones only
  const Shape layer[] = {{"q", GgmlType::kQ4_1, 576, 576},  {"k", GgmlType::kQ4_1, 192, 576},
                         {"v", GgmlType::kQ4_1, 192, 576},  {"o", GgmlType::kQ4_1, 576, 576},
                         {"g", GgmlType::kQ4_1, 1536, 576}, {"u", GgmlType::kQ4_1, 1536, 576},
                         {"d", GgmlType::kQ4_1, 576, 1536}};
  static ModelMats mats;
  if (mats.views.empty()) {
    std::vector<Shape> all;
    for (int l = 0; l < 30; ++l) all.insert(all.end(), std::begin(layer), std::end(layer));
    all.push_back({"out", GgmlType::kQ8_0, 49152, 576});
    BuildModelMats(all, 3, &mats);
  }
  const std::vector<WeightView>& views = packed == 1 ? mats.packed_views : packed == 2 ? mats.q4_packed_views : mats.views;
  ThreadPool pool(threads);
  std::vector<float> x(n_tok * 1536), y(n_tok * 49152);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  std::vector<float> y2(n_tok * 1536), y3(n_tok * 1536);
  for (auto _ : state) {
    if (!fused) {
      for (const WeightView& v : views) MatMul(v, x.data(), n_tok, y.data(), pool);
    } else {
      for (size_t l = 0; l < 30; ++l) {
        const WeightView* v = &views[7 * l];
        float* qkv[3] = {y.data(), y2.data(), y3.data()};
        MatMulMany(std::span<const WeightView>(v, 3), x.data(), n_tok, qkv, pool);
        MatMul(v[3], x.data(), n_tok, y.data(), pool);
        float* gu[2] = {y2.data(), y3.data()};
        MatMulMany(std::span<const WeightView>(v + 4, 2), x.data(), n_tok, gu, pool);
        MatMul(v[6], x.data(), n_tok, y.data(), pool);
      }
      MatMul(views.back(), x.data(), n_tok, y.data(), pool);
    }
    benchmark::DoNotOptimize(y.data());
  }
  SetModelCounters(state, mats.flops_per_tok, mats.weight_bytes, n_tok);
}

// Gemma 3 270M's weight matmuls as ForwardPass runs them (one MatMul per matrix): 18 layers of
// q 1024×640, k, v 256×640, o 640×1024, gate, up 2048×640, down 640×2048, in the Q4_K_M file's types
// (q, k, gate, up Q5_0; v Q5_0 / Q8_0 and down Q4_K / Q6_K on alternate layers, 9 each as in the
// file; o Q4_K; types = 0) or all Q4_0 (types = 1: llama-quantize's Q4_0 conversion), all Q5_0 (2), the
// file's with Q5_0 for its K-quants (3) or for its Q8_0 v (4): which type slows the mix; + the Q8_0 tied output
// 262,144×640 when n_tok = 1 (a decode step reads it; a prefill computes logits for its last row only).
void BM_GemmaMatMuls(benchmark::State& state) {
  const size_t n_tok = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const int64_t types = state.range(2);
  static ModelMats mats[5];
  ModelMats& m = mats[types];
  if (m.views.empty()) {
    std::vector<Shape> all;
    for (int l = 0; l < 18; ++l) {
      const bool odd = l % 2 == 1;
      auto t = [&](GgmlType k) {
        if (types == 3 && (k == GgmlType::kQ4_K || k == GgmlType::kQ6_K)) return GgmlType::kQ5_0;
        if (types == 4 && k == GgmlType::kQ8_0) return GgmlType::kQ5_0;
        return types == 1 ? GgmlType::kQ4_0 : types == 2 ? GgmlType::kQ5_0 : k;
      };
      const Shape layer[] = {{"q", t(GgmlType::kQ5_0), 1024, 640},
                             {"k", t(GgmlType::kQ5_0), 256, 640},
                             {"v", t(odd ? GgmlType::kQ8_0 : GgmlType::kQ5_0), 256, 640},
                             {"o", t(GgmlType::kQ4_K), 640, 1024},
                             {"g", t(GgmlType::kQ5_0), 2048, 640},
                             {"u", t(GgmlType::kQ5_0), 2048, 640},
                             {"d", t(odd ? GgmlType::kQ6_K : GgmlType::kQ4_K), 640, 2048}};
      all.insert(all.end(), std::begin(layer), std::end(layer));
    }
    all.push_back({"out", GgmlType::kQ8_0, 262144, 640});
    BuildModelMats(all, 5, &m);
  }
  const size_t n_mats = m.views.size() - (n_tok == 1 ? 0 : 1);
  ThreadPool pool(threads);
  std::vector<float> x(n_tok * 2048), y(n_tok * (n_tok == 1 ? 262144 : 2048));
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  // Each type's time and bytes within the sequence (its GB/s there, not alone): GB/s_<type> counters;
  // the tied output (the last matrix) counted apart as "out".
  std::map<std::string, std::pair<double, double>> by_type;  // name → (seconds, bytes per iteration)
  std::vector<std::pair<double, double>*> slot(n_mats);
  for (size_t i = 0; i < n_mats; ++i) {
    const WeightView& w = m.views[i];
    auto& e = by_type[i + 1 == m.views.size() ? std::string("out") : std::string(GgmlTraitsOf(w.type).name)];
    e.second += static_cast<double>(w.rows) * w.row_bytes;
    slot[i] = &e;
  }
  for (auto _ : state) {
    for (size_t i = 0; i < n_mats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      MatMul(m.views[i], x.data(), n_tok, y.data(), pool);
      slot[i]->first += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    benchmark::DoNotOptimize(y.data());
  }
  for (const auto& [name, e] : by_type)
    if (e.first > 0) state.counters["GB/s_" + name] = e.second * static_cast<double>(state.iterations()) / e.first / 1e9;
  double flops = m.flops_per_tok, bytes = m.weight_bytes;  // of the matrices run
  if (n_tok != 1) {
    flops -= 2.0 * m.views.back().rows * m.views.back().cols;
    bytes -= static_cast<double>(m.views.back().rows) * m.views.back().row_bytes;
  }
  SetModelCounters(state, flops, bytes, n_tok);
}

void RegisterAll() {
  for (const Shape& s : kShapes) {
    auto* b = benchmark::RegisterBenchmark((std::string("MatMul/") + s.name).c_str(), BM_MatMul, &s);
    b->ArgNames({"n_tok", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
    for (int64_t n : {1, 512})
      for (int64_t t : {1, 2}) b->Args({n, t});
    b->Args({15, 1});  // 15 agents decoding in one batch
  }
  auto* model = benchmark::RegisterBenchmark("ModelMatMuls", BM_ModelMatMuls);
  model->ArgNames({"n_tok", "threads", "fused", "packed"});
  for (int64_t packed : {1, 2, 0}) {
    model->Args({1, 1, 0, packed})->Args({1, 2, 0, packed})->Args({1, 1, 1, packed})->Args({1, 2, 1, packed})
        ->Args({512, 1, 0, packed})->Args({512, 2, 0, packed})->Args({512, 1, 1, packed})->Args({512, 2, 1, packed})
        // batched decode of many agents: around the decode-kernel / panel-GEMM crossover
        ->Args({8, 1, 1, packed})->Args({15, 1, 1, packed})->Args({15, 2, 1, packed})->Args({16, 1, 1, packed})->Args({24, 1, 1, packed});
  }
  model->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("GemmaMatMuls", BM_GemmaMatMuls)
      ->ArgNames({"n_tok", "threads", "types"})
      ->Args({512, 1, 0})->Args({512, 1, 1})->Args({512, 2, 0})->Args({512, 2, 1})
      ->Args({1, 1, 0})->Args({1, 1, 1})->Args({1, 2, 0})->Args({1, 2, 1})->Args({1, 1, 2})->Args({1, 1, 3})->Args({1, 1, 4})
      ->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  chorus::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
