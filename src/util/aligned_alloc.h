// AlignedAlloc / AlignedFree: the one 64-byte aligned allocator of the KV layer and every
// AlignedBuffer, counted process-wide (live bytes, peak, calls) so a test can see every buffer the
// KV layer allocates — operator new alone would miss them. Sizes are rounded up to 64 bytes; the
// counts are of the rounded sizes (what the allocation really holds).
#pragma once
#include <cstddef>

namespace chorus {

// Bytes an allocation of `bytes` really holds (rounded up to the 64-byte alignment; 0 → 0).
constexpr size_t AlignedBytes(size_t bytes) { return (bytes + 63) / 64 * 64; }

// nullptr when out of memory (or bytes == 0). Thread-safe.
void* AlignedAlloc(size_t bytes);
// `bytes` must be what was passed to AlignedAlloc for p (nullptr is ignored).
void AlignedFree(void* p, size_t bytes);

struct AlignedAllocStats {
  size_t live = 0;    // bytes currently allocated (rounded)
  size_t peak = 0;    // most bytes allocated at once since the last ResetAlignedAllocPeak
  size_t calls = 0;   // allocations so far
};
AlignedAllocStats GetAlignedAllocStats();
// Sets the peak to the current live bytes (tests measure a step's transient bytes from here).
void ResetAlignedAllocPeak();

}  // namespace chorus
