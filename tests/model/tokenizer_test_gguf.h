// Test-only minimal GGUF metadata reader: pulls tokenizer.* keys into TokenizerData (no tensors, no validation beyond bounds).
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer.h"  // TokenizerData

namespace chorus::testing {

struct TestGgufTokenizer {
  TokenizerData data;
  std::string chat_template;
};

// Reads the metadata of a GGUF v2/v3 file. Returns nullopt if it cannot be read.
inline std::optional<TestGgufTokenizer> ReadTokenizerFromGgufForTest(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  bool ok = true;
  auto rd = [&](void* p, size_t n) {
    if (!f.read(static_cast<char*>(p), static_cast<std::streamsize>(n))) ok = false;
  };
  auto u32 = [&] { uint32_t v = 0; rd(&v, 4); return v; };
  auto u64 = [&] { uint64_t v = 0; rd(&v, 8); return v; };
  auto str = [&] {
    const uint64_t n = u64();
    std::string s;
    if (!ok || n > (uint64_t{1} << 30)) { ok = false; return s; }
    s.resize(n);
    rd(s.data(), n);
    return s;
  };
  auto scalar_size = [](uint32_t type) -> size_t {
    switch (type) {
      case 0: case 1: case 7: return 1;
      case 2: case 3: return 2;
      case 4: case 5: case 6: return 4;
      case 10: case 11: case 12: return 8;
      default: return 0;
    }
  };
  auto read_int = [&](uint32_t type) -> int64_t {
    uint64_t v = 0;
    rd(&v, scalar_size(type));
    if (type == 1) return static_cast<int8_t>(v);
    if (type == 3) return static_cast<int16_t>(v);
    if (type == 5) return static_cast<int32_t>(v);
    return static_cast<int64_t>(v);
  };

  char magic[4];
  rd(magic, 4);
  if (!ok || std::memcmp(magic, "GGUF", 4) != 0) return std::nullopt;
  const uint32_t version = u32();
  if (version < 2) return std::nullopt;
  u64();  // n_tensors
  const uint64_t n_kv = u64();
  TestGgufTokenizer out;
  for (uint64_t k = 0; ok && k < n_kv; ++k) {
    const std::string key = str();
    const uint32_t type = u32();
    if (type == 8) {
      std::string v = str();
      if (key == "tokenizer.ggml.model") out.data.model = v;
      if (key == "tokenizer.ggml.pre") out.data.pre = v;
      if (key == "tokenizer.chat_template") out.chat_template = v;
    } else if (type == 9) {
      const uint32_t et = u32();
      const uint64_t n = u64();
      if (n > (uint64_t{1} << 28)) return std::nullopt;
      for (uint64_t i = 0; ok && i < n; ++i) {
        if (et == 8) {
          std::string v = str();
          if (key == "tokenizer.ggml.tokens") out.data.tokens.push_back(std::move(v));
          if (key == "tokenizer.ggml.merges") out.data.merges.push_back(std::move(v));
        } else if (scalar_size(et) != 0) {
          const int64_t v = read_int(et);
          if (key == "tokenizer.ggml.token_type") out.data.token_types.push_back(static_cast<int32_t>(v));
        } else {
          return std::nullopt;  // nested arrays: not in tokenizer metadata
        }
      }
    } else if (scalar_size(type) != 0) {
      const int64_t v = read_int(type);
      if (key == "tokenizer.ggml.bos_token_id") out.data.bos = static_cast<int32_t>(v);
      if (key == "tokenizer.ggml.eos_token_id") out.data.eos = static_cast<int32_t>(v);
      if (key == "tokenizer.ggml.unknown_token_id") out.data.unk = static_cast<int32_t>(v);
      if (key == "tokenizer.ggml.padding_token_id") out.data.pad = static_cast<int32_t>(v);
      if (key == "tokenizer.ggml.add_bos_token") out.data.add_bos = v != 0;
    } else {
      return std::nullopt;
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace chorus::testing
