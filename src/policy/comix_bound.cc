// CoMix error bound: per-head statistics and the attention-output error bound (see header).
#include "policy/comix_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace chorus {
namespace {

constexpr double kTqKappa = 2.0;  // margin of the TQ row-error estimate over √MSE
constexpr size_t kValueGroup = 32;  // KIVI value group: 32 channels of one row

double TqMse(int bits) {  // measured Lloyd–Max MSE per coordinate (METHODS.md §4)
  switch (bits) {
    case 2: return 0.1175;
    case 3: return 0.03455;
    default: return 0.00950;
  }
}

double Sq(double x) { return x * x; }

}  // namespace

KvFormat ComixFormat(ComixFamily family, int bits) {
  if (bits >= 8) return KvFormat::kQ8;
  if (family == ComixFamily::kKivi)
    return bits <= 2 ? KvFormat::kKivi2 : bits == 3 ? KvFormat::kKivi3 : KvFormat::kKivi4;
  return bits <= 2 ? KvFormat::kTq2 : bits == 3 ? KvFormat::kTq3 : KvFormat::kTq4;
}

double KiviElementBound(int bits, double range, double absmax) {
  const double qmax = double((1 << bits) - 1);
  return range / (2.0 * qmax) + std::ldexp(range + absmax, -10) + std::ldexp(1.0, -23);
}

double TqRowErrorFactor(int bits) { return kTqKappa * std::sqrt(TqMse(bits)); }

void HeadStats::Reset(size_t d) {
  k_min.assign(d, std::numeric_limits<float>::infinity());
  k_max.assign(d, -std::numeric_limits<float>::infinity());
  v_min = k_min;
  v_max = k_max;
  q_abs_max.assign(d, 0.0f);
  q_norm_max = k_norm_max = v_norm_max = v_group_range_max = v_abs_max = 0;
  rows = queries = 0;
}

void HeadStats::AddKeyValueRow(const float* k, const float* v) {
  const size_t d = dim();
  float kn = 0, vn = 0;
  for (size_t c = 0; c < d; ++c) {
    k_min[c] = std::min(k_min[c], k[c]);
    k_max[c] = std::max(k_max[c], k[c]);
    v_min[c] = std::min(v_min[c], v[c]);
    v_max[c] = std::max(v_max[c], v[c]);
    kn += k[c] * k[c];
    vn += v[c] * v[c];
    v_abs_max = std::max(v_abs_max, std::fabs(v[c]));
  }
  for (size_t g = 0; g + kValueGroup <= d; g += kValueGroup) {
    const auto [mn, mx] = std::minmax_element(v + g, v + g + kValueGroup);
    v_group_range_max = std::max(v_group_range_max, *mx - *mn);
  }
  k_norm_max = std::max(k_norm_max, std::sqrt(kn));
  v_norm_max = std::max(v_norm_max, std::sqrt(vn));
  ++rows;
}

void HeadStats::AddQuery(const float* q) {
  float n = 0;
  for (size_t c = 0; c < dim(); ++c) {
    q_abs_max[c] = std::max(q_abs_max[c], std::fabs(q[c]));
    n += q[c] * q[c];
  }
  q_norm_max = std::max(q_norm_max, std::sqrt(n));
  ++queries;
}

void HeadStats::Merge(const HeadStats& o) {
  for (size_t c = 0; c < dim(); ++c) {
    k_min[c] = std::min(k_min[c], o.k_min[c]);
    k_max[c] = std::max(k_max[c], o.k_max[c]);
    v_min[c] = std::min(v_min[c], o.v_min[c]);
    v_max[c] = std::max(v_max[c], o.v_max[c]);
    q_abs_max[c] = std::max(q_abs_max[c], o.q_abs_max[c]);
  }
  q_norm_max = std::max(q_norm_max, o.q_norm_max);
  k_norm_max = std::max(k_norm_max, o.k_norm_max);
  v_norm_max = std::max(v_norm_max, o.v_norm_max);
  v_group_range_max = std::max(v_group_range_max, o.v_group_range_max);
  v_abs_max = std::max(v_abs_max, o.v_abs_max);
  rows += o.rows;
  queries += o.queries;
}

namespace {

// Bound on maxⱼ|q·eⱼ| for keys at `bits`.
double KeyDelta(const HeadStats& s, ComixFamily family, int bits) {
  const size_t d = s.dim();
  if (s.rows == 0) return 0;
  if (family == ComixFamily::kTq && bits < 8) return s.q_norm_max * TqRowErrorFactor(bits) * s.k_norm_max;
  double holder = 0, eps_sq = 0;
  for (size_t c = 0; c < d; ++c) {
    const double r = double(s.k_max[c]) - s.k_min[c];
    const double a = std::max(std::fabs(s.k_max[c]), std::fabs(s.k_min[c]));
    // q8: one absmax scale per (token, head): ≤ max|x|/254 (+ fp16 scale slack).
    const double eps = bits >= 8 ? 0 : KiviElementBound(bits, r, a);
    holder += s.q_abs_max[c] * eps;
    eps_sq += eps * eps;
  }
  if (bits >= 8) {
    double amax = 0;
    for (size_t c = 0; c < d; ++c) amax = std::max({amax, std::fabs(double(s.k_max[c])), std::fabs(double(s.k_min[c]))});
    const double eps = amax / 254.0 + std::ldexp(amax, -10);
    return s.q_norm_max * eps * std::sqrt(double(d));
  }
  return std::min(holder, s.q_norm_max * std::sqrt(eps_sq));
}

double ValueErr(const HeadStats& s, ComixFamily family, int bits) {
  if (s.rows == 0 || bits == 0) return 0;
  const double d = double(s.dim());
  if (bits >= 8) return std::sqrt(d) * (s.v_abs_max / 254.0 + std::ldexp(s.v_abs_max, -10));
  if (family == ComixFamily::kTq) return TqRowErrorFactor(bits) * s.v_norm_max;
  return std::sqrt(d) * KiviElementBound(bits, s.v_group_range_max, s.v_abs_max);
}

double HalfRangeNorm(const HeadStats& s) {
  double r = 0;
  for (size_t c = 0; c < s.dim(); ++c) r += Sq((double(s.v_max[c]) - s.v_min[c]) / 2);
  return s.rows ? std::sqrt(r) : 0;
}

}  // namespace

HeadBound BoundHead(const HeadStats& s, ComixFamily family, int k_bits, int v_bits) {
  HeadBound b;
  b.value_err = ValueErr(s, family, v_bits);
  b.radius = HalfRangeNorm(s) + b.value_err;
  b.delta = k_bits == 0 ? 0 : KeyDelta(s, family, k_bits);
  b.prob_l1 = std::min(b.delta, 2.0);
  b.total = b.prob_l1 * b.radius + b.value_err;
  return b;
}

double SideBound(const HeadStats& s, ComixFamily family, KvSide side, int bits) {
  if (side == KvSide::kValue) return ValueErr(s, family, bits);
  // Keys: the radius is taken with 2-bit values (the worst case of the other side's choice).
  const HeadBound b = BoundHead(s, family, bits, 2);
  return b.delta * b.radius;
}

double SideExpected(const HeadStats& s, ComixFamily family, KvSide side, int bits) {
  if (s.rows == 0) return 0;
  const size_t d = s.dim();
  const double qmax = double((1 << std::min(bits, 8)) - 1);
  if (side == KvSide::kValue) {
    if (bits >= 8) return std::sqrt(d / 3.0) * s.v_abs_max / 254.0;
    if (family == ComixFamily::kTq) return std::sqrt(TqMse(bits)) * s.v_norm_max;
    return std::sqrt(d / 3.0) * s.v_group_range_max / (2 * qmax);
  }
  double var = 0;  // σ²(q·e) with q_c at its recent max
  if (family == ComixFamily::kTq && bits < 8) {
    double qn = 0;
    for (size_t c = 0; c < d; ++c) qn += Sq(s.q_abs_max[c]);
    var = qn * TqMse(bits) * Sq(s.k_norm_max) / double(d);
  } else {
    for (size_t c = 0; c < d; ++c) {
      const double r = double(s.k_max[c]) - s.k_min[c];
      const double a = std::max(std::fabs(s.k_max[c]), std::fabs(s.k_min[c]));
      const double step = bits >= 8 ? a / 127.0 : r / qmax;
      var += Sq(s.q_abs_max[c]) * Sq(step) / 12.0;
    }
  }
  return std::sqrt(var) * std::sqrt(2.0 / 3.14159265358979) * HalfRangeNorm(s) / std::sqrt(3.0);
}

double ComixCalibration(ComixFamily family, KvSide side, int bits) {
  // [family kivi, tq][side K, V][bits 2, 3, 4, 8]
  static constexpr double kTable[2][2][4] = {{{0.0131, 0.009208, 0.009101, 0.0278}, {0.05895, 0.05604, 0.05226, 0.06525}},
                                             {{0.0166, 0.01368, 0.01377, 0.0278}, {0.07753, 0.06777, 0.06849, 0.06525}}};
  const int b = bits == 2 ? 0 : bits == 3 ? 1 : bits == 4 ? 2 : bits == 8 ? 3 : -1;
  if (b < 0) return 1;
  return kTable[family == ComixFamily::kTq][side == KvSide::kValue][b];
}

}  // namespace chorus
