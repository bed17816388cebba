// CoMix error bound: how much quantizing one head's keys/values at b bits can move that head's
// attention output, from statistics of native rows only (no trial quantization).
//
// For one head, query q (already scaled by 1/sqrt(d)), logits s_j = q·k_j, key error e_j, value
// error f_j, and any centre c (Σ(p̂−p) = 0 lets us subtract it):
//   ‖ô − o‖ ≤ ‖p̂ − p‖₁ · maxⱼ‖v̂ⱼ − c‖ + Σⱼ pⱼ‖fⱼ‖,  ‖p̂ − p‖₁ ≤ min(Δ, 2),
//   Δ = maxⱼ |q·eⱼ| ≤ min(Σ_c |q_c| ε_c, ‖q‖·‖ε‖)    (Hölder / Cauchy–Schwarz, ε_c per-channel bound).
// min(Δ, 2) is tighter than METHODS.md's e^{2Δ} − 1 (≥ 2Δ): along s + tδ the softmax Jacobian
// J = diag(p) − ppᵀ gives ‖Jδ‖₁ = Σⱼ pⱼ|δⱼ − p·δ|, a mean absolute deviation of values in
// [−Δ, Δ], hence ≤ Δ; integrating over t ∈ [0, 1] gives ‖p̂ − p‖₁ ≤ Δ.
// For the allocation the key term is used uncapped (Δ·radius): the cap at 2 is a valid bound but
// flat, so it could not rank 2-, 3- and 4-bit keys once the worst case saturates.
// With c = centre of the values' bounding box, maxⱼ‖vⱼ − c‖ ≤ ‖half ranges‖ (+ max‖fⱼ‖ for v̂).
// KIVI (min–max, fp16 scale and minimum) gives a hard per-element bound
//   |x̂ − x| ≤ r/(2(2ᵇ−1)) + 2⁻¹⁰(r + max|x|) + 2⁻²³
// (rounding half a step; the fp16 scale and minimum add ≤ 2⁻¹¹ relative each, clamping included).
// TQ (rotated Lloyd–Max) has no useful worst case; its row error is *estimated* as
// κ·‖x‖·√MSE_b (measured codebook MSE, κ = 2) — an estimate, reported as such.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/kv_format.h"  // KvFormat, KvSide

namespace chorus {

enum class ComixFamily : uint8_t { kKivi, kTq };

// The format of `family` at `bits` ∈ {2,3,4}; bits == 8 is q8 for either family.
KvFormat ComixFormat(ComixFamily family, int bits);

// Hard per-element error bound of KIVI at `bits` for a group of range r and max |x| a.
double KiviElementBound(int bits, double range, double absmax);
// Estimated relative row error of TQ at `bits` (κ·√MSE per coordinate); q8: absmax/254 per element.
double TqRowErrorFactor(int bits);

// Running statistics of one head's native keys and values (rows appended in order), enough for
// every bound above. Key groups = channels over the rows; value groups = 32 channels of one row.
struct HeadStats {
  std::vector<float> k_min, k_max, v_min, v_max;  // (d) per channel over the rows
  std::vector<float> q_abs_max;    // (d) max |q_c| over the queries seen
  float q_norm_max = 0;            // max ‖q‖
  float k_norm_max = 0, v_norm_max = 0;       // max row norms
  float v_group_range_max = 0, v_abs_max = 0;  // max over rows and 32-channel groups of the range; max |v|
  size_t rows = 0, queries = 0;

  explicit HeadStats(size_t d = 0) { Reset(d); }
  void Reset(size_t d);
  void AddKeyValueRow(const float* k, const float* v);  // one row of this head (d each)
  void AddQuery(const float* q);                         // one query of this head (d)
  void Merge(const HeadStats& o);
  size_t dim() const { return k_min.size(); }
};

// Per-format error terms of one head from its stats.
struct HeadBound {
  double delta = 0;        // bound on maxⱼ |q·eⱼ|
  double prob_l1 = 0;      // min(Δ, 2)
  double radius = 0;       // bound on maxⱼ ‖v̂ⱼ − c‖
  double value_err = 0;    // bound on maxⱼ ‖fⱼ‖
  double total = 0;        // prob_l1·radius + value_err
};

// The bound for keys at `k_bits` and values at `v_bits` (0 = that side stays native) of `family`.
HeadBound BoundHead(const HeadStats& s, ComixFamily family, int k_bits, int v_bits);
// The allocation's sensitivity of one side alone: keys → Δ·radius (uncapped, radius with 2-bit
// values), values → value_err.
double SideBound(const HeadStats& s, ComixFamily family, KvSide side, int bits);

// The same first-order structure with typical instead of worst-case terms (the allocation's
// default, measured against SideBound in docs/results/comix.md): independent zero-mean element
// errors (KIVI: uniform in ±step/2; TQ: isotropic after the random rotation, √MSE per coordinate)
// give σ(q·e) = sqrt(Σ_c q_c² σ_c²), E‖p̂ − p‖₁ ≈ E|δ| = σ·√(2/π), and the value error's RMS
// replaces its maximum; radius = RMS of a uniform spread over the values' box. Not a bound.
double SideExpected(const HeadStats& s, ComixFamily family, KvSide side, int bits);

// Measured attention-output error / SideExpected, median per (family, side, bits ∈ {2,3,4,8}),
// measured by comix_bound_test (CalibrationMatchesTheMeasuredError) on SmolLM2-135M over
// examples/du_fu.txt: SideExpected is 10–100× the error and by different factors per side and
// width, so K and V items and the 2→3 and 3→4 steps were not on one scale. SideExpected × this is
// the calibrated sensitivity (ComixOptions::calibrated). Other bits → 1.
double ComixCalibration(ComixFamily family, KvSide side, int bits);

}  // namespace chorus
