// Tests for the GGUF reader/writer: round trips, the real model, and one test per malformed-input class.
#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <set>

#include "gguf/gguf_writer.h"

namespace chorus {
namespace {

constexpr char kModelPath[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

std::vector<uint8_t> Le64(uint64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}

void Cat(std::vector<uint8_t>& a, const std::vector<uint8_t>& b) { a.insert(a.end(), b.begin(), b.end()); }

// The error message of parsing bytes that must be rejected ("" if they were accepted).
std::string Error(std::vector<uint8_t> bytes, GgufOpenOptions options = {}) {
  auto r = GgufFile::FromBytes(std::move(bytes), options);
  return r.ok() ? std::string() : r.status().message();
}
std::string Error(const GgufWriter& w) { return Error(w.ToBytes()); }

std::unique_ptr<GgufFile> MustParse(std::vector<uint8_t> bytes, GgufOpenOptions options = {}) {
  auto r = GgufFile::FromBytes(std::move(bytes), options);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : nullptr;
}

// A writer holding every metadata value type (nested arrays included).
void SetEveryType(GgufWriter& w) {
  w.SetScalar<uint8_t>("t.u8", 200);
  w.SetScalar<int8_t>("t.i8", -100);
  w.SetScalar<uint16_t>("t.u16", 60000);
  w.SetScalar<int16_t>("t.i16", -30000);
  w.SetScalar<uint32_t>("t.u32", 4000000000u);
  w.SetScalar<int32_t>("t.i32", -2000000000);
  w.SetScalar<float>("t.f32", 1.5e-5f);
  w.SetScalar<bool>("t.bool", true);
  w.SetString("t.str", "héllo \"world\"\n");
  w.SetScalar<uint64_t>("t.u64", std::numeric_limits<uint64_t>::max());
  w.SetScalar<int64_t>("t.i64", std::numeric_limits<int64_t>::min());
  w.SetScalar<double>("t.f64", 3.141592653589793);
  w.Set("t.arr_u8", GgufValue::Array(std::vector<uint8_t>{1, 2, 255}));
  w.Set("t.arr_i8", GgufValue::Array(std::vector<int8_t>{-1, 2, -128}));
  w.Set("t.arr_u16", GgufValue::Array(std::vector<uint16_t>{1, 65535}));
  w.Set("t.arr_i16", GgufValue::Array(std::vector<int16_t>{-32768, 7}));
  w.Set("t.arr_u32", GgufValue::Array(std::vector<uint32_t>{7, 4000000000u}));
  w.Set("t.arr_i32", GgufValue::Array(std::vector<int32_t>{-5, 0, 5, 2147483647}));
  w.Set("t.arr_f32", GgufValue::Array(std::vector<float>{0.5f, -2.25f, 1e30f}));
  const bool bools[] = {true, false, true};
  w.Set("t.arr_bool", GgufValue::Array(std::span<const bool>(bools)));
  w.SetStringArray("t.arr_str", {"a", "", "ccc", std::string("\0x", 2)});
  w.Set("t.arr_u64", GgufValue::Array(std::vector<uint64_t>{0, std::numeric_limits<uint64_t>::max()}));
  w.Set("t.arr_i64", GgufValue::Array(std::vector<int64_t>{-1, std::numeric_limits<int64_t>::max()}));
  w.Set("t.arr_f64", GgufValue::Array(std::vector<double>{1e-300, -0.0}));
  w.Set("t.arr_empty", GgufValue::Array(std::vector<int32_t>{}));
  w.Set("t.arr_nested", GgufValue::ArrayOfArrays({GgufValue::StringArray({"x", "yy"}), GgufValue::StringArray({}),
                                                  GgufValue::Array(std::vector<int16_t>{3})}));
  w.Set("t.arr_deep", GgufValue::ArrayOfArrays({GgufValue::ArrayOfArrays({GgufValue::StringArray({"deep"})})}));
}

void CheckEveryType(const GgufFile& f) {
  EXPECT_EQ(f.GetUint("t.u8"), 200u);
  EXPECT_EQ(f.GetInt("t.i8"), -100);
  EXPECT_EQ(f.GetUint("t.u16"), 60000u);
  EXPECT_EQ(f.GetInt("t.i16"), -30000);
  EXPECT_EQ(f.GetUint("t.u32"), 4000000000u);
  EXPECT_EQ(f.GetInt("t.i32"), -2000000000);
  EXPECT_EQ(f.GetFloat("t.f32"), static_cast<double>(1.5e-5f));
  EXPECT_EQ(f.GetBool("t.bool"), true);
  EXPECT_EQ(f.GetString("t.str"), "héllo \"world\"\n");
  EXPECT_EQ(f.GetUint("t.u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.GetInt("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.GetFloat("t.f64"), 3.141592653589793);
  EXPECT_EQ(f.GetI32Array("t.arr_u8"), (std::vector<int32_t>{1, 2, 255}));
  EXPECT_EQ(f.GetI32Array("t.arr_i8"), (std::vector<int32_t>{-1, 2, -128}));
  EXPECT_EQ(f.GetI32Array("t.arr_u16"), (std::vector<int32_t>{1, 65535}));
  EXPECT_EQ(f.GetI32Array("t.arr_i16"), (std::vector<int32_t>{-32768, 7}));
  EXPECT_EQ(f.GetI32Array("t.arr_u32"), std::nullopt);  // 4e9 does not fit int32
  EXPECT_EQ(f.GetI64Array("t.arr_u32"), (std::vector<int64_t>{7, 4000000000}));
  EXPECT_EQ(f.GetI32Array("t.arr_i32"), (std::vector<int32_t>{-5, 0, 5, 2147483647}));
  EXPECT_EQ(f.GetF32Array("t.arr_f32"), (std::vector<float>{0.5f, -2.25f, 1e30f}));
  EXPECT_EQ(f.GetF32Array("t.arr_i32"), (std::vector<float>{-5, 0, 5, 2147483647.0f}));
  EXPECT_EQ(f.GetI32Array("t.arr_f32"), std::nullopt);  // floats are not integers
  ASSERT_NE(f.Find("t.arr_bool"), nullptr);
  EXPECT_EQ(ToString(*f.Find("t.arr_bool"), 8), "[true, false, true]");
  ASSERT_NE(f.GetStringArray("t.arr_str"), nullptr);
  EXPECT_EQ(*f.GetStringArray("t.arr_str"), (std::vector<std::string>{"a", "", "ccc", std::string("\0x", 2)}));
  EXPECT_EQ(f.GetI64Array("t.arr_u64"), std::nullopt);  // u64 max does not fit int64
  EXPECT_EQ(f.GetI64Array("t.arr_i64"), (std::vector<int64_t>{-1, std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(f.GetF32Array("t.arr_f64"), (std::vector<float>{static_cast<float>(1e-300), -0.0f}));
  EXPECT_EQ(f.GetI32Array("t.arr_empty"), std::vector<int32_t>{});
  const GgufValue* nested = f.Find("t.arr_nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_NE(nested->array(), nullptr);
  EXPECT_EQ(nested->array()->elem_type, GgufValueType::kArray);
  ASSERT_EQ(nested->array()->arrays.size(), 3u);
  EXPECT_EQ(nested->array()->arrays[0].array()->strings, (std::vector<std::string>{"x", "yy"}));
  EXPECT_EQ(ToString(*nested, 8), R"([["x", "yy"], [], [3]])");
  EXPECT_EQ(ToString(*f.Find("t.arr_deep"), 8), R"([[["deep"]]])");
}

TEST(GgufTest, EveryMetadataTypeRoundTripsInV2AndV3WithAlignments32And64) {
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u}) {
      SCOPED_TRACE(fmt::format("version {} alignment {}", version, alignment));
      GgufWriter w({.version = version, .alignment = alignment});
      SetEveryType(w);
      w.AddTensor("a", GgmlType::kF32, {3}, Pattern(12, 1));  // 12 bytes: the next tensor needs padding
      w.AddTensor("b", GgmlType::kQ8_0, {32, 2}, Pattern(68, 2));
      auto f = MustParse(w.ToBytes());
      ASSERT_NE(f, nullptr);
      EXPECT_EQ(f->version(), version);
      EXPECT_EQ(f->alignment(), alignment);
      CheckEveryType(*f);
      // Metadata keeps file order.
      ASSERT_GE(f->metadata().size(), 2u);
      const size_t first = alignment == 32 ? 0 : 1;  // general.alignment comes first when written
      EXPECT_EQ(f->metadata()[first].key, "t.u8");
      EXPECT_EQ(f->metadata().back().key, "t.arr_deep");
      for (const GgufTensor& t : f->tensors()) {
        EXPECT_EQ(t.offset % alignment, 0u) << t.name;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignment, 0u) << t.name;
        EXPECT_EQ((f->data_offset() + t.offset) % alignment, 0u);
      }
      const GgufTensor* b = f->FindTensor("b");
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(b->n_bytes, 68u);
      EXPECT_EQ(std::vector<uint8_t>(b->data, b->data + b->n_bytes), Pattern(68, 2));
    }
  }
}

TEST(GgufTest, GettersRejectMismatchedTypes) {
  GgufWriter w;
  w.SetScalar<int32_t>("neg", -3);
  w.SetScalar<uint64_t>("huge", std::numeric_limits<uint64_t>::max());
  w.SetString("s", "text");
  w.SetScalar<float>("f", 2.5f);
  w.SetScalar<bool>("b", false);
  auto f = MustParse(w.ToBytes());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->GetUint("neg"), std::nullopt);
  EXPECT_EQ(f->GetInt("neg"), -3);
  EXPECT_EQ(f->GetFloat("neg"), -3.0);
  EXPECT_EQ(f->GetInt("huge"), std::nullopt);
  EXPECT_EQ(f->GetUint("s"), std::nullopt);
  EXPECT_EQ(f->GetString("f"), std::nullopt);
  EXPECT_EQ(f->GetUint("f"), std::nullopt);
  EXPECT_EQ(f->GetBool("neg"), std::nullopt);
  EXPECT_EQ(f->GetBool("b"), false);
  EXPECT_EQ(f->GetStringArray("s"), nullptr);
  EXPECT_EQ(f->GetI32Array("s"), std::nullopt);
  EXPECT_EQ(f->GetString("missing"), std::nullopt);
  EXPECT_EQ(f->Find("missing"), nullptr);
  EXPECT_EQ(f->FindTensor("missing"), nullptr);
  EXPECT_EQ(ToString(*f->Find("f"), 4), "2.5");
  EXPECT_EQ(ToString(*f->Find("neg"), 4), "-3");
  EXPECT_EQ(ToString(*f->Find("huge"), 4), "18446744073709551615");
}

TEST(GgufTest, ToStringElidesLongArraysAndEscapesStrings) {
  EXPECT_EQ(ToString(GgufValue::Array(std::vector<int32_t>{1, 2, 3, 4, 5}), 3), "[1, 2, 3, ... (+2 more)]");
  EXPECT_EQ(ToString(GgufValue::Array(std::vector<int32_t>{1, 2}), 0), "[... (+2 more)]");
  EXPECT_EQ(ToString(GgufValue::String("a\"b\\c\td\x01"), 3), R"("a\"b\\c\td\x01")");
}

TEST(GgufTest, EveryTensorTypeInTheTableRoundTrips) {
  GgufWriter w({.version = 3, .alignment = 32});
  for (const GgmlTypeTraits& tr : AllGgmlTypes()) {
    const size_t bytes = 2 * 3 * tr.block_bytes;  // dims [2 blocks, 3 rows]
    w.AddTensor(fmt::format("t.{}", tr.name), tr.type, {2ull * tr.block_elems, 3}, Pattern(bytes, tr.block_bytes));
  }
  auto f = MustParse(w.ToBytes(), {.allow_unsupported_types = true});
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->tensors().size(), AllGgmlTypes().size());
  for (const GgmlTypeTraits& tr : AllGgmlTypes()) {
    const GgufTensor* t = f->FindTensor(fmt::format("t.{}", tr.name));
    ASSERT_NE(t, nullptr) << tr.name;
    EXPECT_EQ(t->type, tr.type);
    EXPECT_EQ(t->dims, (std::vector<uint64_t>{2ull * tr.block_elems, 3}));
    EXPECT_EQ(t->n_elements, 6ull * tr.block_elems);
    EXPECT_EQ(t->n_bytes, 6ull * tr.block_bytes);
    EXPECT_EQ(GgmlRowBytes(tr.type, t->dims[0]), 2ull * tr.block_bytes);
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), Pattern(t->n_bytes, tr.block_bytes)) << tr.name;
  }
}

TEST(GgufTest, UnsupportedTensorTypeIsRejectedByNameUnlessAllowed) {
  GgufWriter w;
  w.AddTensor("blk.0.ffn_up.weight", GgmlType::kQ2_K, {256}, Pattern(84, 0));
  const std::string e = Error(w);
  EXPECT_NE(e.find("blk.0.ffn_up.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("Q2_K"), std::string::npos) << e;
  EXPECT_NE(e.find("id 10"), std::string::npos) << e;
  EXPECT_NE(e.find("not support"), std::string::npos) << e;
  EXPECT_NE(MustParse(w.ToBytes(), {.allow_unsupported_types = true}), nullptr);
}

TEST(GgufTest, OpenMapsAFileWrittenByTheWriter) {
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("gguf_test_{}.gguf", getpid())).string();
  GgufWriter w({.version = 2, .alignment = 64});
  SetEveryType(w);
  w.AddTensor("w", GgmlType::kF16, {8, 2}, Pattern(32, 9));
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto r = GgufFile::Open(path);
  std::remove(path.c_str());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.file_size(), w.ToBytes().size());
  CheckEveryType(f);
  const GgufTensor* t = f.FindTensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + 32), Pattern(32, 9));
}

TEST(GgufTest, OpenReportsMissingFilesAndDirectories) {
  auto r = GgufFile::Open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot open"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("/nonexistent/dir/model.gguf"), std::string::npos);
  auto d = GgufFile::Open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos) << d.status().message();
}

TEST(GgufTest, ReadsTheRealModel) {
  ASSERT_TRUE(std::filesystem::exists(kModelPath))
      << kModelPath << " is missing: run scripts/fetch_model.sh from the repository root";
  auto r = GgufFile::Open(kModelPath);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  const std::vector<std::string>* tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->size(), 49152u);
  EXPECT_GT(f.GetUint("llama.block_count").value_or(0), 0u);
  EXPECT_GT(f.GetUint("llama.embedding_length").value_or(0), 0u);
  std::set<GgmlType> types;
  size_t total = 0;
  for (const GgufTensor& t : f.tensors()) {
    types.insert(t.type);
    total += t.n_bytes;
    EXPECT_NE(t.data, nullptr);
    EXPECT_EQ(f.FindTensor(t.name), &t);
    EXPECT_EQ(t.offset % f.alignment(), 0u);
  }
  EXPECT_EQ(types, (std::set<GgmlType>{GgmlType::kQ4_1, GgmlType::kF32, GgmlType::kQ8_0}));
  EXPECT_LE(f.data_offset() + total, f.file_size());
  const GgufTensor* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  ASSERT_EQ(embd->dims.size(), 2u);
  EXPECT_EQ(embd->dims[0], f.GetUint("llama.embedding_length"));
  EXPECT_EQ(embd->dims[1], 49152u);
  for (const GgufKv& kv : f.metadata()) EXPECT_FALSE(ToString(kv.value, 4).empty()) << kv.key;
}

// ---- malformed input: one test per class ----

// A small valid file covering every section kind; its last tensor fills its aligned slot
// exactly, so every proper prefix of it is invalid.
std::vector<uint8_t> SmallValidFile() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetScalar<uint32_t>("n", 7);
  w.SetStringArray("tokens", {"a", "bc"});
  w.Set("nested", GgufValue::ArrayOfArrays({GgufValue::Array(std::vector<float>{1.0f})}));
  w.AddTensor("x", GgmlType::kF32, {3}, Pattern(12, 0));
  w.AddTensor("y", GgmlType::kF32, {8}, Pattern(32, 1));
  return w.ToBytes();
}

TEST(GgufMalformedTest, EveryPrefixOfAValidFileIsRejected) {
  const std::vector<uint8_t> full = SmallValidFile();
  ASSERT_NE(MustParse(full), nullptr);
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string e = Error(std::vector<uint8_t>(full.begin(), full.begin() + n));
    ASSERT_FALSE(e.empty()) << "prefix of " << n << " bytes was accepted";
    const bool says_why = e.find("truncated") != std::string::npos || e.find("remain") != std::string::npos ||
                          e.find("past the end") != std::string::npos;
    EXPECT_TRUE(says_why) << "prefix " << n << ": " << e;
  }
  const std::string empty = Error(std::vector<uint8_t>{});
  EXPECT_NE(empty.find("truncated: reading the magic"), std::string::npos) << empty;
}

TEST(GgufMalformedTest, TruncationNamesWhatAndWhere) {
  std::vector<uint8_t> b = SmallValidFile();
  b.resize(10);  // inside the tensor count
  EXPECT_EQ(Error(b), "truncated: reading the tensor count at offset 8 needs 8 bytes, but only 2 remain (file size 10)");
}

TEST(GgufMalformedTest, WrongMagicSaysWhatWasFound) {
  std::vector<uint8_t> b = SmallValidFile();
  std::memcpy(b.data(), "GGML", 4);
  const std::string e = Error(b);
  EXPECT_NE(e.find("not a GGUF file"), std::string::npos) << e;
  EXPECT_NE(e.find("'GGML'"), std::string::npos) << e;
  b[0] = 0x7f;
  EXPECT_NE(Error(b).find("\\x7f"), std::string::npos) << Error(b);
}

TEST(GgufMalformedTest, UnsupportedVersions) {
  EXPECT_EQ(Error(GgufWriter({.version = 1})), "GGUF version 1 is not supported (need 2 or 3)");
  EXPECT_EQ(Error(GgufWriter({.version = 4})), "GGUF version 4 is not supported (need 2 or 3)");
  std::vector<uint8_t> b = SmallValidFile();
  const uint8_t be3[4] = {0, 0, 0, 3};
  std::memcpy(b.data() + 4, be3, 4);
  EXPECT_NE(Error(b).find("big-endian"), std::string::npos) << Error(b);
}

TEST(GgufMalformedTest, AbsurdCountsAreRejectedBeforeAllocating) {
  std::vector<uint8_t> b = SmallValidFile();
  std::vector<uint8_t> t = b;
  std::memcpy(t.data() + 8, Le64(uint64_t{1} << 60).data(), 8);
  EXPECT_NE(Error(t).find("tensor count 1152921504606846976 is absurd"), std::string::npos) << Error(t);
  std::vector<uint8_t> k = b;
  std::memcpy(k.data() + 16, Le64(~uint64_t{0}).data(), 8);
  EXPECT_NE(Error(k).find("kv count 18446744073709551615 is absurd"), std::string::npos) << Error(k);
}

TEST(GgufMalformedTest, AbsurdStringLength) {
  GgufWriter w;
  w.SetRaw("general.name", static_cast<uint32_t>(GgufValueType::kString), Le64(uint64_t{1} << 40));
  const std::string e = Error(w);
  EXPECT_NE(e.find("claims 1099511627776 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("general.name"), std::string::npos) << e;
  GgufWriter k;  // a key length that is absurd
  k.SetRaw(std::string(5, 'k'), 0, {1});
  std::vector<uint8_t> b = k.ToBytes();
  std::memcpy(b.data() + 24, Le64(~uint64_t{0} - 3).data(), 8);
  EXPECT_NE(Error(b).find("key at offset 24 claims"), std::string::npos) << Error(b);
}

TEST(GgufMalformedTest, AbsurdArrayCount) {
  GgufWriter w;
  std::vector<uint8_t> payload = {static_cast<uint8_t>(GgufValueType::kString), 0, 0, 0};
  Cat(payload, Le64(uint64_t{1} << 62));
  w.SetRaw("tokenizer.ggml.tokens", static_cast<uint32_t>(GgufValueType::kArray), payload);
  const std::string e = Error(w);
  EXPECT_NE(e.find("claims 4611686018427387904 string elements"), std::string::npos) << e;
  EXPECT_NE(e.find("tokenizer.ggml.tokens"), std::string::npos) << e;
}

TEST(GgufMalformedTest, UnknownValueType) {
  GgufWriter w;
  w.SetRaw("k", 13, {0, 0, 0, 0});
  EXPECT_NE(Error(w).find("unknown value type id 13"), std::string::npos) << Error(w);
  GgufWriter a;  // unknown array element type
  std::vector<uint8_t> payload = {99, 0, 0, 0};
  Cat(payload, Le64(1));
  a.SetRaw("arr", static_cast<uint32_t>(GgufValueType::kArray), payload);
  EXPECT_NE(Error(a).find("unknown array element type id 99"), std::string::npos) << Error(a);
}

TEST(GgufMalformedTest, BadBoolValue) {
  GgufWriter w;
  w.SetRaw("flag", static_cast<uint32_t>(GgufValueType::kBool), {2});
  EXPECT_NE(Error(w).find("must be 0 or 1"), std::string::npos) << Error(w);
}

TEST(GgufMalformedTest, ArraysNestedTooDeep) {
  GgufValue v = GgufValue::Array(std::vector<uint8_t>{1});
  for (int i = 0; i < kGgufMaxArrayDepth + 1; ++i) v = GgufValue::ArrayOfArrays({v});
  GgufWriter w;
  w.Set("deep", v);
  EXPECT_NE(Error(w).find("nested more than 8 deep"), std::string::npos) << Error(w);
}

TEST(GgufMalformedTest, EmptyOrOverlongKeysAndNames) {
  GgufWriter w;
  w.SetRaw("", 0, {1});
  EXPECT_NE(Error(w).find("is empty"), std::string::npos) << Error(w);
  GgufWriter l;
  l.SetRaw(std::string(kGgufMaxKeyBytes + 1, 'k'), 0, {1});
  EXPECT_NE(Error(l).find("the limit is 65535"), std::string::npos) << Error(l);
  GgufWriter t;
  t.AddTensor(std::string(64, 't'), GgmlType::kF32, {1}, Pattern(4, 0));
  EXPECT_NE(Error(t).find("the limit is 63"), std::string::npos) << Error(t);
}

TEST(GgufMalformedTest, DuplicateKeys) {
  GgufWriter w;
  w.SetRaw("a", 0, {1});
  w.SetRaw("b", 0, {1});
  w.SetRaw("a", 0, {2});
  EXPECT_EQ(Error(w), "duplicate metadata key 'a' (kv 0 and kv 2)");
}

TEST(GgufMalformedTest, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w;
    w.SetScalar<uint32_t>("general.alignment", a);
    EXPECT_EQ(Error(w), fmt::format("general.alignment is {}; it must be a nonzero power of two", a));
  }
  GgufWriter s;
  s.SetString("general.alignment", "32");
  EXPECT_NE(Error(s).find("general.alignment must be a non-negative integer, got string"), std::string::npos)
      << Error(s);
  GgufWriter n;
  n.SetScalar<int32_t>("general.alignment", -32);
  EXPECT_NE(Error(n).find("non-negative integer"), std::string::npos) << Error(n);
}

TEST(GgufMalformedTest, UnknownTensorType) {
  GgufWriter w;
  w.AddRawTensorInfo("blk.3.attn_q.weight", 99, {32}, 0);
  const std::string e = Error(w);
  EXPECT_NE(e.find("tensor 'blk.3.attn_q.weight' has unknown ggml type id 99"), std::string::npos) << e;
}

TEST(GgufMalformedTest, BadDims) {
  GgufWriter zero;
  zero.AddRawTensorInfo("z", 0, {4, 0}, 0);
  EXPECT_NE(Error(zero).find("tensor 'z' has dimension 1 of size 0"), std::string::npos) << Error(zero);
  GgufWriter none;
  none.AddRawTensorInfo("n", 0, {}, 0);
  EXPECT_NE(Error(none).find("has 0 dimensions; must be 1..4"), std::string::npos) << Error(none);
  GgufWriter five;
  five.AddRawTensorInfo("f", 0, {1, 1, 1, 1, 1}, 0);
  EXPECT_NE(Error(five).find("has 5 dimensions; must be 1..4"), std::string::npos) << Error(five);
  GgufWriter over;
  over.AddRawTensorInfo("o", 0, {uint64_t{1} << 32, uint64_t{1} << 32}, 0);
  EXPECT_NE(Error(over).find("more elements than fit in int64"), std::string::npos) << Error(over);
  GgufWriter bytes;  // elements fit int64 but F32 bytes do not fit 64 bits
  bytes.AddRawTensorInfo("b", 0, {uint64_t{1} << 31, uint64_t{1} << 31}, 0);
  EXPECT_NE(Error(bytes).find("overflows"), std::string::npos) << Error(bytes);
}

TEST(GgufMalformedTest, Ne0NotAMultipleOfTheBlockSize) {
  GgufWriter w;
  w.AddTensor("q", GgmlType::kQ4_1, {33, 2}, Pattern(40, 0));
  EXPECT_EQ(Error(w), "tensor info 0 of 1: tensor 'q' of type Q4_1 has ne0 = 33, not a multiple of the block size 32");
}

TEST(GgufMalformedTest, UnalignedTensorOffset) {
  GgufWriter w;
  w.AddTensor("a", GgmlType::kF32, {8}, Pattern(32, 0));
  w.AddRawTensorInfo("b", 0, {1}, 36);
  EXPECT_NE(Error(w).find("tensor 'b' data offset 36 is not a multiple of the alignment 32"), std::string::npos)
      << Error(w);
}

TEST(GgufMalformedTest, TensorDataPastTheEndOfFile) {
  GgufWriter w;
  w.AddTensor("a", GgmlType::kF32, {8}, Pattern(32, 0));
  w.AddRawTensorInfo("b", 0, {16}, 32);  // 64 bytes starting where the file ends
  EXPECT_NE(Error(w).find("tensor 'b' data (64 bytes at data offset 32) lies past the end"), std::string::npos)
      << Error(w);
  GgufWriter far;
  far.AddRawTensorInfo("c", 0, {1}, uint64_t{1} << 62);
  EXPECT_NE(Error(far).find("past the end"), std::string::npos) << Error(far);
}

TEST(GgufMalformedTest, OverlappingTensors) {
  GgufWriter w;
  w.AddTensor("a", GgmlType::kF32, {16}, Pattern(64, 0));
  w.AddRawTensorInfo("b", 0, {8}, 32);
  EXPECT_EQ(Error(w), "tensors 'a' [0, 64) and 'b' [32, 64) overlap in the data section");
}

TEST(GgufMalformedTest, DuplicateTensorNames) {
  GgufWriter w;
  w.AddTensor("w", GgmlType::kF32, {8}, Pattern(32, 0));
  w.AddTensor("w", GgmlType::kF32, {8}, Pattern(32, 1));
  EXPECT_EQ(Error(w), "duplicate tensor name 'w' (tensor 0 and tensor 1)");
  GgufWriter c;  // names from the file are escaped in messages
  c.AddTensor("a\nb", GgmlType::kF32, {8}, Pattern(32, 0));
  c.AddTensor("a\nb", GgmlType::kF32, {8}, Pattern(32, 1));
  EXPECT_EQ(Error(c), "duplicate tensor name 'a\\x0ab' (tensor 0 and tensor 1)");
}

TEST(GgufMalformedTest, RandomByteFlipsNeverCrash) {
  const std::vector<uint8_t> full = SmallValidFile();
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = full;
    const int flips = 1 + iter % 4;
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    auto r = GgufFile::FromBytes(std::move(b));
    if (!r.ok()) {
      EXPECT_FALSE(r.status().message().empty());
      continue;
    }
    for (const GgufKv& kv : (*r)->metadata()) (void)ToString(kv.value, 4);
    for (const GgufTensor& t : (*r)->tensors()) {
      ASSERT_GT(t.n_bytes, 0u);
      volatile uint8_t last = t.data[t.n_bytes - 1];
      (void)last;
    }
  }
}

}  // namespace
}  // namespace chorus
