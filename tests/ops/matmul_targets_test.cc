// MatMul on every Highway target this CPU runs (hwy::SetSupportedTargetsForTest): within the
// derived bound of MatMulRef; the int8 paths equal the scalar int8 twin bit for bit; and every
// row's result is bit-identical whatever the batch size (n_tok 1..64 against n_tok = 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "hwy/targets.h"       // SetSupportedTargetsForTest, SupportedTargets
#include "matmul_test_util.h"  // Matrix, RandomMatrix, RandomActs, ExpectWithinBound
#include "ops/matmul.h"
#include "ops/matmul_internal.h"  // MatMulCompiledTargets

namespace chorus {
namespace {

using test::Matrix;
using test::RandomActs;
using test::RandomMatrix;

// Every target matmul_kernels.cc compiles, best first; those the CPU lacks are skipped.
std::vector<int64_t> TargetsToTest() {
  std::vector<int64_t> out;
  const int64_t supported = hwy::SupportedTargets();
#if HWY_ARCH_X86
  const int64_t all[] = {HWY_AVX3_DL, HWY_AVX3, HWY_AVX2, HWY_SSE4, HWY_SSSE3, HWY_EMU128, HWY_SCALAR};
#elif HWY_ARCH_ARM
  const int64_t all[] = {HWY_SVE2_128, HWY_SVE_256, HWY_SVE2, HWY_SVE, HWY_NEON, HWY_EMU128, HWY_SCALAR};
#else
  const int64_t all[] = {HWY_EMU128, HWY_SCALAR};
#endif
  // What matmul_kernels.cc compiled (it adds AVX3_DL; sanitizer builds leave AVX-512 out).
  const int64_t compiled = ops_internal::MatMulCompiledTargets();
  for (int64_t t : all)
    if ((supported & t) && (compiled & t)) out.push_back(t);
  return out;
}

// Runs body() once per target, the target forced for the whole process meanwhile.
template <class Fn>
void ForEachTarget(const Fn& body) {
  const std::vector<int64_t> targets = TargetsToTest();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    std::printf("  target %-8s path %s\n", hwy::TargetName(target), MatMulPath());
    SCOPED_TRACE(std::string(hwy::TargetName(target)) + " / " + MatMulPath());
    body(target);
    if (testing::Test::HasFatalFailure()) break;
  }
  hwy::SetSupportedTargetsForTest(0);
}

size_t ColsOf(GgmlType type) { return GgmlTraitsOf(type).block_elems == 256 ? 512 : 96; }

// The AVX-512 VNNI path (AVX3_DL) keeps its own lane order for Q8_0 / Q5_1 / Q5_K; Q4_0, Q4_1, Q5_0,
// Q4_K and Q6_K it hands to the 8-row x86 kernels (matmul_kernels.cc), which are the twin's bits.
bool TwinExactOn(int64_t target, GgmlType type) {
  if (target != HWY_AVX3_DL) return true;
  return type == GgmlType::kQ5_0 || type == GgmlType::kQ4_K || type == GgmlType::kQ6_K || type == GgmlType::kQ4_0 ||
         type == GgmlType::kQ4_1;
}

TEST(MatMulTargetsTest, EveryTargetWithinTheBound) {
  // Catches a kernel of one target (AVX2, SSE4, ...) that is wrong while the best one is right.
  std::mt19937 rng(23);
  ThreadPool pool(2);
  ForEachTarget([&](int64_t target) {
    for (GgmlType type : test::kAllTypes) {
      const Matrix m = RandomMatrix(type, 21, ColsOf(type), rng);
      for (size_t n_tok : {1, 4, 13}) {
        const std::vector<float> x = RandomActs(n_tok, m.view.cols, rng);
        std::vector<float> want(n_tok * 21), got(n_tok * 21, NAN);
        MatMulRef(m.view, x.data(), n_tok, want.data());
        MatMul(m.view, x.data(), n_tok, got.data(), pool);
        test::ExpectWithinBound(m.view, x, n_tok, got, want, hwy::TargetName(target));
      }
    }
  });
}

TEST(MatMulTargetsTest, Int8TwinWithinTheBound) {
  // The scalar twin itself is right: within the activation-quantization bound of the f64 reference.
  std::mt19937 rng(31);
  for (GgmlType type : test::kAllTypes) {
    if (GgmlTraitsOf(type).block_elems == 1) continue;
    for (size_t cols : {ColsOf(type), 2 * ColsOf(type) + (ColsOf(type) == 512 ? 256 : 32)}) {
      const Matrix m = RandomMatrix(type, 9, cols, rng);
      const std::vector<float> x = RandomActs(3, cols, rng);
      std::vector<float> want(3 * 9), got(3 * 9, NAN);
      MatMulRef(m.view, x.data(), 3, want.data());
      MatMulInt8Ref(m.view, x.data(), 3, got.data());
      test::ExpectWithinBound(m.view, x, 3, got, want, "int8 twin");
    }
  }
}

TEST(MatMulTargetsTest, Int8PathsEqualTheScalarTwinBitwise) {
  // The AVX2 / AVX-VNNI / NEON kernels and the scalar path perform int8_ref.h's arithmetic exactly:
  // catches a wrong lane order, a saturated int16 sum, a skipped tail row or a reordered FMA. The
  // AVX-512 VNNI path (AVX3_DL) keeps its own lane order for some types (TwinExactOn), whose bound
  // only is checked (above).
  std::mt19937 rng(37);
  ThreadPool pool(3);
  ForEachTarget([&](int64_t target) {
    for (GgmlType type : test::kAllTypes) {
      if (GgmlTraitsOf(type).block_elems == 1 || !TwinExactOn(target, type)) continue;
      for (size_t rows : {1, 9, 21}) {
        const Matrix m = RandomMatrix(type, rows, ColsOf(type), rng, /*row_pad=*/rows == 9 ? 6 : 0);
        for (size_t n_tok : {1, 3, 4, 5, 17}) {
          const std::vector<float> x = RandomActs(n_tok, m.view.cols, rng);
          std::vector<float> twin(n_tok * rows), got(n_tok * rows, NAN);
          MatMulInt8Ref(m.view, x.data(), n_tok, twin.data());
          MatMul(m.view, x.data(), n_tok, got.data(), pool);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], twin[i]) << GgmlTraitsOf(type).name << " rows=" << rows << " n_tok=" << n_tok
                                       << " t=" << i / rows << " r=" << i % rows;
        }
      }
    }
  });
}

TEST(MatMulTargetsTest, BatchedRowsEqualAloneEveryTypeAndTarget) {
  // Issue 12 item 5: a token's output must not depend on how many tokens share the call (chunked
  // prefill, continuous batching). Catches a path switch at some n_tok (a GEMM above 16 rows) or a
  // tile whose FMA order depends on its neighbours.
  std::mt19937 rng(41);
  ThreadPool pools[2] = {ThreadPool(1), ThreadPool(2)};
  ForEachTarget([&](int64_t) {
    for (GgmlType type : test::kAllTypes) {
      const size_t rows = 19, n_max = 64;
      const Matrix m = RandomMatrix(type, rows, ColsOf(type), rng);
      const std::vector<float> x = RandomActs(n_max, m.view.cols, rng);
      std::vector<float> alone(n_max * rows);
      for (size_t t = 0; t < n_max; ++t) MatMul(m.view, x.data() + t * m.view.cols, 1, alone.data() + t * rows, pools[0]);
      for (size_t n_tok = 1; n_tok <= n_max; ++n_tok) {
        std::vector<float> got(n_tok * rows, NAN);
        MatMul(m.view, x.data(), n_tok, got.data(), pools[n_tok % 2]);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], alone[i]) << GgmlTraitsOf(type).name << " n_tok=" << n_tok << " t=" << i / rows
                                      << " r=" << i % rows;
      }
    }
  });
}

TEST(MatMulTargetsTest, DecodeStreamsEqualBatchedRows) {
  // With enough rows a decode token's rows are read as several streams in lock step (AVX3_DL's
  // Q8Rows: 4 parts of whole 16-row groups, 300 rows = 4 × 64 + a 44-row rest), the batched calls
  // one row after the other: catches a stream that reads, or stores to, another stream's rows.
  std::mt19937 rng(47);
  ThreadPool pools[2] = {ThreadPool(1), ThreadPool(2)};
  ForEachTarget([&](int64_t) {
    for (GgmlType type : test::kAllTypes) {
      const size_t rows = 300, n_max = 5;
      const Matrix m = RandomMatrix(type, rows, ColsOf(type), rng);
      const std::vector<float> x = RandomActs(n_max, m.view.cols, rng);
      for (ThreadPool& pool : pools) {
        std::vector<float> alone(n_max * rows), got(n_max * rows, NAN);
        for (size_t t = 0; t < n_max; ++t) MatMul(m.view, x.data() + t * m.view.cols, 1, alone.data() + t * rows, pool);
        MatMul(m.view, x.data(), n_max, got.data(), pool);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], alone[i]) << GgmlTraitsOf(type).name << " t=" << i / rows << " r=" << i % rows;
      }
    }
  });
}

TEST(MatMulTargetsTest, LongPrefillsEqualTheTwinAcrossPanelChunks) {
  // A prefill packs each weight panel once per chunk of 64 tokens (kPanelTokChunk): catches a chunk
  // boundary that drops, repeats or misplaces a token (n_tok 130 and 300 cross several; the cases
  // above stop at 64) and a packer (Q4_0/Q4_1/Q5_0 staged, Q4_K/Q6_K direct,
  // Q5_1/Q5_K unpacked) whose codes or scales differ from the twin's beyond the short cases above.
  std::mt19937 rng(43);
  ThreadPool pool(2);
  ForEachTarget([&](int64_t target) {
    for (GgmlType type : test::kAllTypes) {
      if (GgmlTraitsOf(type).block_elems == 1 || !TwinExactOn(target, type)) continue;
      const size_t rows = 11;
      const Matrix m = RandomMatrix(type, rows, ColsOf(type), rng);
      for (size_t n_tok : {130, 300}) {
        const std::vector<float> x = RandomActs(n_tok, m.view.cols, rng);
        std::vector<float> twin(n_tok * rows), got(n_tok * rows, NAN);
        MatMulInt8Ref(m.view, x.data(), n_tok, twin.data());
        MatMul(m.view, x.data(), n_tok, got.data(), pool);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], twin[i]) << GgmlTraitsOf(type).name << " n_tok=" << n_tok << " t=" << i / rows
                                     << " r=" << i % rows;
      }
    }
  });
}

TEST(MatMulTargetsTest, PathNamesTheKernels) {
  // inspect/bench/--json print this: it must say which kernels run, per target.
  ForEachTarget([&](int64_t target) {
    const std::string path = MatMulPath();
#if HWY_ARCH_X86
    if (target == HWY_AVX2) {
      EXPECT_TRUE(path == "AVX2 int8 (maddubs)" || path == "AVX-VNNI") << path;
    }
    if (target == HWY_AVX3_DL) {
      EXPECT_EQ(path, "AVX-512 VNNI");
    }
    if (target == HWY_EMU128 || target == HWY_SCALAR) {
      EXPECT_EQ(path, "scalar");
    }
#elif HWY_ARCH_ARM_A64  // (NEON is the baseline there: asking for EMU128 still runs NEON code)
    if (target == HWY_NEON || target == HWY_SVE || target == HWY_SVE2) EXPECT_EQ(path, "NEON dotprod");
#endif
  });
}

}  // namespace
}  // namespace chorus
