// SafetensorsFile: a read-only view of a .safetensors file (8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {...}}, then the data).
// Invariants after Open/FromBytes succeed: every tensor's [begin,end) lies inside the data section,
// end-begin == numel(shape) * size(dtype) (no overflow), tensors do not overlap, names are unique.
// The bytes are mmap'ed (Open) or owned (FromBytes); tensor data pointers live as long as the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"  // Status, Result

namespace chorus {

enum class StDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

const char* StDtypeName(StDtype t);
size_t StDtypeSize(StDtype t);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the file's bytes; may be unaligned for the dtype
  size_t bytes = 0;
  size_t numel() const;
};

class SafetensorsFile {
 public:
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // mmap the file and validate its header. Errors name the path and the problem.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Same validation on bytes held in memory (tests, fuzzing); `label` names them in errors.
  static Result<std::unique_ptr<SafetensorsFile>> FromBytes(std::vector<uint8_t> bytes,
                                                             const std::string& label = "<memory>");

  const std::vector<StTensor>& tensors() const { return tensors_; }
  const StTensor* Find(std::string_view name) const;  // nullptr when absent
  const std::string& path() const { return path_; }

  // The tensor as f32 (F32 copied, F16/BF16 converted); checks the name exists, the dtype is one of
  // those and, when `shape` is non-empty, that the shape matches it exactly.
  Result<std::vector<float>> ReadF32(std::string_view name, const std::vector<int64_t>& shape = {}) const;

 private:
  SafetensorsFile() = default;
  Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;  // mmap base (nullptr when owned_ holds the bytes)
  std::vector<uint8_t> owned_;
  std::vector<StTensor> tensors_;
};

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace chorus
