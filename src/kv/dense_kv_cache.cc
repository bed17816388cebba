// DenseKvCache storage and the fp16 dense attention kernel (Highway) with its scalar twin.
#include "kv/dense_kv_cache.h"

#include <cmath>
#include <vector>

#include "util/fp16.h"  // F16ToF32

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kv/dense_kv_cache.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AttendImpl(const float* q, const uint16_t* k, const uint16_t* v, size_t stride, size_t n_ctx,
                size_t head_dim, float* scores, float* out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  const bool vec = head_dim % N == 0;
  float m = -INFINITY;
  for (size_t j = 0; j < n_ctx; ++j) {
    const uint16_t* kj = k + j * stride;
    float s;
    if (vec) {
      auto acc = hn::Zero(df);
      for (size_t i = 0; i < head_dim; i += N) {
        const auto kv = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(kj + i)));
        acc = hn::MulAdd(hn::LoadU(df, q + i), kv, acc);
      }
      s = hn::GetLane(hn::SumOfLanes(df, acc));
    } else {
      s = 0;
      for (size_t i = 0; i < head_dim; ++i) s += q[i] * F16ToF32(kj[i]);
    }
    scores[j] = s;
    m = s > m ? s : m;
  }
  float sum = 0;
  for (size_t j = 0; j < n_ctx; ++j) {
    scores[j] = std::exp(scores[j] - m);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < head_dim; ++i) out[i] = 0;
  for (size_t j = 0; j < n_ctx; ++j) {
    const float p = scores[j] * inv;
    const uint16_t* vj = v + j * stride;
    if (vec) {
      const auto vp = hn::Set(df, p);
      for (size_t i = 0; i < head_dim; i += N) {
        const auto vv = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(vj + i)));
        hn::StoreU(hn::MulAdd(vp, vv, hn::LoadU(df, out + i)), df, out + i);
      }
    } else {
      for (size_t i = 0; i < head_dim; ++i) out[i] += p * F16ToF32(vj[i]);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(AttendImpl);

DenseKvCache::DenseKvCache(size_t n_layer, size_t capacity, const AttentionShape& shape,
                           std::vector<uint32_t> layer_window)
    : n_layer_(n_layer), capacity_(capacity), kv_dim_(shape.kv_dim()), shape_(shape),
      layer_window_(std::move(layer_window)) {
  const size_t kv_dim = kv_dim_;
  k_.reserve(n_layer);
  v_.reserve(n_layer);
  for (size_t l = 0; l < n_layer; ++l) {
    k_.emplace_back(capacity * kv_dim);
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
  for (size_t t = 0; t < n; ++t) {
    uint16_t* kd = K(layer, pos0 + t);
    uint16_t* vd = V(layer, pos0 + t);
    for (size_t i = 0; i < kv_dim_; ++i) {
      kd[i] = F32ToF16(k[t * kv_dim_ + i]);
      vd[i] = F32ToF16(v[t * kv_dim_ + i]);
    }
  }
  const size_t units = n * shape_.n_head;
  const size_t window = layer < layer_window_.size() ? layer_window_[layer] : 0;
  pool.Run([&](int ti, int nt) {
    std::vector<float> scores(pos0 + n);
    for (size_t u = ti; u < units; u += nt) {
      const size_t t = u / shape_.n_head, h = u % shape_.n_head, hk = h / group;
      const size_t p = pos0 + t, first = window > 0 && p + 1 > window ? p + 1 - window : 0;
      AttendDenseHead(q + t * q_dim + h * hd, K(layer, first) + hk * hd, V(layer, first) + hk * hd, kv_dim_,
                      p + 1 - first, hd, scores.data(), out + t * q_dim + h * hd);
    }
  });
  return Status::Ok();
}

size_t DenseKvCache::bytes() const { return 2 * n_layer_ * capacity_ * kv_dim_ * sizeof(uint16_t); }

void AttendDenseHead(const float* q, const uint16_t* k, const uint16_t* v, size_t stride,
                     size_t n_ctx, size_t head_dim, float* scores, float* out) {
  HWY_DYNAMIC_DISPATCH(AttendImpl)(q, k, v, stride, n_ctx, head_dim, scores, out);
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
#endif  // HWY_ONCE
