// MatMul on the real model's tensors (Q4_1 projections, Q8_0 token_embd) vs MatMulRef within the
// derived bound; skipped when models/SmolLM2-135M-Instruct.Q4_1.gguf is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "gguf/gguf.h"     // GgufFile
#include "matmul_bound.h"  // OutputBound
#include "ops/matmul.h"

namespace chorus {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

TEST(MatMulModelTest, RealTensorsMatchReference) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not found";
  auto file = GgufFile::Open(kModel);
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.3.ffn_down.weight",
                           "blk.29.ffn_up.weight", "token_embd.weight"}) {
    const GgufTensor* t = (*file)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    const size_t cols = t->dims[0], rows = t->dims[1];
    const WeightView w{.type = t->type, .data = t->data, .rows = rows, .cols = cols,
                       .row_bytes = *GgmlRowBytes(t->type, cols)};
    for (size_t n_tok : {1, 4, 13}) {
      if (rows > 10000 && n_tok > 4) continue;  // the double reference over 49152 rows is slow
      std::vector<float> x(n_tok * cols);
      for (auto& v : x) v = nd(rng);
      std::vector<float> want(n_tok * rows), got(n_tok * rows, NAN);
      MatMulRef(w, x.data(), n_tok, want.data());
      MatMul(w, x.data(), n_tok, got.data(), pool);
      for (size_t tok = 0; tok < n_tok; ++tok) {
        for (size_t r = 0; r < rows; ++r) {
          const double bound = test::OutputBound(w.type, w.data + r * w.row_bytes, x.data() + tok * cols, cols);
          ASSERT_LE(std::fabs(got[tok * rows + r] - want[tok * rows + r]), bound)
              << name << " n_tok=" << n_tok << " t=" << tok << " r=" << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace chorus
