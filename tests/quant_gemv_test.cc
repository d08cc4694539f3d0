// Float-activation kernels over quantised panels (qgemv): every kernel this CPU runs, scalar
// included, against a double-precision product of the stored values, over odd shapes and strides.
#include "kernels/quant_kernels.h"


#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "base/half.h"
#include "format/quant_layout.h"
#include "gtest/gtest.h"
#include "testing/guarded_buffer.h"

namespace fflite {
namespace {

using testing::GuardedBuffer;

constexpr float kSentinel = -12345.0f;
constexpr DType kDTypes[] = {DType::I8, DType::I4};

const char* Name(DType dtype) { return dtype == DType::I8 ? "I8" : "I4"; }

// A random stored matrix: q uniform over the dtype's range, scales f16 in ±[2^-8, 2^-4) (some
// negative, as the converter may write).
struct Matrix {
  QuantGeometry g;
  std::vector<uint8_t> bytes;
};

Matrix RandomMatrix(DType dtype, size_t rows, size_t k, std::mt19937& gen) {
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, k);
  const int lo = dtype == DType::I8 ? -127 : -8, hi = dtype == DType::I8 ? 127 : 7;
  std::uniform_int_distribution<int> qd(lo, hi);
  std::uniform_real_distribution<float> sd(1.0f / 256, 1.0f / 16);
  std::vector<int8_t> q(rows * k);
  for (int8_t& v : q) v = static_cast<int8_t>(qd(gen));
  std::vector<uint16_t> scales(rows * g.k_blocks);
  for (uint16_t& s : scales) s = F32ToF16(gen() % 4 == 0 ? -sd(gen) : sd(gen));
  Matrix m{g, std::vector<uint8_t>(g.bytes())};
  PackQuantMatrix(dtype, rows, k, q.data(), scales.data(), m.bytes.data());
  return m;
}

// Tolerance. Each output is Σ_b s_b · (Σ_{j in b} q_j · x_j) + bias in f32: the block sums take at
// most 32 roundings of additions (and 32 of products where the multiply-add is not fused: armv7),
// their scaling one more and the sum over blocks k/32 + 1 more, plus one for the bias; every path
// rounds any term at most k + 70 times (k + 34 additions at most, 32 + 2 products). q, s and x
// are exact in f32, so the classic bound |fl(Σ) - Σ| <= γ_n·Σ|terms|, γ_n ≈ n·2^-24, gives
//   |got - want| <= (k + 70)·2^-24·(Σ_j |s·q_j·x_j| + |bias|).
// The reference is exact up to double rounding (absorbed by the factor 1.01). The bound is
// worst-case, so it never flakes; it stays far below one dropped or repeated term, which is about
// Σ|terms|/k on average.
double Tolerance(size_t k, double sum_abs, double bias) {
  return 1.01 * static_cast<double>(k + 70) * 0x1p-24 * (sum_abs + std::fabs(bias));
}

// The double-precision product of the stored values: dot[t·rows + o] and Σ|terms| alike.
void Reference(DType dtype, const Matrix& m, size_t c, const float* x, size_t x_stride,
               std::vector<double>* dot, std::vector<double>* sum_abs) {
  const size_t rows = m.g.rows, k = m.g.k;
  dot->assign(c * rows, 0.0);
  sum_abs->assign(c * rows, 0.0);
  for (size_t o = 0; o < rows; ++o) {
    for (size_t j = 0; j < k; ++j) {
      const double scale = F16ToF32(QuantScaleAt(m.g, m.bytes.data(), o, j / kQuantBlock));
      const double wv = scale * QuantValueAt(dtype, m.g, m.bytes.data(), o, j);
      for (size_t t = 0; t < c; ++t) {
        const double p = wv * x[t * x_stride + j];
        (*dot)[t * rows + o] += p;
        (*sum_abs)[t * rows + o] += std::fabs(p);
      }
    }
  }
}

// One case: every kernel against the reference, with and without bias; w, x and bias end at an
// unreadable page, y too (its last row ends there), and y's stride padding holds sentinels that
// must stay.
void CheckQGemv(DType dtype, size_t c, size_t k, size_t rows, size_t x_pad, size_t y_pad) {
  std::mt19937 gen(static_cast<uint32_t>(1000003 * c + 1009 * k + 7 * rows + x_pad));
  const Matrix m = RandomMatrix(dtype, rows, k, gen);
  GuardedBuffer w_buf(m.bytes.size());
  std::memcpy(w_buf.As<uint8_t>(), m.bytes.data(), m.bytes.size());
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  std::vector<float> bias_values(rows);
  for (float& b : bias_values) b = ud(gen);
  GuardedBuffer bias_buf(rows * sizeof(float));
  std::memcpy(bias_buf.As<float>(), bias_values.data(), rows * sizeof(float));
  const size_t x_stride = k + x_pad, y_stride = rows + y_pad;
  const size_t x_size = (c - 1) * x_stride + k, y_size = (c - 1) * y_stride + rows;
  std::vector<float> x(x_size);
  for (float& v : x) v = ud(gen);  // the stride padding holds values too: unused
  GuardedBuffer x_buf(x_size * sizeof(float));
  std::memcpy(x_buf.As<float>(), x.data(), x_size * sizeof(float));

  std::vector<double> dot, sum_abs;
  Reference(dtype, m, c, x.data(), x_stride, &dot, &sum_abs);
  for (bool with_bias : {false, true}) {
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      GuardedBuffer y_buf(y_size * sizeof(float));
      float* y = y_buf.As<float>();
      for (size_t i = 0; i < y_size; ++i) y[i] = kSentinel;
      kernel->qgemv(c, k, rows, w_buf.As<uint8_t>(), QuantTypeOf(dtype),
                    with_bias ? bias_buf.As<float>() : nullptr, x_buf.As<float>(), x_stride, y,
                    y_stride);
      for (size_t t = 0; t < c; ++t) {
        for (size_t o = 0; o < rows; ++o) {
          const double b = with_bias ? bias_values[o] : 0.0;
          const double want = b + dot[t * rows + o];
          const double got = y[t * y_stride + o];
          ASSERT_LE(std::fabs(got - want), Tolerance(k, sum_abs[t * rows + o], b))
              << kernel->isa << " " << Name(dtype) << " c " << c << " k " << k << " rows " << rows
              << " bias " << with_bias << " x_stride " << x_stride << " y_stride " << y_stride
              << ": y[" << t << ", " << o << "] = " << got << ", want " << want;
        }
        for (size_t o = rows; o < y_stride && t + 1 < c; ++o) {
          ASSERT_EQ(y[t * y_stride + o], kSentinel)
              << kernel->isa << " " << Name(dtype) << " wrote y[" << t << ", " << o
              << "] in the stride padding";
        }
      }
    }
  }
}

TEST(QuantGemvTest, MatchesDoubleReference) {
  for (DType dtype : kDTypes) {
    for (size_t k : {1, 31, 32, 33, 64, 100, 300}) {
      for (size_t rows : {1, 15, 16, 17, 33, 100}) {
        for (size_t c = 1; c <= 9; ++c) {
          CheckQGemv(dtype, c, k, rows, 0, 0);
          if (::testing::Test::HasFatalFailure()) return;
        }
        CheckQGemv(dtype, 3, k, rows, 5, 3);  // strides larger than k and rows
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(QuantGemvTest, ManyTokens) {
  // Past one batch of every kernel (8 or 16 tokens), in spans over a longer k.
  for (DType dtype : kDTypes) {
    for (size_t c : {16, 17, 40}) {
      CheckQGemv(dtype, c, 300, 33, 0, 0);
      CheckQGemv(dtype, c, 1000, 17, 7, 1);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Rows split at panel boundaries into two calls (as threads do) give the whole call's results
// bitwise, and write nothing past their rows.
TEST(QuantGemvTest, PanelSplitIsBitwiseIdentical) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  // c = 1 has its own path (several panels per pass: 4 + 1 whole, 2 and 3 split).
  for (DType dtype : kDTypes) for (size_t c : {size_t{1}, size_t{5}}) {
    const size_t rows = 70, k = 100;
    const Matrix m = RandomMatrix(dtype, rows, k, gen);
    std::vector<float> bias(rows), x(c * k);
    for (float& v : bias) v = ud(gen);
    for (float& v : x) v = ud(gen);
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      std::vector<float> whole(c * rows), split(c * rows, kSentinel);
      kernel->qgemv(c, k, rows, m.bytes.data(), QuantTypeOf(dtype), bias.data(), x.data(), k,
                    whole.data(), rows);
      // Panels [0, 2) and [2, 5): rows [0, 32) and [32, 70).
      const size_t cut = 2 * kQuantPanelRows;
      kernel->qgemv(c, k, cut, m.bytes.data(), QuantTypeOf(dtype), bias.data(), x.data(), k,
                    split.data(), rows);
      for (size_t t = 0; t < c; ++t) {
        for (size_t o = cut; o < rows; ++o) {
          ASSERT_EQ(split[t * rows + o], kSentinel) << kernel->isa << " wrote past its rows";
        }
      }
      kernel->qgemv(c, k, rows - cut, m.bytes.data() + 2 * m.g.panel_bytes, QuantTypeOf(dtype),
                    bias.data() + cut, x.data(), k, split.data() + cut, rows);
      for (size_t i = 0; i < c * rows; ++i) {
        ASSERT_EQ(std::memcmp(&whole[i], &split[i], sizeof(float)), 0)
            << kernel->isa << " " << Name(dtype) << " y[" << i / rows << ", " << i % rows
            << "]: " << whole[i] << " whole, " << split[i] << " split";
      }
    }
  }
}

// The rows past `rows` in the last panel are padding: never written, however many tokens.
TEST(QuantGemvTest, PartialPanelWritesOnlyItsRows) {
  std::mt19937 gen(11);
  for (DType dtype : kDTypes) {
    const size_t rows = 21, k = 64, c = 6, y_stride = 32;
    const Matrix m = RandomMatrix(dtype, rows, k, gen);
    std::vector<float> x(c * k, 0.5f);
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      std::vector<float> y(c * y_stride, kSentinel);
      kernel->qgemv(c, k, rows, m.bytes.data(), QuantTypeOf(dtype), nullptr, x.data(), k, y.data(),
                    y_stride);
      for (size_t t = 0; t < c; ++t) {
        for (size_t o = 0; o < y_stride; ++o) {
          if (o < rows) {
            EXPECT_NE(y[t * y_stride + o], kSentinel) << kernel->isa << " row " << o;
          } else {
            EXPECT_EQ(y[t * y_stride + o], kSentinel) << kernel->isa << " wrote row " << o;
          }
        }
      }
    }
  }
}

// A NaN activation makes its own token's outputs NaN (0 · NaN is NaN: every row, even one whose
// weight there is zero) and leaves the other tokens exact, in every kernel's token grouping.
TEST(QuantGemvTest, NanStaysInItsToken) {
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  for (DType dtype : kDTypes) {
    const size_t rows = 33, k = 70, c = 7;
    const Matrix m = RandomMatrix(dtype, rows, k, gen);
    std::vector<float> x(c * k);
    for (float& v : x) v = ud(gen);
    std::vector<double> dot, sum_abs;
    Reference(dtype, m, c, x.data(), k, &dot, &sum_abs);
    for (size_t nan_token : {size_t{0}, size_t{3}, size_t{6}}) {
      for (size_t nan_j : {size_t{0}, size_t{40}, size_t{69}}) {
        std::vector<float> xn = x;
        xn[nan_token * k + nan_j] = std::numeric_limits<float>::quiet_NaN();
        for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
          std::vector<float> y(c * rows);
          kernel->qgemv(c, k, rows, m.bytes.data(), QuantTypeOf(dtype), nullptr, xn.data(), k,
                        y.data(), rows);
          for (size_t t = 0; t < c; ++t) {
            for (size_t o = 0; o < rows; ++o) {
              const float got = y[t * rows + o];
              if (t == nan_token) {
                ASSERT_TRUE(std::isnan(got)) << kernel->isa << " token " << t << " row " << o;
              } else {
                ASSERT_LE(std::fabs(got - dot[t * rows + o]),
                          Tolerance(k, sum_abs[t * rows + o], 0.0))
                    << kernel->isa << " " << Name(dtype) << " token " << t << " row " << o
                    << " (NaN in token " << nan_token << ")";
              }
            }
          }
        }
      }
    }
  }
}

// A token's results do not depend on the other tokens of the call (the kernels group tokens, but
// each sees the same operations): c = 1 and c = 11 agree bitwise on the shared token.
TEST(QuantGemvTest, TokenResultsDoNotDependOnC) {
  std::mt19937 gen(17);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  for (DType dtype : kDTypes) {
    const size_t rows = 40, k = 200, c = 11;
    const Matrix m = RandomMatrix(dtype, rows, k, gen);
    std::vector<float> x(c * k);
    for (float& v : x) v = ud(gen);
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      std::vector<float> all(c * rows), one(rows);
      kernel->qgemv(c, k, rows, m.bytes.data(), QuantTypeOf(dtype), nullptr, x.data(), k,
                    all.data(), rows);
      for (size_t t = 0; t < c; ++t) {
        kernel->qgemv(1, k, rows, m.bytes.data(), QuantTypeOf(dtype), nullptr, x.data() + t * k, k,
                      one.data(), rows);
        ASSERT_EQ(std::memcmp(one.data(), all.data() + t * rows, rows * sizeof(float)), 0)
            << kernel->isa << " " << Name(dtype) << " token " << t;
      }
    }
  }
}

// As above over several spans of blocks (the AVX2 kernel decodes I4 a span at a time for c > 1,
// a block at a time for c = 1), with a partial last span, a partial last block and 5 panels.
TEST(QuantGemvTest, TokenResultsDoNotDependOnCAcrossSpans) {
  std::mt19937 gen(19);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  for (DType dtype : kDTypes) {
    const size_t rows = 70, k = 601, c = 5;
    const Matrix m = RandomMatrix(dtype, rows, k, gen);
    std::vector<float> x(c * k);
    for (float& v : x) v = ud(gen);
    for (const QGemvKernel* kernel : AvailableQGemvKernels()) {
      std::vector<float> all(c * rows), one(rows);
      kernel->qgemv(c, k, rows, m.bytes.data(), QuantTypeOf(dtype), nullptr, x.data(), k,
                    all.data(), rows);
      for (size_t t = 0; t < c; ++t) {
        kernel->qgemv(1, k, rows, m.bytes.data(), QuantTypeOf(dtype), nullptr, x.data() + t * k, k,
                      one.data(), rows);
        ASSERT_EQ(std::memcmp(one.data(), all.data() + t * rows, rows * sizeof(float)), 0)
            << kernel->isa << " " << Name(dtype) << " token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace fflite
