// Writes the synthetic llama-family GGUFs of tests/model/synthetic_model.h into a folder, for
// scripts/ref/llama_shapes_goldens.py (which runs llama.cpp on the very same bytes).
// Usage: write_test_models DIR   — prints "NAME PATH FNV1A" per file.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "../model/synthetic_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  for (const auto& spec : chorus::testing::LlamaFamilyShapes()) {
    const auto w = chorus::testing::SyntheticModel(spec);
    const std::string path = std::string(argv[1]) + "/" + spec.name + ".gguf";
    if (auto st = w.WriteFile(path); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    std::printf("%s %s %016" PRIx64 "\n", spec.name.c_str(), path.c_str(), chorus::testing::Fnv1a(w.ToBytes()));
  }
  return 0;
}
