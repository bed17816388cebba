// AlignedBuffer<T>: an owning, 64-byte aligned, non-copyable array (scratch and weights-free buffers).
#pragma once
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>

#include "util/aligned_alloc.h"  // AlignedAlloc (counted)

namespace chorus {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { Resize(n); }
  ~AlignedBuffer() { AlignedFree(data_, size_ * sizeof(T)); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; o.size_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  // Contents are not preserved; new memory is zeroed.
  // The old memory is freed before the new is allocated (never both at once).
  void Resize(size_t n) {
    if (n == size_) return;
    AlignedFree(data_, size_ * sizeof(T));
    data_ = nullptr;
    size_ = n;
    if (n == 0) return;
    data_ = static_cast<T*>(AlignedAlloc(n * sizeof(T)));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, AlignedBytes(n * sizeof(T)));
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  // Bytes the buffer really holds (its size rounded up to the 64-byte alignment).
  size_t bytes() const { return AlignedBytes(size_ * sizeof(T)); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace chorus
