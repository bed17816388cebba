// make_gguf_seeds DIR: writes the small GGUF seed corpus for gguf_fuzz (each seed well under 4 KB).
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"  // GgufWriter

namespace {

using chorus::GgmlType;
using chorus::GgufValue;
using chorus::GgufWriter;

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + 13 * i);
  return b;
}

GgufWriter EveryValueType(uint32_t version) {
  GgufWriter w({.version = version});
  w.SetScalar<uint8_t>("u8", 1);
  w.SetScalar<int8_t>("i8", -2);
  w.SetScalar<uint16_t>("u16", 3);
  w.SetScalar<int16_t>("i16", -4);
  w.SetScalar<uint32_t>("u32", 5);
  w.SetScalar<int32_t>("i32", -6);
  w.SetScalar<float>("f32", 7.5f);
  w.SetScalar<bool>("bool", true);
  w.SetString("str", "eight");
  w.SetScalar<uint64_t>("u64", 9);
  w.SetScalar<int64_t>("i64", -10);
  w.SetScalar<double>("f64", 11.25);
  w.Set("arr.i32", GgufValue::Array(std::vector<int32_t>{1, -2, 3}));
  w.Set("arr.f32", GgufValue::Array(std::vector<float>{0.5f, 1.5f}));
  w.SetStringArray("arr.str", {"a", "bb", ""});
  w.Set("arr.nested", GgufValue::ArrayOfArrays({GgufValue::StringArray({"x"}), GgufValue::Array(std::vector<uint8_t>{1})}));
  return w;
}

GgufWriter TinyModel(uint32_t alignment) {
  GgufWriter w({.version = 3, .alignment = alignment});
  w.SetString("general.architecture", "llama");
  w.SetScalar<uint32_t>("llama.block_count", 1);
  w.SetScalar<uint32_t>("llama.embedding_length", 32);
  w.SetScalar<float>("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetStringArray("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b"});
  w.Set("tokenizer.ggml.token_type", GgufValue::Array(std::vector<int32_t>{3, 3, 1, 1}));
  w.AddTensor("token_embd.weight", GgmlType::kQ8_0, {32, 4}, Bytes(4 * 34, 1));
  w.AddTensor("blk.0.attn_norm.weight", GgmlType::kF32, {32}, Bytes(128, 2));
  w.AddTensor("blk.0.attn_q.weight", GgmlType::kQ4_1, {32, 32}, Bytes(32 * 20, 3));
  w.AddTensor("output_norm.weight", GgmlType::kF16, {32}, Bytes(64, 4));
  return w;
}

GgufWriter ManyTensorTypes() {
  GgufWriter w;
  w.AddTensor("q4_0", GgmlType::kQ4_0, {32}, Bytes(18, 5));
  w.AddTensor("q5_0", GgmlType::kQ5_0, {32}, Bytes(22, 6));
  w.AddTensor("q5_1", GgmlType::kQ5_1, {32}, Bytes(24, 7));
  w.AddTensor("q4_k", GgmlType::kQ4_K, {256}, Bytes(144, 8));
  w.AddTensor("q6_k", GgmlType::kQ6_K, {256}, Bytes(210, 9));
  w.AddTensor("bf16", GgmlType::kBF16, {2, 2, 2, 2}, Bytes(32, 10));
  w.AddTensor("q2_k", GgmlType::kQ2_K, {256}, Bytes(84, 11));  // accepted only with allow_unsupported_types
  return w;
}

bool Write(const std::string& dir, const std::string& name, const GgufWriter& w) {
  const std::string path = dir + "/" + name;
  chorus::Status st = w.WriteFile(path);
  if (!st.ok()) std::fprintf(stderr, "%s\n", st.message().c_str());
  return st.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_gguf_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;
  ok &= Write(dir, "empty_v3.gguf", GgufWriter());
  ok &= Write(dir, "every_type_v2.gguf", EveryValueType(2));
  ok &= Write(dir, "every_type_v3.gguf", EveryValueType(3));
  ok &= Write(dir, "tiny_model_a32.gguf", TinyModel(32));
  ok &= Write(dir, "tiny_model_a64.gguf", TinyModel(64));
  ok &= Write(dir, "tensor_types.gguf", ManyTensorTypes());
  return ok ? 0 : 1;
}
