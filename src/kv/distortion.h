// DistortionStats: error statistics of an approximation against a reference (MSE, SNR, max error).
// Invariant: sums are kept in double; an empty object reports zeros (and +inf SNR).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace chorus {

class DistortionStats {
 public:
  void Add(double ref, double approx) {
    const double err = approx - ref;
    sum_sq_err_ += err * err;
    sum_sq_ref_ += ref * ref;
    sum_err_ += err;
    max_abs_err_ = std::max(max_abs_err_, std::abs(err));
    max_abs_ref_ = std::max(max_abs_ref_, std::abs(ref));
    ++count_;
  }
  // ref, approx: (n) values compared element by element.
  void Add(const float* ref, const float* approx, size_t n) {
    for (size_t i = 0; i < n; ++i) Add(ref[i], approx[i]);
  }
  void Merge(const DistortionStats& o) {
    sum_sq_err_ += o.sum_sq_err_;
    sum_sq_ref_ += o.sum_sq_ref_;
    sum_err_ += o.sum_err_;
    max_abs_err_ = std::max(max_abs_err_, o.max_abs_err_);
    max_abs_ref_ = std::max(max_abs_ref_, o.max_abs_ref_);
    count_ += o.count_;
  }

  size_t count() const { return count_; }
  double mse() const { return count_ ? sum_sq_err_ / count_ : 0.0; }
  double rmse() const { return std::sqrt(mse()); }
  double mean_err() const { return count_ ? sum_err_ / count_ : 0.0; }  // bias
  double max_abs_err() const { return max_abs_err_; }
  double max_abs_ref() const { return max_abs_ref_; }
  double signal_power() const { return count_ ? sum_sq_ref_ / count_ : 0.0; }
  // 10·log10(Σ ref² / Σ err²); +inf when the approximation is exact.
  double snr_db() const {
    if (sum_sq_err_ == 0) return std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(sum_sq_ref_ / sum_sq_err_);
  }

 private:
  double sum_sq_err_ = 0;
  double sum_sq_ref_ = 0;
  double sum_err_ = 0;
  double max_abs_err_ = 0;
  double max_abs_ref_ = 0;
  size_t count_ = 0;
};

}  // namespace chorus
