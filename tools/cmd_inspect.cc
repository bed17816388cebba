// `chorus inspect`: what a GGUF model is — architecture, hyper-parameters, metadata, tensor types and sizes.
#include <map>

#include "chorus/model_info.h"  // InspectModel
#include "eval/cpu.h"           // CpuFeatures, MatMulPath
#include "tools/common.h"

namespace chorus::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool json = false, tensors = false;
};

int RunInspect(const InspectArgs& a) {
  auto info_r = InspectModel(a.model);
  if (!info_r.ok()) return Fail(info_r.status());
  const ModelInfo& m = info_r.value();
  std::map<std::string, std::pair<size_t, size_t>> by_type;  // type -> (count, bytes)
  for (const auto& t : m.tensors) {
    auto& e = by_type[t.type];
    e.first += 1;
    e.second += t.bytes;
  }
  if (a.json) {
    nlohmann::json j = {{"file", a.model},
                        {"gguf_version", m.gguf_version},
                        {"arch", m.arch},
                        {"name", m.name},
                        {"n_layer", m.n_layer},
                        {"n_embd", m.n_embd},
                        {"n_ff", m.n_ff},
                        {"n_head", m.n_head},
                        {"n_head_kv", m.n_head_kv},
                        {"head_dim", m.head_dim},
                        {"rope_dim", m.rope_dim},
                        {"n_ctx_train", m.n_ctx_train},
                        {"n_vocab", m.n_vocab},
                        {"rope_base", m.rope_base},
                        {"rms_eps", m.rms_eps},
                        {"tied_output", m.tied_output},
                        {"weight_bytes", m.weight_bytes},
                        {"file_bytes", m.file_bytes},
                        {"kernel_path", MatMulPath()},
                        {"cpu_features", CpuFeatures()}};
    for (const auto& [type, e] : by_type) j["tensor_types"][type] = {{"count", e.first}, {"bytes", e.second}};
    if (a.tensors)
      for (const auto& t : m.tensors)
        j["tensors"].push_back({{"name", t.name}, {"type", t.type}, {"dims", t.dims}, {"bytes", t.bytes}});
    PrintJson(j);
    return 0;
  }
  std::printf("file          %s (GGUF v%u, %.1f MiB)\n", a.model.c_str(), m.gguf_version, m.file_bytes / 1048576.0);
  std::printf("model         %s  [%s]\n", m.name.c_str(), m.arch.c_str());
  std::printf("layers        %zu\nembedding     %zu\nfeed-forward  %zu\n", m.n_layer, m.n_embd, m.n_ff);
  std::printf("heads         %zu query, %zu KV (GQA %zux), head dim %zu, rope dim %zu\n", m.n_head, m.n_head_kv,
              m.n_head / m.n_head_kv, m.head_dim, m.rope_dim);
  std::printf("context       %zu (training)\nvocabulary    %zu\nrope base     %g\nrms eps       %g\n", m.n_ctx_train,
              m.n_vocab, m.rope_base, m.rms_eps);
  std::printf("output        %s\n", m.tied_output ? "tied to token_embd" : "separate output.weight");
  std::printf("weights       %.2f MiB in %zu tensors\n", m.weight_bytes / 1048576.0, m.tensors.size());
  for (const auto& [type, e] : by_type)
    std::printf("  %-6s %4zu tensors %10.2f MiB\n", type.c_str(), e.first, e.second / 1048576.0);
  std::printf("kernels       %s  [%s]\n", MatMulPath(), CpuFeatures().c_str());
  std::printf("metadata (%zu keys):\n", m.metadata.size());
  for (const auto& kv : m.metadata) std::printf("  %-40s %s\n", kv.key.c_str(), kv.value.c_str());
  if (a.tensors) {
    std::printf("tensors:\n");
    for (const auto& t : m.tensors) {
      std::string dims;
      for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? " x " : "") + std::to_string(t.dims[i]);
      std::printf("  %-32s %-6s %-16s %10zu bytes\n", t.name.c_str(), t.type.c_str(), dims.c_str(), t.bytes);
    }
  }
  return 0;
}

}  // namespace

RunFn AddInspect(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a GGUF model: architecture, hyper-parameters, metadata, tensors.");
  cmd->add_option("model", a->model, "GGUF model file")->required();
  cmd->add_flag("--tensors", a->tensors, "list every tensor");
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a] { return RunInspect(*a); };
}

}  // namespace chorus::cli
