// GELU with the exact erf form, gelu(x) = x/2 · (1 + erf(x/√2)) (BERT's "gelu"), in place.
// GeluErf is Highway-vectorized with Abramowitz–Stegun 7.1.26 for erf (|error| ≤ 1.5e-7, plus f32
// rounding); GeluErfRef uses std::erf. Invariant: |GeluErf − GeluErfRef| ≤ 1e-6·max(1, |x|).
#pragma once
#include <cstddef>

namespace chorus {

void GeluErf(float* x, size_t n);
void GeluErfRef(float* x, size_t n);

}  // namespace chorus
