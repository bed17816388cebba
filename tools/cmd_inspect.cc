// `chorus inspect`: what a GGUF model is — architecture, hyper-parameters, metadata, tensor types and sizes.
#include <map>

#include "eval/cpu.h"   // CpuFeatures, MatMulPath
#include "gguf/gguf.h"  // GgufFile
#include "tools/common.h"

namespace chorus::cli {
namespace {

struct InspectArgs {
  std::string model;
  bool json = false, tensors = false;
};

int RunInspect(const InspectArgs& a) {
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return Fail(model_r.status());
  const Model& model = *model_r.value();
  const ModelConfig& c = model.config();
  const GgufFile& f = model.gguf();
  std::map<std::string, std::pair<size_t, size_t>> by_type;  // type -> (count, bytes)
  for (const auto& t : f.tensors()) {
    auto& e = by_type[std::string(GgmlTraitsOf(t.type).name)];
    e.first += 1;
    e.second += t.n_bytes;
  }
  if (a.json) {
    nlohmann::json j = {{"file", a.model}, {"gguf_version", f.version()}, {"arch", c.arch}, {"name", c.name},
                        {"n_layer", c.n_layer}, {"n_embd", c.n_embd}, {"n_ff", c.n_ff}, {"n_head", c.n_head},
                        {"n_head_kv", c.n_head_kv}, {"head_dim", c.head_dim}, {"rope_dim", c.rope_dim},
                        {"n_ctx_train", c.n_ctx_train}, {"n_vocab", c.n_vocab}, {"rope_base", c.rope_base},
                        {"rms_eps", c.rms_eps}, {"tied_output", model.weights().tied_output},
                        {"weight_bytes", model.weight_bytes()}, {"file_bytes", f.file_size()},
                        {"kernel_path", MatMulPath()}, {"cpu_features", CpuFeatures()}};
    for (const auto& [type, e] : by_type) j["tensor_types"][type] = {{"count", e.first}, {"bytes", e.second}};
    if (a.tensors)
      for (const auto& t : f.tensors())
        j["tensors"].push_back({{"name", t.name}, {"type", GgmlTraitsOf(t.type).name}, {"dims", t.dims},
                                {"bytes", t.n_bytes}});
    PrintJson(j);
    return 0;
  }
  std::printf("file          %s (GGUF v%u, %.1f MiB)\n", a.model.c_str(), f.version(), f.file_size() / 1048576.0);
  std::printf("model         %s  [%s]\n", c.name.c_str(), c.arch.c_str());
  std::printf("layers        %zu\nembedding     %zu\nfeed-forward  %zu\n", c.n_layer, c.n_embd, c.n_ff);
  std::printf("heads         %zu query, %zu KV (GQA %zux), head dim %zu, rope dim %zu\n", c.n_head,
              c.n_head_kv, c.n_head / c.n_head_kv, c.head_dim, c.rope_dim);
  std::printf("context       %zu (training)\nvocabulary    %zu\nrope base     %g\nrms eps       %g\n",
              c.n_ctx_train, c.n_vocab, c.rope_base, c.rms_eps);
  std::printf("output        %s\n", model.weights().tied_output ? "tied to token_embd" : "separate output.weight");
  std::printf("weights       %.2f MiB in %zu tensors\n", model.weight_bytes() / 1048576.0, f.tensors().size());
  for (const auto& [type, e] : by_type)
    std::printf("  %-6s %4zu tensors %10.2f MiB\n", type.c_str(), e.first, e.second / 1048576.0);
  std::printf("kernels       %s  [%s]\n", MatMulPath(), CpuFeatures().c_str());
  std::printf("metadata (%zu keys):\n", f.metadata().size());
  for (const auto& kv : f.metadata()) std::printf("  %-40s %s\n", kv.key.c_str(), ToString(kv.value, 8).c_str());
  if (a.tensors) {
    std::printf("tensors:\n");
    for (const auto& t : f.tensors()) {
      std::string dims;
      for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? " x " : "") + std::to_string(t.dims[i]);
      std::printf("  %-32s %-6s %-16s %10zu bytes\n", t.name.c_str(), std::string(GgmlTraitsOf(t.type).name).c_str(),
                  dims.c_str(), t.n_bytes);
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
