// Roofline arithmetic for `chorus bench` rows (see roofline.h).
#include "eval/roofline.h"

#include <algorithm>
#include <cstdio>

#include "eval/harness.h"    // LoadAverage
#include "eval/report.h"     // Versioned
#include "kv/kv_kernels.h"   // GetKvBlockKernels (Int8AttentionShare)
#include "ops/cpu_target.h"  // CpuModel (the probe table's first line)
#include "util/thread_pool.h"

namespace chorus::eval {

StepCost WeightCost(const Model& model) {
  const ModelWeights& w = model.weights();
  StepCost c;
  auto add = [&](const WeightView& v) {
    if (!v.data) return;
    c.bytes += static_cast<double>(v.rows) * v.row_bytes;
    c.ops += 2.0 * v.rows * v.cols;
  };
  for (const LayerWeights& l : w.layers) {
    for (const WeightView* v : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) add(*v);
  }
  add(w.output);
  c.bytes += static_cast<double>(w.token_embd.row_bytes);  // one row looked up per token
  return c;
}

StepCost DecodeStepCost(const Model& model, size_t depth, double kv_bytes_per_token) {
  const ModelConfig& g = model.config();
  StepCost c = WeightCost(model);
  c.bytes += kv_bytes_per_token * static_cast<double>(depth);
  c.attn_ops = 4.0 * g.n_layer * g.n_head * g.head_dim * static_cast<double>(depth);
  c.ops += c.attn_ops;
  return c;
}

double Int8AttentionShare(KvFormat k, KvFormat v, size_t head_dim) {
  const bool scores = GetKvBlockKernels(k).score_q8 != nullptr;
  const bool sums = GetKvBlockKernels(v).accumulate_q8 != nullptr && head_dim % 64 == 0;  // else it falls back
  return 0.5 * scores + 0.5 * sums;
}

StepCost PrefillCost(const Model& model, size_t n) {
  const ModelConfig& g = model.config();
  const StepCost w = WeightCost(model);
  StepCost c;
  c.bytes = w.bytes;
  c.attn_ops = 2.0 * g.n_layer * g.n_head * g.head_dim * static_cast<double>(n) * n;
  // The layers run for every prompt token; the output matmul only for the last one (pp mode asks for
  // the last token's logits, as llama-bench does) — with a 262,144-entry vocabulary (Gemma 3) counting
  // it n times overstated the prefill's arithmetic ~2.7x.
  const WeightView& out = model.weights().output;
  const double output_ops = out.data ? 2.0 * out.rows * out.cols : 0;
  c.ops = (w.ops - output_ops) * static_cast<double>(n) + output_ops + c.attn_ops;
  return c;
}

double Int8Peak(const MachineLimits& m) { return std::max(m.int8_ops_per_s, m.amx_int8_ops_per_s); }
const char* Int8PeakName(const MachineLimits& m) {
  return m.amx_int8_ops_per_s > m.int8_ops_per_s ? "AMX int8" : "int8";
}

Roof RoofFor(const StepCost& cost, size_t tokens, const MachineLimits& m) {
  Roof r;
  const double peak = Int8Peak(m) > 0 ? Int8Peak(m) : m.f32_flops_per_s;
  r.memory_tok_s = cost.bytes > 0 ? m.read_bytes_per_s / cost.bytes * tokens : 0;
  // The matmuls run on the int8 path; attention is f32 FMAs (at 4K depth and 15 agents more than
  // half the step's ops) but for the part the integer KV kernels do: each part at its own peak.
  const double attn_f32 = cost.attn_ops - cost.attn_int8_ops;
  const double seconds = (cost.ops - cost.attn_ops + cost.attn_int8_ops) / peak +
                         (m.f32_flops_per_s > 0 ? attn_f32 / m.f32_flops_per_s : 0);
  r.compute_tok_s = seconds > 0 ? tokens / seconds : 0;
  r.tok_s = std::min(r.memory_tok_s, r.compute_tok_s);
  r.bound = r.memory_tok_s <= r.compute_tok_s ? "memory" : "compute";
  return r;
}

nlohmann::json MachineJson(const MachineLimits& m) {
  nlohmann::json reads = nlohmann::json::array();
  for (const ReadRate& r : m.reads)
    reads.push_back({{"streams", r.streams}, {"prefetch_ahead_bytes", r.ahead}, {"bytes_per_s", r.bytes_per_s}});
  return {{"threads", m.threads},
          {"read_bytes_per_s", m.read_bytes_per_s},
          {"read_pattern", m.read_pattern},
          {"read_sequential_bytes_per_s", m.read_sequential_bytes_per_s},
          {"reads", reads},
          {"f32_flops_per_s", m.f32_flops_per_s},
          {"int8_ops_per_s", m.int8_ops_per_s},
          {"amx_int8_ops_per_s", m.amx_int8_ops_per_s},
          {"simd", m.simd},
          {"int8_path", m.int8_path}};
}

nlohmann::json RoofJson(const StepCost& cost, size_t tokens, const Roof& r, double measured_tok_s) {
  return {{"bytes", cost.bytes},
          {"ops", cost.ops},
          {"attention_ops", cost.attn_ops},
          {"attention_int8_ops", cost.attn_int8_ops},
          {"tokens", tokens},
          {"roof_tok_s", r.tok_s},
          {"memory_roof_tok_s", r.memory_tok_s},
          {"compute_roof_tok_s", r.compute_tok_s},
          {"bound", r.bound},
          {"percent_of_roof", r.tok_s > 0 ? 100.0 * measured_tok_s / r.tok_s : 0.0}};
}

MachineReport ProbeMachines(const std::vector<int>& threads, std::FILE* table) {
  MachineReport report{.load_average = LoadAverage()};
  if (table) {
    std::fprintf(table, "cpu: %s\n", CpuModel().c_str());
    std::fprintf(table, "%-8s %16s %14s %14s %14s  %s\n", "threads", "read GB/s", "f32 GFLOP/s", "int8 GOP/s",
                 "AMX GOP/s", "SIMD / int8 path");
  }
  for (int t : threads) {
    ThreadPool pool(t);
    const MachineLimits m = ProbeMachine(pool);
    report.machines.push_back(m);
    if (table)
      std::fprintf(table, "%-8d %16.1f %14.1f %14.1f %14.1f  %s / %s\n", t, m.read_bytes_per_s * 1e-9,
                   m.f32_flops_per_s * 1e-9, m.int8_ops_per_s * 1e-9, m.amx_int8_ops_per_s * 1e-9, m.simd.c_str(),
                   m.int8_path.empty() ? "none" : m.int8_path.c_str());
  }
  report.load_average_end = LoadAverage();
  return report;
}

nlohmann::json ToJson(const MachineReport& report) {
  nlohmann::json j = {{"load_average", report.load_average}};
  for (const MachineLimits& m : report.machines) j["machine"].push_back(MachineJson(m));
  return Versioned("machine", std::move(j));
}

void PrintReadPatterns(const MachineReport& report, std::FILE* out) {
  std::fprintf(out,
               "read GB/s per pattern (each thread's slice read as N streams side by side, 64 B of each per step):\n");
  for (const MachineLimits& machine : report.machines) {
    const nlohmann::json m = MachineJson(machine);
    for (const auto& r : m["reads"])
      std::fprintf(out, "  %d thread(s)  %-44s %6.1f\n", m["threads"].get<int>(),
                   ReadPatternName(r["streams"].get<size_t>(), r["prefetch_ahead_bytes"].get<size_t>()).c_str(),
                   r["bytes_per_s"].get<double>() * 1e-9);
  }
  std::fprintf(out,
               "read GB/s above = the best pattern (the roofs' bandwidth); load average %.2f (a loaded machine lowers "
               "every figure)\n",
               report.load_average_end);
}

}  // namespace chorus::eval
