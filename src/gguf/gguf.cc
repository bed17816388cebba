// GgufFile: opening (mmap or aligned copy) and metadata/tensor lookups; parsing is in gguf_parse.cc.
#include "gguf/gguf.h"

#include <fcntl.h>     // open
#include <sys/mman.h>  // mmap, munmap
#include <sys/stat.h>  // fstat
#include <unistd.h>    // close

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace chorus {
namespace {

constexpr size_t kOwnedAlignment = 4096;  // like a mapping: page-aligned

}  // namespace

GgufFile::~GgufFile() {
  if (map_) munmap(map_, map_size_);
  std::free(owned_);
}

void GgufFile::ReleasePages(const void* p, size_t n) const {
  if (!map_ || n == 0) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(map_), hi = lo + map_size_;
  uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  b = b < lo ? lo : b;
  e = e > hi ? hi : e;
  if (b < e) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

Result<std::unique_ptr<GgufFile>> GgufFile::Parse(std::unique_ptr<GgufFile> f, const GgufOpenOptions& options) {
  Status st = f->ParseAll(options);
  if (!st.ok()) return st;
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path, const GgufOpenOptions& options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open GGUF file '{}': {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::Error("cannot stat GGUF file '{}': {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error("'{}' is not a regular file", path);
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return Status::Error("cannot mmap GGUF file '{}' ({} bytes): {}", path, f->size_, std::strerror(e));
    }
    f->map_ = p;
    f->map_size_ = f->size_;
    f->base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  auto r = Parse(std::move(f), options);
  if (!r.ok()) return r.status().Context(path);
  return r;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::vector<uint8_t> bytes, const GgufOpenOptions& options) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->size_ = bytes.size();
  if (!bytes.empty()) {
    // Exactly size bytes (no rounding), so AddressSanitizer sees any read past the end.
    if (posix_memalign(&f->owned_, kOwnedAlignment, bytes.size()) != 0) {
      f->owned_ = nullptr;
      return Status::Error("out of memory copying {} GGUF bytes", bytes.size());
    }
    std::memcpy(f->owned_, bytes.data(), bytes.size());
    f->base_ = static_cast<const uint8_t*>(f->owned_);
  }
  std::vector<uint8_t>().swap(bytes);  // release the caller's copy before parsing
  return Parse(std::move(f), options);
}

// ---- lookups ----

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &metadata_[it->second].value;
}

std::optional<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsUint() : std::nullopt;
}

std::optional<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsInt() : std::nullopt;
}

std::optional<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsFloat() : std::nullopt;
}

std::optional<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsBool() : std::nullopt;
}

std::optional<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  return v ? v->AsString() : std::nullopt;
}

const std::vector<std::string>* GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || !v->array() || v->array()->elem_type != GgufValueType::kString) return nullptr;
  return &v->array()->strings;
}

std::optional<std::vector<int64_t>> GgufFile::GetI64Array(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || !v->array()) return std::nullopt;
  return v->array()->ToInts();
}

std::optional<std::vector<int32_t>> GgufFile::GetI32Array(std::string_view key) const {
  std::optional<std::vector<int64_t>> wide = GetI64Array(key);
  if (!wide) return std::nullopt;
  std::vector<int32_t> out(wide->size());
  for (size_t i = 0; i < wide->size(); ++i) {
    const int64_t x = (*wide)[i];
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) return std::nullopt;
    out[i] = static_cast<int32_t>(x);
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::GetF32Array(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v || !v->array()) return std::nullopt;
  std::optional<std::vector<double>> wide = v->array()->ToDoubles();
  if (!wide) return std::nullopt;
  return std::vector<float>(wide->begin(), wide->end());
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace chorus
