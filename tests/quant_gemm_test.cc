// Int8-activation quantised kernels (qgemm): every kernel this CPU runs, scalar included, against
// the scalar quantiser bit for bit and against a double product of the stored integers.
#include <algorithm>
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
#include "kernels/quant_kernels.h"

namespace fflite {
namespace {

using testing::GuardedBuffer;

size_t Blocks(size_t k) { return (k + kQuantBlock - 1) / kQuantBlock; }

std::vector<float> RandomFloats(std::mt19937& gen, size_t n, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// The first index where a and b differ in their bits, any NaN equal to any NaN; n: none.
size_t FirstDifference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) return i;
  }
  return n;
}

// Every kernel's rotation gives Rotate32's bits (the portable code, itself checked against the
// double rotation in quantize_test.cc), out of place and in place, over blocks of random values
// across 60 binary orders of magnitude with signed zeros, subnormals, infinities and a NaN: the
// int8 blocks and the float path both start from these values. A NaN output may differ in its
// sign: x86 passes on the first operand's NaN, and which operand of a + b comes first is the
// compiler's choice in Rotate32 (clang 14 and g++ 12 differ); every other value bit for bit.
TEST(QuantGemmTest, RotateBlocksMatchRotate32Exactly) {
  std::mt19937 gen(19);
  constexpr size_t kBlocks = 37;
  std::vector<float> x(kBlocks * kQuantBlock);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  for (float& v : x) v = std::ldexp(mantissa(gen), exponent(gen));
  x[3] = -0.0f;
  x[40] = 1e-40f;  // subnormal
  x[41] = -3e-42f;
  x[100] = std::numeric_limits<float>::infinity();
  x[101] = -std::numeric_limits<float>::infinity();
  x[200] = std::nanf("");
  std::vector<float> want = x;
  for (size_t b = 0; b < kBlocks; ++b) Rotate32(want.data() + b * kQuantBlock);
  for (const QGemmKernel* kernel : AvailableQGemmKernels()) {
    for (size_t blocks : {size_t{0}, size_t{1}, size_t{2}, kBlocks}) {
      GuardedBuffer out_buf(blocks * kQuantBlock * sizeof(float));  // a write past the end faults
      float* out = out_buf.As<float>();
      kernel->rotate_blocks(blocks, x.data(), out);
      const size_t values = blocks * kQuantBlock;
      EXPECT_EQ(FirstDifference(out, want.data(), values), values)
          << kernel->isa << ", " << blocks << " blocks out of place";
      if (blocks == 0) continue;  // (an empty vector's data() may be null)
      std::vector<float> in_place(x.begin(), x.begin() + blocks * kQuantBlock);
      kernel->rotate_blocks(blocks, in_place.data(), in_place.data());
      EXPECT_EQ(FirstDifference(in_place.data(), want.data(), values), values)
          << kernel->isa << ", " << blocks << " blocks in place";
    }
  }
}

// Every kernel's quantiser gives the scalar blocks bit for bit (d, sum and q): the blocks feed
// integer dot products, so any difference would be a different result, not a rounding.
TEST(QuantGemmTest, QuantizeActivationsMatchesScalarExactly) {
  std::mt19937 gen(17);
  for (const QGemmKernel* kernel : AvailableQGemmKernels()) {
    for (size_t k : {1, 5, 16, 17, 31, 32, 33, 100, 300}) {
      for (size_t c : {1, 4}) {
        const size_t x_stride = k + 3, kb = Blocks(k);
        const size_t x_size = (c - 1) * x_stride + k;
        std::vector<float> x = RandomFloats(gen, x_size, 3.0f);
        // Token 0, block 0: all zero (d = 0, q = 0). Token 1 (if any): one huge value, which
        // rounds every other value of its block to 0. Ties (x = 0.5·d, -2.5·d) in the last token.
        for (size_t j = 0; j < std::min<size_t>(k, 32); ++j) x[j] = 0.0f;
        if (c > 1) x[x_stride + k / 2] = -3e30f;
        if (c > 1 && k >= 3) {
          float* last = x.data() + (c - 1) * x_stride;
          last[0] = 127.0f;  // d = 1: the next two are ties, to the even 0 and 2
          last[1] = 0.5f;
          last[2] = -2.5f;
        }
        GuardedBuffer x_buf(x_size * sizeof(float));
        std::memcpy(x_buf.As<float>(), x.data(), x_size * sizeof(float));
        std::vector<QActBlock> want(c * kb);
        QuantizeActivationsScalar(c, k, x.data(), x_stride, want.data());
        GuardedBuffer got_buf(c * kb * sizeof(QActBlock));
        QActBlock* got = got_buf.As<QActBlock>();
        std::memset(got, 0x5a, c * kb * sizeof(QActBlock));
        kernel->quantize_activations(c, k, x_buf.As<float>(), x_stride, got);
        for (size_t i = 0; i < c * kb; ++i) {
          ASSERT_EQ(0, std::memcmp(&want[i], &got[i], sizeof(QActBlock)))
              << kernel->isa << " k " << k << " c " << c << " block " << i << ": d " << got[i].d
              << " vs " << want[i].d << ", sum " << got[i].sum << " vs " << want[i].sum;
        }
        // The scalar blocks themselves: |q| <= 127, sum = Σq, zero padding past k.
        for (size_t t = 0; t < c; ++t) {
          for (size_t b = 0; b < kb; ++b) {
            const QActBlock& blk = want[t * kb + b];
            int32_t sum = 0;
            for (size_t j = 0; j < kQuantBlock; ++j) {
              ASSERT_LE(std::abs(blk.q[j]), 127);
              if (b * kQuantBlock + j >= k) {
                ASSERT_EQ(blk.q[j], 0);
              }
              sum += blk.q[j];
            }
            ASSERT_EQ(sum, blk.sum);
          }
        }
        EXPECT_EQ(want[0].d, 0.0f);
      }
    }
  }
}

// A random quantised matrix as stored, with its integers and scales for the reference.
struct QuantMatrix {
  DType dtype;
  size_t rows, k;
  QuantGeometry g;
  std::vector<uint8_t> packed;
};

QuantMatrix RandomQuantMatrix(DType dtype, size_t rows, size_t k, std::mt19937& gen) {
  QuantMatrix m{dtype, rows, k, QuantMatrixGeometry(dtype, rows, k), {}};
  const int lo = dtype == DType::I8 ? -127 : -8, hi = dtype == DType::I8 ? 127 : 7;
  std::uniform_int_distribution<int> qdist(lo, hi);
  std::vector<int8_t> q(rows * k);
  for (int8_t& v : q) v = static_cast<int8_t>(qdist(gen));
  // Row 0 at the extremes (with the extreme activations of token 0, the largest dot products:
  // the AVX2 I8 pairs at 2·127·127, just below int16 saturation).
  for (size_t j = 0; j < k; ++j) q[j] = static_cast<int8_t>(gen() & 1 ? hi : lo);
  const size_t kb = Blocks(k);
  std::vector<uint16_t> scales(rows * kb);
  std::uniform_real_distribution<float> sdist(-0.02f, 0.02f);
  for (uint16_t& s : scales) s = F32ToF16(sdist(gen));
  if (!scales.empty()) scales[scales.size() / 2] = 0;  // a zero scale (an all-zero block)
  m.packed.resize(m.g.bytes());
  PackQuantMatrix(dtype, rows, k, q.data(), scales.data(), m.packed.data());
  return m;
}

// The exact product from the stored integers: ref[t·rows + o] = Σ_b s_w·d_x·dot (without bias),
// and abs[t·rows + o] = Σ_b |s_w·d_x·dot|, in double (exact but for 2^-53 relative per term).
void Reference(const QuantMatrix& m, size_t c, const std::vector<QActBlock>& xq,
               std::vector<double>* ref, std::vector<double>* abs) {
  const size_t kb = Blocks(m.k);
  std::vector<int8_t> q(m.rows * kb * kQuantBlock, 0);
  std::vector<double> s(m.rows * kb);
  for (size_t o = 0; o < m.rows; ++o) {
    for (size_t j = 0; j < m.k; ++j) {
      q[o * kb * kQuantBlock + j] = QuantValueAt(m.dtype, m.g, m.packed.data(), o, j);
    }
    for (size_t b = 0; b < kb; ++b) {
      s[o * kb + b] = F16ToF32(QuantScaleAt(m.g, m.packed.data(), o, b));
    }
  }
  ref->assign(c * m.rows, 0.0);
  abs->assign(c * m.rows, 0.0);
  for (size_t t = 0; t < c; ++t) {
    for (size_t o = 0; o < m.rows; ++o) {
      double sum = 0.0, sum_abs = 0.0;
      for (size_t b = 0; b < kb; ++b) {
        const QActBlock& a = xq[t * kb + b];
        int64_t dot = 0;
        for (size_t j = 0; j < kQuantBlock; ++j) {
          dot += static_cast<int64_t>(q[(o * kb + b) * kQuantBlock + j]) * a.q[j];
        }
        const double term = s[o * kb + b] * static_cast<double>(a.d) * static_cast<double>(dot);
        sum += term;
        sum_abs += std::fabs(term);
      }
      (*ref)[t * m.rows + o] = sum;
      (*abs)[t * m.rows + o] = sum_abs;
    }
  }
}

// Tolerance. The integer dot product of a block is exact in every kernel, and so is its f32
// conversion (|dot| <= 32·127·127 < 2^24), so the only errors are f32 roundings: d_w·d_x (one),
// times the dot (one, or none where fused), the k_blocks additions of the block terms (in one
// order per kernel), and the bias (one). With u = 2^-24 and the classic bound for a sum of n
// rounded terms, |got - want| <= (k_blocks + 3)·u·(Σ_b |term_b| + |bias|) to first order; 1.01
// covers the second-order terms and the reference's 2^-53. It is a worst case, so it never
// flakes, and far below a dropped block, a wrong scale or a wrong offset (>= one term).
double Tolerance(size_t k, double sum_abs, double bias) {
  return 1.01 * static_cast<double>(Blocks(k) + 3) * 0x1p-24 * (sum_abs + std::fabs(bias));
}

constexpr float kSentinel = 12345.0f;

// Runs one kernel with guard pages after w, bias, xq and y, and checks every output against the
// reference and that nothing outside the outputs was written.
void CheckQGemm(const QGemmKernel& kernel, const QuantMatrix& m, size_t c,
                const std::vector<QActBlock>& xq, const std::vector<double>& ref,
                const std::vector<double>& abs, const std::vector<float>& bias_values,
                bool with_bias, size_t y_pad) {
  const size_t kb = Blocks(m.k), rows = m.rows;
  GuardedBuffer w_buf(m.packed.size());
  std::memcpy(w_buf.As<uint8_t>(), m.packed.data(), m.packed.size());
  GuardedBuffer bias_buf(rows * sizeof(float));
  std::memcpy(bias_buf.As<float>(), bias_values.data(), rows * sizeof(float));
  GuardedBuffer x_buf(c * kb * sizeof(QActBlock));
  std::memcpy(x_buf.As<QActBlock>(), xq.data(), c * kb * sizeof(QActBlock));
  const size_t y_stride = rows + y_pad, y_size = (c - 1) * y_stride + rows;
  GuardedBuffer y_buf(y_size * sizeof(float));
  float* y = y_buf.As<float>();
  std::fill(y, y + y_size, kSentinel);
  kernel.qgemm(c, m.k, rows, w_buf.As<uint8_t>(), QuantTypeOf(m.dtype),
               with_bias ? bias_buf.As<float>() : nullptr, x_buf.As<QActBlock>(), y, y_stride);
  for (size_t t = 0; t < c; ++t) {
    for (size_t o = 0; o < rows; ++o) {
      const double b = with_bias ? bias_values[o] : 0.0;
      const double want = ref[t * rows + o] + b;
      const double got = y[t * y_stride + o];
      ASSERT_LE(std::fabs(got - want), Tolerance(m.k, abs[t * rows + o], b))
          << kernel.isa << " " << DTypeName(m.dtype) << " rows " << rows << " k " << m.k << " c "
          << c << " bias " << with_bias << ": y[" << t << ", " << o << "] = " << got << ", want "
          << want;
    }
    for (size_t o = rows; o < y_stride && t + 1 < c; ++o) {
      ASSERT_EQ(y[t * y_stride + o], kSentinel) << kernel.isa << " wrote past rows at " << o;
    }
  }
}

// Quantised activations as the runtime makes them (the scalar quantiser; the others equal it),
// token 0 at ±1 so that its q are all ±127 (the extreme dot products with row 0).
std::vector<QActBlock> RandomActivations(size_t c, size_t k, std::mt19937& gen) {
  std::vector<float> x = RandomFloats(gen, c * k, 2.0f);
  for (size_t j = 0; j < k; ++j) x[j] = gen() & 1 ? 1.0f : -1.0f;
  std::vector<QActBlock> xq(c * Blocks(k));
  QuantizeActivationsScalar(c, k, x.data(), k, xq.data());
  return xq;
}

class QGemmDTypeTest : public ::testing::TestWithParam<DType> {};

TEST_P(QGemmDTypeTest, MatchesIntegerReference) {
  const DType dtype = GetParam();
  std::mt19937 gen(dtype == DType::I8 ? 1 : 2);
  const std::vector<const QGemmKernel*> kernels = AvailableQGemmKernels();
  for (size_t rows : {1, 15, 16, 17, 33, 100}) {
    for (size_t k : {1, 31, 32, 33, 64, 100, 300}) {
      const QuantMatrix m = RandomQuantMatrix(dtype, rows, k, gen);
      const std::vector<float> bias = RandomFloats(gen, rows, 1.0f);
      for (size_t c : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 64, 130}) {
        const std::vector<QActBlock> xq = RandomActivations(c, k, gen);
        std::vector<double> ref, abs;
        Reference(m, c, xq, &ref, &abs);
        for (const QGemmKernel* kernel : kernels) {
          for (bool with_bias : {false, true}) {
            CheckQGemm(*kernel, m, c, xq, ref, abs, bias, with_bias, with_bias ? 0 : 5);
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// A caller splitting the rows among threads at panel boundaries gets bit-identical results.
TEST_P(QGemmDTypeTest, RowSplitAtPanelsIsBitIdentical) {
  const DType dtype = GetParam();
  std::mt19937 gen(3);
  const size_t rows = 100, k = 300, c = 13;
  const QuantMatrix m = RandomQuantMatrix(dtype, rows, k, gen);
  const std::vector<float> bias = RandomFloats(gen, rows, 1.0f);
  const std::vector<QActBlock> xq = RandomActivations(c, k, gen);
  for (const QGemmKernel* kernel : AvailableQGemmKernels()) {
    std::vector<float> whole(c * rows), split(c * rows, kSentinel);
    kernel->qgemm(c, k, rows, m.packed.data(), QuantTypeOf(dtype), bias.data(), xq.data(),
                  whole.data(), rows);
    // Panels [0, 1), [1, 4), [4, 5), [5, 7) (the last one partial).
    const size_t cuts[] = {0, 1, 4, 5, 7};
    for (size_t i = 0; i + 1 < sizeof(cuts) / sizeof(cuts[0]); ++i) {
      const size_t r0 = cuts[i] * kQuantPanelRows;
      const size_t r1 = std::min(rows, cuts[i + 1] * kQuantPanelRows);
      kernel->qgemm(c, k, r1 - r0, m.packed.data() + cuts[i] * m.g.panel_bytes, QuantTypeOf(dtype),
                    bias.data() + r0, xq.data(), split.data() + r0, rows);
    }
    ASSERT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
        << kernel->isa;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QGemmDTypeTest, ::testing::Values(DType::I8, DType::I4),
                         [](const ::testing::TestParamInfo<DType>& dtype) {
                           return std::string(DTypeName(dtype.param));
                         });

}  // namespace
}  // namespace fflite
