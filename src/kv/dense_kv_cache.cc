// DenseKvCache storage and its causal attention (AttendF16Ranges over tiles of tokens), with the
// scalar double-precision twin of one head.
#include "kv/dense_kv_cache.h"

#include <cmath>
#include <vector>

#include "kv/attention_math.h"  // AttendF16Ranges
#include "util/fp16.h"  // F16ToF32

namespace chorus {
namespace {
// Queries attended together in one work unit (tokens × the query heads of one KV head): enough to reuse
// each converted key tile 48 times, few enough that 512-token prompts make dozens of units.
constexpr size_t kTileQueries = 48;
}  // namespace

DenseKvCache::DenseKvCache(size_t n_layer, size_t capacity, const AttentionShape& shape,
                           std::vector<uint32_t> layer_window)
    : n_layer_(n_layer), capacity_(capacity), kv_dim_(shape.kv_dim()), shape_(shape),
      layer_window_(std::move(layer_window)) {
  const size_t kv_dim = kv_dim_;
  k_.reserve(n_layer);
  v_.reserve(n_layer);
  const size_t n_tiles = (capacity + kAttendRows - 1) / kAttendRows;
  for (size_t l = 0; l < n_layer; ++l) {
    k_.emplace_back(n_tiles * kAttendRows * kv_dim);
    v_.emplace_back(capacity * kv_dim);
  }
}

Status DenseKvCache::AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q,
                                     float* out, ThreadPool& pool) {
  if (size_ + n > capacity_)
    return Status::Error("context overflow: {} cached + {} new tokens exceed the context of {} tokens", size_, n,
                         capacity_);
  const size_t pos0 = size_, hd = shape_.head_dim, q_dim = shape_.q_dim();
  const size_t group = shape_.n_head / shape_.n_head_kv;
  const size_t n_kv = shape_.n_head_kv;
  for (size_t t = 0; t < n; ++t) {
    const size_t p = pos0 + t;
    uint16_t* vd = V(layer, p);
    for (size_t i = 0; i < kv_dim_; ++i) vd[i] = F32ToF16(v[t * kv_dim_ + i]);
    for (size_t h = 0; h < n_kv; ++h) {
      uint16_t* kd = KeyTile(layer, p / kAttendRows, h) + p % kAttendRows;
      for (size_t c = 0; c < hd; ++c) kd[c * kAttendRows] = F32ToF16(k[t * kv_dim_ + h * hd + c]);
    }
  }
  // Work unit: a tile of up to kTileTokens new tokens × a part of one KV head's query heads, attended
  // together (AttendF16Ranges: the rows all of them see are read once for the tile). Heads are split into
  // parts only when tiles alone are too few to keep every thread busy (decode).
  const size_t window = layer < layer_window_.size() ? layer_window_[layer] : 0;
  const size_t tile = std::max<size_t>(1, kTileQueries / group);
  const size_t n_tiles = (n + tile - 1) / tile;
  const size_t parts = n_tiles * n_kv >= 2 * static_cast<size_t>(pool.size()) ? 1 : group;
  const size_t heads_per_part = group / parts, units = n_tiles * n_kv * parts;
  pool.Run([&](int ti, int nt) {
    AttendScratch scratch;
    std::vector<float> qs, os;
    std::vector<uint32_t> first, end;
    for (size_t u = ti; u < units; u += nt) {
      const size_t part = u % parts, hk = (u / parts) % n_kv, t0 = u / parts / n_kv * tile;
      const size_t t1 = std::min(n, t0 + tile), h0 = hk * group + part * heads_per_part;
      const size_t n_q = (t1 - t0) * heads_per_part;
      qs.resize(n_q * hd);
      first.resize(n_q);
      end.resize(n_q);
      for (size_t t = t0, i = 0; t < t1; ++t) {
        const size_t p = pos0 + t;
        for (size_t h = h0; h < h0 + heads_per_part; ++h, ++i) {
          std::copy_n(q + t * q_dim + h * hd, hd, qs.data() + i * hd);
          first[i] = static_cast<uint32_t>(window > 0 && p + 1 > window ? p + 1 - window : 0);
          end[i] = static_cast<uint32_t>(p + 1);
        }
      }
      os.resize(n_q * hd);
      AttendF16Ranges(qs.data(), n_q, first.data(), end.data(), KeyTile(layer, 0, hk), n_kv * hd * kAttendRows,
                      V(layer, 0) + hk * hd, kv_dim_, hd, scratch, os.data(), hd);
      for (size_t t = t0, i = 0; t < t1; ++t)
        for (size_t h = h0; h < h0 + heads_per_part; ++h, ++i)
          std::copy_n(os.data() + i * hd, hd, out + t * q_dim + h * hd);
    }
  });
  return Status::Ok();
}

size_t DenseKvCache::bytes() const {
  size_t b = 0;
  for (size_t l = 0; l < n_layer_; ++l) b += (k_[l].size() + v_[l].size()) * sizeof(uint16_t);
  return b;
}

float DenseKvCache::Key(size_t layer, size_t pos, size_t head, size_t c) const {
  return F16ToF32(KeyTile(layer, pos / kAttendRows, head)[c * kAttendRows + pos % kAttendRows]);
}

void AttendDenseHeadRef(const float* q, const uint16_t* k, const uint16_t* v, size_t stride,
                        size_t n_ctx, size_t head_dim, float* out) {
  std::vector<double> s(n_ctx);
  double m = -INFINITY;
  for (size_t j = 0; j < n_ctx; ++j) {
    double acc = 0;
    for (size_t i = 0; i < head_dim; ++i) acc += static_cast<double>(q[i]) * F16ToF32(k[j * stride + i]);
    s[j] = acc;
    m = std::max(m, acc);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - m));
  for (size_t i = 0; i < head_dim; ++i) {
    double acc = 0;
    for (size_t j = 0; j < n_ctx; ++j) acc += s[j] * F16ToF32(v[j * stride + i]);
    out[i] = static_cast<float>(acc / sum);
  }
}

}  // namespace chorus
