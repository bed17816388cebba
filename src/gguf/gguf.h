// GgufFile: a validated, read-only view of a GGUF v2/v3 file (metadata in file order + tensor index).
// Invariant: once Open/FromBytes succeeds, every tensor's data lies inside the file, aligned, and
// disjoint from every other tensor's; the bytes stay mapped (or owned) for the object's life.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"  // GgmlType
#include "gguf/gguf_value.h"  // GgufValue, GgufArray, ToString
#include "util/status.h"      // Status, Result

namespace chorus {

struct GgufKv {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // (n_dims) ne0 first (the contiguous dimension), 1 ≤ n_dims ≤ 4
  GgmlType type = GgmlType::kF32;
  uint64_t n_elements = 0;     // product of dims
  size_t n_bytes = 0;          // n_elements / block_elems × block_bytes
  uint64_t offset = 0;         // relative to the data section; a multiple of alignment()
  const uint8_t* data = nullptr;  // (n_bytes) inside the file's bytes
};

struct GgufOpenOptions {
  // Accept tensors of types chorus knows by name but cannot compute with (Q2_K, IQ*, ...),
  // e.g. for an inspect tool. Unknown type ids are always rejected.
  bool allow_unsupported_types = false;
};

// Limits the reader enforces (also in docs/GGUF.md).
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;
inline constexpr uint64_t kGgufMaxKeyBytes = 65535;
inline constexpr uint64_t kGgufMaxTensorNameBytes = 63;  // ggml's GGML_MAX_NAME (64) counts the NUL
inline constexpr int kGgufMaxArrayDepth = 8;              // array of array of ... nesting

class GgufFile {
 public:
  // mmap the file read-only; it stays mapped until the GgufFile is destroyed.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path, const GgufOpenOptions& options = {});
  // Parse bytes held in memory (tests, fuzzer). The bytes are copied to a page-aligned buffer
  // so tensor data is aligned in memory as it would be when mapped.
  static Result<std::unique_ptr<GgufFile>> FromBytes(std::vector<uint8_t> bytes,
                                                     const GgufOpenOptions& options = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  size_t data_offset() const { return data_offset_; }  // where the tensor data section starts

  // Metadata, in file order.
  const std::vector<GgufKv>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;
  std::optional<uint64_t> GetUint(std::string_view key) const;  // any integer type, value ≥ 0
  std::optional<int64_t> GetInt(std::string_view key) const;    // any integer type that fits int64
  std::optional<double> GetFloat(std::string_view key) const;   // float32/64 or any integer type
  std::optional<bool> GetBool(std::string_view key) const;
  std::optional<std::string_view> GetString(std::string_view key) const;
  const std::vector<std::string>* GetStringArray(std::string_view key) const;  // array of string
  // Numeric arrays: nullopt if missing, not an array of integers (I32/I64) / numbers (F32),
  // or (I32) a value does not fit int32.
  std::optional<std::vector<int32_t>> GetI32Array(std::string_view key) const;
  std::optional<std::vector<int64_t>> GetI64Array(std::string_view key) const;
  std::optional<std::vector<float>> GetF32Array(std::string_view key) const;

  // Tensors, in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;

  // Drops this process's resident pages wholly inside [p, p + n) of the mapping (madvise DONTNEED:
  // an access later reads them from the file again), e.g. a tensor the model keeps a repacked copy
  // of. A no-op for a file built from bytes.
  void ReleasePages(const void* p, size_t n) const;

 private:
  GgufFile() = default;
  static Result<std::unique_ptr<GgufFile>> Parse(std::unique_ptr<GgufFile> f, const GgufOpenOptions& options);
  Status ParseAll(const GgufOpenOptions& options);  // gguf_parse.cc

  const uint8_t* base_ = nullptr;  // (size_) the whole file
  size_t size_ = 0;
  void* map_ = nullptr;            // mmap region when opened from a path
  size_t map_size_ = 0;
  void* owned_ = nullptr;          // aligned copy when built from bytes

  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  size_t data_offset_ = 0;
  std::vector<GgufKv> metadata_;
  std::map<std::string, size_t, std::less<>> kv_index_;      // key → index in metadata_
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name → index in tensors_
};

}  // namespace chorus
