// GgufWriter: builds GGUF files in memory (tests, fuzz seeds, tiny synthetic models).
// Invariant: it writes what it is told, bad input included (duplicate names, raw infos, any
// version), so tests can make malformed files; the reader (GgufFile) is the validator.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"  // GgmlType
#include "gguf/gguf_value.h"  // GgufValue
#include "util/status.h"      // Status

namespace chorus {

class GgufWriter {
 public:
  struct Options {
    uint32_t version = 3;     // 2 or 3 (other numbers are written verbatim, for tests)
    uint32_t alignment = 32;  // padding of the data section; if not 32, general.alignment is written too
  };
  GgufWriter() : GgufWriter(Options{}) {}
  explicit GgufWriter(Options options);

  // Metadata, written in the order first set. Set replaces an earlier value of the same key.
  void Set(const std::string& key, GgufValue value);
  template <typename T>
  void SetScalar(const std::string& key, T v) { Set(key, GgufValue::Of(v)); }
  void SetString(const std::string& key, std::string v) { Set(key, GgufValue::String(std::move(v))); }
  void SetStringArray(const std::string& key, std::vector<std::string> v) {
    Set(key, GgufValue::StringArray(std::move(v)));
  }
  // A kv appended verbatim: key, type id, then payload bytes (may be bad; never deduplicated).
  void SetRaw(const std::string& key, uint32_t type_id, std::vector<uint8_t> payload);

  // A tensor whose bytes go in the data section at the next aligned offset (dims ne0 first).
  void AddTensor(const std::string& name, GgmlType type, std::vector<uint64_t> dims, std::vector<uint8_t> bytes);
  // A tensor info written verbatim (any type id, dims, offset) with no data of its own.
  void AddRawTensorInfo(const std::string& name, uint32_t type_id, std::vector<uint64_t> dims, uint64_t offset);

  std::vector<uint8_t> ToBytes() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    std::optional<GgufValue> value;  // or, when empty, the raw form below
    uint32_t raw_type = 0;
    std::vector<uint8_t> raw_payload;
  };
  struct Tensor {
    std::string name;
    uint32_t type_id;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> bytes;
    std::optional<uint64_t> raw_offset;  // set for AddRawTensorInfo
  };

  Options options_;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace chorus
