// ModelInfo: what a GGUF model file is — its architecture, hyper-parameters, metadata and tensors —
// read by loading the model as the engine would (`chorus inspect`, or a program that checks a file
// before it opens an Engine on it).
// Invariants: metadata and tensors are in file order; a tensor's bytes are its bytes in the file
// (before any repacking at load); the hyper-parameters are those the engine runs with.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chorus/status.h"  // Result

namespace chorus {

struct ModelInfo {
  uint32_t gguf_version = 0;
  size_t file_bytes = 0;
  std::string arch;  // general.architecture ("llama", "gemma3", ...)
  std::string name;  // general.name, may be empty
  size_t n_layer = 0, n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, rope_dim = 0;
  size_t n_ctx_train = 0, n_vocab = 0;
  float rope_base = 0, rms_eps = 0;
  bool tied_output = false;  // the output projection is token_embd (no output.weight)
  size_t weight_bytes = 0;   // every weight tensor in the file

  struct Metadata {
    std::string key;
    std::string value;  // as text: strings quoted, arrays cut after 8 elements
  };
  std::vector<Metadata> metadata;

  struct Tensor {
    std::string name;
    std::string type;            // the ggml type's name: "F32", "Q4_K", ...
    std::vector<uint64_t> dims;  // the contiguous dimension first
    size_t bytes = 0;
  };
  std::vector<Tensor> tensors;
};

// Loads the model at `path` and describes it; errors are the engine's load errors (a missing file,
// a corrupt GGUF, an unsupported architecture), naming the path and the problem.
Result<ModelInfo> InspectModel(const std::string& path);

}  // namespace chorus
