// InspectModel (include/chorus/model_info.h): the loaded Model's config and its GGUF file, copied
// into the public types.
#include "chorus/model_info.h"

#include "gguf/gguf.h"    // GgufFile, ToString
#include "model/model.h"  // Model

namespace chorus {

Result<ModelInfo> InspectModel(const std::string& path) {
  if (path.empty()) return Status::Error("no model given (use -m MODEL.gguf; scripts/fetch_model.sh fetches one)");
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(path));
  const ModelConfig& c = model->config();
  const GgufFile& f = model->gguf();
  ModelInfo info{.gguf_version = f.version(),
                 .file_bytes = f.file_size(),
                 .arch = c.arch,
                 .name = c.name,
                 .n_layer = c.n_layer,
                 .n_embd = c.n_embd,
                 .n_ff = c.n_ff,
                 .n_head = c.n_head,
                 .n_head_kv = c.n_head_kv,
                 .head_dim = c.head_dim,
                 .rope_dim = c.rope_dim,
                 .n_ctx_train = c.n_ctx_train,
                 .n_vocab = c.n_vocab,
                 .rope_base = c.rope_base,
                 .rms_eps = c.rms_eps,
                 .tied_output = model->weights().tied_output,
                 .weight_bytes = model->weight_bytes()};
  for (const GgufKv& kv : f.metadata()) info.metadata.push_back({.key = kv.key, .value = ToString(kv.value, 8)});
  for (const GgufTensor& t : f.tensors())
    info.tensors.push_back(
        {.name = t.name, .type = std::string(GgmlTraitsOf(t.type).name), .dims = t.dims, .bytes = t.n_bytes});
  return info;
}

}  // namespace chorus
