// The roofline of a benchmark row: what one step must read (weights + KV, from the live views and
// caches) and compute, against the machine's measured limits (ops/machine_probe.h).
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv_format.h"
#include "model/model.h"
#include "ops/machine_probe.h"

namespace chorus::eval {

struct StepCost {
  double bytes = 0;          // bytes the step must read at least once
  double ops = 0;            // multiply-adds × 2 (matmuls + attention)
  double attn_ops = 0;       // the part of ops that is attention, at the f32 peak ...
  double attn_int8_ops = 0;  // ... but for this part of it, which the integer KV kernels do (int8 peak)
};

// The share of attention ops (scores half, value sums half) the integer KV kernels of this CPU do
// for keys k and values v (kv_kernels.h: score_q8, accumulate_q8): 0, 0.5 or 1.
double Int8AttentionShare(KvFormat k, KvFormat v, size_t head_dim);

// Bytes of every matmul weight a token goes through (rows × row_bytes of the mapped views, the output
// matrix included) plus one embedding row; 2 × rows × cols ops per token for them.
StepCost WeightCost(const Model& model);

// One decode step at context depth `depth`, reading kv_bytes_per_token × depth of KV (the cache's
// measured bytes per token); attention ops 4 · n_layer · n_head · head_dim · depth.
StepCost DecodeStepCost(const Model& model, size_t depth, double kv_bytes_per_token);

// A prefill of n tokens in one pass: the weights once, 2 × layer weight ops × n, the output matmul
// once (the last token's logits), causal attention.
StepCost PrefillCost(const Model& model, size_t n);

struct Roof {
  double tok_s = 0;          // the faster of the two roofs cannot be beaten: min(memory, compute)
  double memory_tok_s = 0;   // read_bytes_per_s / bytes per token
  double compute_tok_s = 0;  // tokens / (matmul ops / int8 (or f32 where no int8 path) ops/s + attention ops / f32
                             // flops/s, its integer-kernel part / int8 ops/s)
  const char* bound = "";    // "memory" or "compute"
};
// cost covers `tokens` tokens (1 for a decode step, n for a prefill).
// The int8 peak the roof uses: AMX tile products where the CPU has them (the engine's int8 matmuls
// from 12 tokens and integer KV kernels from 16 queries run there), else the SIMD loop's; and its name.
double Int8Peak(const MachineLimits& m);
const char* Int8PeakName(const MachineLimits& m);
Roof RoofFor(const StepCost& cost, size_t tokens, const MachineLimits& m);

nlohmann::json MachineJson(const MachineLimits& m);
nlohmann::json RoofJson(const StepCost& cost, size_t tokens, const Roof& r, double measured_tok_s);

// `chorus bench --machine`: each thread count's measured limits.
struct MachineReport {
  double load_average = 0;      // before probing (getloadavg, -1 unknown)
  double load_average_end = 0;  // after (the text report's last line)
  std::vector<MachineLimits> machines;
};
// Probes each thread count; `table` non-null: the text table, a row as each probe finishes.
MachineReport ProbeMachines(const std::vector<int>& threads, std::FILE* table);
nlohmann::json ToJson(const MachineReport& report);  // kind "machine"
// The text report's tail: read bandwidth per pattern and the load average.
void PrintReadPatterns(const MachineReport& report, std::FILE* out);

}  // namespace chorus::eval
