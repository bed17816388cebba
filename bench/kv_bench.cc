// Micro-benchmark of the per-block KV kernels: Score and Accumulate throughput per format, and
// BM_Attend, the whole stacked step (score + fold + accumulate) over a shared run of blocks
// (tokens/s for one KV head, n_q stacked queries — 3 = one agent's GQA group, 45 = 15 agents — and
// GFLOP/s counting 2·head_dim flops per (query, token); SmolLM2-135M's 3 × 64 geometry).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kv/attention_math.h"   // SoftmaxFold (BM_Fold)
#include "kv/block_attention.h"  // BlockAttention (stacked steps; one agent at depth)
#include "kv/kv_format.h"   // EncodeKvBlock, KvBlockBytes
#include "kv/kv_kernels.h"  // GetKvBlockKernels

namespace chorus {
namespace {

constexpr KvGeometry kGeometry{3, 64};
constexpr size_t kBlocks = 64;  // 2048 tokens: the working set stays in L2

struct Fixture {
  std::vector<uint8_t> blocks;  // (kBlocks, KvBlockBytes)
  size_t block_bytes;
};

Fixture MakeBlocks(KvFormat f, KvSide side) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  Fixture fx;
  fx.block_bytes = KvBlockBytes(f, side, kGeometry);
  fx.blocks.resize(kBlocks * fx.block_bytes);
  std::vector<float> x(kBlockTokens * kGeometry.n_head_kv * kGeometry.head_dim);
  for (size_t b = 0; b < kBlocks; ++b) {
    for (auto& v : x) v = nd(rng);
    if (!EncodeKvBlock(f, side, kGeometry, x.data(), &fx.blocks[b * fx.block_bytes], {.layer_absmax = 8}).ok()) {
      std::abort();
    }
  }
  return fx;
}

// GFLOP/s of the multiply-adds: 2·head_dim per (query, token).
void SetFlops(benchmark::State& state, size_t n_q) {
  const double flops = 2.0 * kGeometry.head_dim * n_q * kBlocks * kBlockTokens;
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Score(benchmark::State& state) {
  const KvFormat f = kAllKvFormats[state.range(0)];
  state.SetLabel(std::string(KvFormatName(f)));
  const Fixture fx = MakeBlocks(f, KvSide::kKey);
  const auto kNq = static_cast<size_t>(state.range(1));
  const KvScoreFn score = GetKvBlockKernels(f).score;  // dispatch once, outside the loop
  std::vector<float> q(kNq * kGeometry.head_dim, 0.125f), scores(kNq * kBlockTokens);
  for (auto _ : state) {
    for (size_t b = 0; b < kBlocks; ++b) {
      score(kGeometry, &fx.blocks[b * fx.block_bytes], 1, q.data(), kNq, scores.data(), kBlockTokens);
      benchmark::DoNotOptimize(scores.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBlocks * kBlockTokens);  // tokens of one KV head
  state.SetBytesProcessed(state.iterations() * kBlocks * KvHeadTileBytes(f, KvSide::kKey, kGeometry.head_dim));
  SetFlops(state, kNq);
}

// tq4 keys' integer scores (score_q8; skipped where the CPU lacks them), queries quantized once.
void BM_ScoreQ8(benchmark::State& state) {
  const KvFormat f = KvFormat::kTq4;
  state.SetLabel("tq4 int8");
  const KvScoreQ8Fn score = GetKvBlockKernels(f).score_q8;
  if (!score) {
    state.SkipWithError("no integer key scores on this CPU");
    return;
  }
  const Fixture fx = MakeBlocks(f, KvSide::kKey);
  const auto kNq = static_cast<size_t>(state.range(0));
  const size_t d = kGeometry.head_dim;
  std::vector<float> q(kNq * d), scores(kNq * kBlockTokens), scale(kNq);
  for (size_t k = 0; k < q.size(); ++k) q[k] = 0.125f * static_cast<float>(k % 7) - 0.375f;
  std::vector<int8_t> q8(kNq * d);
  std::vector<int32_t> bias(kNq);
  QuantizeQueriesQ8(q.data(), kNq, d, q8.data(), scale.data(), bias.data());
  std::vector<int8_t> qp((kNq + 16) * d, 0);  // as BlockAttention gives the AMX kernel (used from 16 queries)
  std::copy_n(q8.data(), q8.size(), qp.data());
  const QueryQ8 qq{q8.data(), scale.data(), bias.data(), qp.data()};
  for (auto _ : state) {
    for (size_t b = 0; b < kBlocks; ++b) {
      score(kGeometry, &fx.blocks[b * fx.block_bytes], 1, qq, kNq, scores.data(), kBlockTokens);
      benchmark::DoNotOptimize(scores.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBlocks * kBlockTokens);
  state.SetBytesProcessed(state.iterations() * kBlocks * KvHeadTileBytes(f, KvSide::kKey, d));
  SetFlops(state, kNq);
}

// Times `accumulate` over the fixture's value blocks (BM_Accumulate, BM_AccumulateQ8).
void RunAccumulate(benchmark::State& state, KvFormat f, KvAccumulateFn accumulate) {
  const Fixture fx = MakeBlocks(f, KvSide::kValue);
  const auto kNq = static_cast<size_t>(state.range(1));
  std::vector<float> p(kNq * kBlockTokens, 1.0f / 2048), acc(kNq * kGeometry.head_dim, 0.0f);
  for (auto _ : state) {
    for (size_t b = 0; b < kBlocks; ++b) {
      accumulate(kGeometry, &fx.blocks[b * fx.block_bytes], 1, p.data(), kNq, acc.data(), kBlockTokens);
    }
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBlocks * kBlockTokens);
  state.SetBytesProcessed(state.iterations() * kBlocks * KvHeadTileBytes(f, KvSide::kValue, kGeometry.head_dim));
  SetFlops(state, kNq);
}

// tq3 / tq4 values' integer sums (accumulate_q8; skipped where the CPU lacks them).
void BM_AccumulateQ8(benchmark::State& state) {
  const KvFormat f = kAllKvFormats[state.range(0)];
  state.SetLabel(std::string(KvFormatName(f)) + " int8");
  const KvAccumulateFn accumulate = GetKvBlockKernels(f).accumulate_q8;
  if (!accumulate) {
    state.SkipWithError("no integer value sums on this CPU");
    return;
  }
  RunAccumulate(state, f, accumulate);
}

void BM_Accumulate(benchmark::State& state) {
  const KvFormat f = kAllKvFormats[state.range(0)];
  state.SetLabel(std::string(KvFormatName(f)));
  RunAccumulate(state, f, GetKvBlockKernels(f).accumulate);
}

// The softmax fold alone (BlockAttention::Update's SoftmaxFold) over 64 blocks of n_q x 32 scores,
// each block's scores refilled from a stored copy first (the fold overwrites them with their exps;
// BM_FoldCopy times the refill alone). The fold's vector exp is one per (query, token): its share of
// BM_Attend is the arithmetic a stacked step does beyond the multiply-adds.
void RunFold(benchmark::State& state, bool fold) {
  const auto kNq = static_cast<size_t>(state.range(0));
  const size_t d = kGeometry.head_dim, tile = kNq * kBlockTokens;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> src(kBlocks * tile), s(tile), m(kNq), l(kNq), o(kNq * d);
  for (auto& v : src) v = 2.0f * nd(rng);
  for (auto _ : state) {
    std::fill(m.begin(), m.end(), -INFINITY);
    std::fill(l.begin(), l.end(), 0.0f);
    std::fill(o.begin(), o.end(), 1.0f);
    for (size_t b = 0; b < kBlocks; ++b) {
      std::copy_n(&src[b * tile], tile, s.data());
      if (fold) SoftmaxFold(s.data(), kNq, kBlockTokens, kBlockTokens, m.data(), l.data(), o.data(), d);
      benchmark::DoNotOptimize(s.data());
    }
    benchmark::DoNotOptimize(l.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBlocks * tile);  // (query, token) scores
}
void BM_Fold(benchmark::State& state) { RunFold(state, true); }
void BM_FoldCopy(benchmark::State& state) { RunFold(state, false); }

// Sealing cost: tokens/s of EncodeKvBlock for all 3 heads (one block side).
void BM_Encode(benchmark::State& state) {
  const KvFormat f = kAllKvFormats[state.range(0)];
  state.SetLabel(std::string(KvFormatName(f)));
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  std::vector<float> x(kBlockTokens * kGeometry.n_head_kv * kGeometry.head_dim);
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> block(KvBlockBytes(f, KvSide::kValue, kGeometry));
  for (auto _ : state) {
    const Status st = EncodeKvBlock(f, KvSide::kValue, kGeometry, x.data(), block.data(), {.layer_absmax = 8});
    benchmark::DoNotOptimize(st.ok());
    benchmark::DoNotOptimize(block.data());
  }
  state.SetItemsProcessed(state.iterations() * kBlockTokens);
}

// The whole per-block step of stacked queries over a shared run, as the batch attention runs it:
// BlockAttention::AddBlocks (score, softmax fold, accumulate) over 64 blocks of one (K, V) format
// pair, n_q queries of one KV head (45 = 15 agents x 3; 96 = a 32-token prefill stack). GFLOP/s
// counts 4·head_dim flops per (query, token): against the f32 FMA peak of `chorus bench --machine`.
constexpr std::pair<KvFormat, KvFormat> kPairs[] = {
    {KvFormat::kF16, KvFormat::kF16}, {KvFormat::kTq4, KvFormat::kTq3}, {KvFormat::kQ8, KvFormat::kQ8}};

void BM_Attend(benchmark::State& state) {
  const auto [kf, vf] = kPairs[state.range(0)];
  state.SetLabel(std::string(KvFormatName(kf)) + "/" + std::string(KvFormatName(vf)));
  const Fixture kx = MakeBlocks(kf, KvSide::kKey), vx = MakeBlocks(vf, KvSide::kValue);
  const auto kNq = static_cast<size_t>(state.range(1));
  std::vector<BlockView> views;
  for (size_t b = 0; b < kBlocks; ++b)
    views.push_back({&kx.blocks[b * kx.block_bytes], &vx.blocks[b * vx.block_bytes], kf, vf});
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> q(kNq * kGeometry.head_dim), out(kNq * kGeometry.head_dim);
  for (auto& v : q) v = nd(rng) * 0.125f;
  BlockAttention att(kGeometry);
  att.Reserve(kNq);
  for (auto _ : state) {
    att.Begin(q.data(), kNq);
    att.AddBlocks(views, 1);
    att.Finish(out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kBlocks * kBlockTokens);
  const double flops = 4.0 * kGeometry.head_dim * kNq * kBlocks * kBlockTokens;
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
}

// One agent's attention at depth 4096 for one KV head, as a decode step runs it: BlockAttention over
// 128 blocks (score, softmax fold, accumulate per block; 3 queries = SmolLM2's GQA group). Args:
// (K format, V format, cold). cold = 0: the same 128 blocks every iteration (cache-resident after
// the first: the kernels' arithmetic); cold = 1: each iteration takes the next 128 blocks of a
// 96 MB pool (3× this machine's L3) in shuffled order, so every block comes from memory as in a real
// step, where the weights stream through the caches between two layers' attention.
void BM_AttendDepth(benchmark::State& state) {
  const KvFormat kf = kAllKvFormats[state.range(0)], vf = kAllKvFormats[state.range(1)];
  const bool cold = state.range(2) != 0;
  state.SetLabel(std::string(KvFormatName(kf)) + "/" + std::string(KvFormatName(vf)) + (cold ? " cold" : " hot"));
  constexpr size_t kDepthBlocks = 128, kQ = 3;
  const Fixture keys = MakeBlocks(kf, KvSide::kKey), values = MakeBlocks(vf, KvSide::kValue);  // 64 distinct
  const size_t pair_bytes = keys.block_bytes + values.block_bytes;
  const size_t n_pool = cold ? std::max<size_t>(kDepthBlocks, (size_t{96} << 20) / pair_bytes) : kDepthBlocks;
  std::vector<uint8_t> pool(n_pool * pair_bytes);  // (block: key side, value side), copies of the 64
  std::vector<BlockView> views(n_pool);
  for (size_t b = 0; b < n_pool; ++b) {
    uint8_t* p = &pool[b * pair_bytes];
    std::copy_n(&keys.blocks[(b % kBlocks) * keys.block_bytes], keys.block_bytes, p);
    std::copy_n(&values.blocks[(b % kBlocks) * values.block_bytes], values.block_bytes, p + keys.block_bytes);
    views[b] = {p, p + keys.block_bytes, kf, vf};
  }
  std::mt19937 rng(3);
  std::shuffle(views.begin(), views.end(), rng);  // separate allocations: no address pattern to follow
  std::normal_distribution<float> nd;
  std::vector<float> q(kQ * kGeometry.head_dim), out(kQ * kGeometry.head_dim);
  for (auto& v : q) v = nd(rng) * 0.125f;
  BlockAttention att(kGeometry);
  att.Reserve(kQ);
  size_t first = 0;
  for (auto _ : state) {
    att.Begin(q.data(), kQ);
    att.AddBlocks(std::span<const BlockView>(views).subspan(first, kDepthBlocks), 1);
    att.Finish(out.data());
    benchmark::DoNotOptimize(out.data());
    first = first + 2 * kDepthBlocks <= n_pool ? first + kDepthBlocks : 0;
  }
  state.SetItemsProcessed(state.iterations() * kDepthBlocks * kBlockTokens);  // tokens of one KV head
}

BENCHMARK(BM_Score)->ArgsProduct({benchmark::CreateDenseRange(0, std::size(kAllKvFormats) - 1, 1), {3, 45}});
BENCHMARK(BM_ScoreQ8)->Arg(3)->Arg(45);
BENCHMARK(BM_AccumulateQ8)->ArgsProduct({{5, 6}, {3, 45}});  // tq4, tq3
BENCHMARK(BM_Accumulate)->ArgsProduct({benchmark::CreateDenseRange(0, std::size(kAllKvFormats) - 1, 1), {3, 45}});
BENCHMARK(BM_Fold)->Arg(3)->Arg(45);
BENCHMARK(BM_FoldCopy)->Arg(45);
BENCHMARK(BM_Attend)->ArgsProduct({{0, 1, 2}, {3, 21, 24, 45, 96}});
BENCHMARK(BM_Encode)->DenseRange(0, std::size(kAllKvFormats) - 1);
BENCHMARK(BM_AttendDepth)->Args({5, 6, 0})->Args({5, 6, 1})->Args({0, 0, 0})->Args({0, 0, 1});  // tq4/tq3, f16/f16

}  // namespace
}  // namespace chorus

BENCHMARK_MAIN();
