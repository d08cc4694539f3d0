// Kernel tests: every vectorised kernel against its scalar version and against the double formula
// (the reference backend's), over lengths that hit the vector body and every tail.
#include "kernels/kernels.h"


#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/half.h"
#include "backends/cpu/ffn_forms.h"
#include "backends/reference/reference_backend.h"
#include "gtest/gtest.h"
#include "testing/guarded_buffer.h"
#include "testing/model_builder.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::kActivationAbsTol;
using testing::kActivationRelTol;
using testing::kNormRelTol;

constexpr Activation kActivations[] = {Activation::RELU, Activation::GELU_ERF,
                                       Activation::GELU_TANH, Activation::SILU,
                                       Activation::SIGMOID, Activation::SWIGLU_OAI};
// Body lengths and every tail of the 16-, 8- and 4-wide loops.
constexpr size_t kLengths[] = {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1001};

// Inputs over the ranges that matter (and saturate): dense in [-12, 12], plus special points.
std::vector<float> ActivationInputs(size_t n, uint32_t seed) {
  testing::Rng rng(seed);
  std::vector<float> x = rng.Vec(n, 12.0f);
  const float special[] = {0.0f,  -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.5f,   -0.5f,  3.0f,
                           -3.0f, -9.0f, 20.0f,  -20.0f,  90.0f, -90.0f, 150.0f, -150.0f};
  for (size_t i = 0; i < n && i < sizeof(special) / sizeof(special[0]); ++i) {
    x[(i * 7) % n] = special[i];
  }
  return x;
}

bool Near(double got, double want, double rel, double abs) {
  return std::fabs(got - want) <= rel * std::fabs(want) + abs;
}

std::vector<const Kernels*> SimdKernels() {
  std::vector<const Kernels*> sets;
  for (const Kernels* k : AvailableKernels()) {
    if (k != &ScalarKernels()) sets.push_back(k);
  }
  return sets;
}

// Checks one kernel set's activation against the double formula, plain and as the GLU product,
// out of place and in place, and that it writes nothing past n.
void CheckActivation(const Kernels& k, Activation act) {
  for (size_t n : kLengths) {
    const std::vector<float> x = ActivationInputs(std::max<size_t>(n, 1), 7 + n);
    // gpt-oss's up values are clamped to ±7: its inputs reach past that.
    const bool oai = act == Activation::SWIGLU_OAI;
    const std::vector<float> u =
        testing::Rng(99 + n).Vec(std::max<size_t>(n, 1), oai ? 9.0f : 3.0f);
    for (bool glu : {false, true}) {
      std::vector<float> y(n + 8, 12345.0f);
      k.Activation(ActKindOf(act))(n, x.data(), glu ? u.data() : nullptr, y.data());
      for (size_t i = 0; i < n; ++i) {
        const double want = glu ? ReferenceGlu(act, x[i], u[i]) : ReferenceActivation(act, x[i]);
        ASSERT_TRUE(Near(y[i], want, kActivationRelTol,
                         kActivationAbsTol * (glu ? (oai ? 8.0 : 3.0) : 1.0)))
            << k.isa << " " << ActivationName(act) << (glu ? " glu" : "") << " n " << n << " x "
            << x[i] << ": got " << y[i] << ", want " << want;
      }
      for (size_t i = n; i < n + 8; ++i) ASSERT_EQ(y[i], 12345.0f) << "wrote past n at " << i;
      // In place (y aliases u for the GLU product, x otherwise), as the backend calls it.
      std::vector<float> z = glu ? u : x;
      k.Activation(ActKindOf(act))(n, glu ? x.data() : z.data(), glu ? z.data() : nullptr,
                                   z.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(z[i], y[i]) << "in place differs at " << i;
    }
  }
}

TEST(KernelsTest, ScalarActivationsMatchDoubleFormula) {
  for (Activation act : kActivations) CheckActivation(ScalarKernels(), act);
}

TEST(KernelsTest, SimdActivationsMatchDoubleFormula) {
  if (SimdKernels().empty()) GTEST_SKIP() << "no SIMD kernels for this CPU";
  for (const Kernels* k : SimdKernels()) {
    for (Activation act : kActivations) CheckActivation(*k, act);
  }
}

// The x86 sets compute one source of formulas (activations_x86.inc) at 8 and 16 lanes: the
// same operations in the same order, so the same bits, plain and as the GLU product, for every
// lane position of the body and the tail.
TEST(KernelsTest, Avx512ActivationsEqualAvx2Bits) {
  const Kernels* avx2 = nullptr;
  const Kernels* avx512 = nullptr;
  for (const Kernels* k : AvailableKernels()) {
    if (std::string(k->isa) == "avx2") avx2 = k;
    if (std::string(k->isa) == "avx512") avx512 = k;
  }
  if (avx2 == nullptr || avx512 == nullptr) GTEST_SKIP() << "this CPU lacks AVX2 or AVX-512";
  const size_t n = 4099;
  std::vector<float> x = ActivationInputs(n, 9);
  const uint32_t specials[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x00000001u, 0x80800000u,
                               0x7f7fffffu, 0xc2b00000u, 0x42b20000u};
  for (size_t i = 0; i < std::size(specials); ++i) x[100 + 13 * i] = BitsToFloat(specials[i]);
  const std::vector<float> u = ActivationInputs(n, 10);
  for (Activation act : kActivations) {
    for (const float* gate_up : {static_cast<const float*>(nullptr), u.data()}) {
      for (size_t len : {n, size_t{23}}) {
        std::vector<float> want(len), got(len);
        avx2->Activation(ActKindOf(act))(len, x.data(), gate_up, want.data());
        avx512->Activation(ActKindOf(act))(len, x.data(), gate_up, got.data());
        for (size_t i = 0; i < len; ++i) {
          ASSERT_EQ(FloatBits(got[i]), FloatBits(want[i]))
              << "activation " << static_cast<int>(act) << " x " << x[i] << " i " << i;
        }
      }
    }
  }
}

TEST(KernelsTest, SimdActivationsMatchScalar) {
  if (SimdKernels().empty()) GTEST_SKIP() << "no SIMD kernels for this CPU";
  const size_t n = 4099;
  const std::vector<float> x = ActivationInputs(n, 5);
  for (const Kernels* k : SimdKernels()) {
    for (Activation act : kActivations) {
      std::vector<float> want(n), got(n);
      ScalarKernels().Activation(ActKindOf(act))(n, x.data(), nullptr, want.data());
      k->Activation(ActKindOf(act))(n, x.data(), nullptr, got.data());
      for (size_t i = 0; i < n; ++i) {
        // Both are within the tolerance of the exact value, so within twice of each other.
        ASSERT_TRUE(Near(got[i], want[i], 2 * kActivationRelTol, 2 * kActivationAbsTol))
            << k->isa << " " << ActivationName(act) << " x " << x[i] << ": " << got[i]
            << " vs scalar " << want[i];
      }
    }
  }
}

// The double formulas of the reference backend's Norm.
std::vector<double> NormFormula(NormKind kind, const std::vector<float>& x,
                                const std::vector<float>& w, const float* b, float eps) {
  const size_t d = x.size();
  double mean = 0.0;
  if (kind == NormKind::LAYER_NORM) {
    for (float v : x) mean += v;
    mean /= static_cast<double>(d);
  }
  double sq = 0.0;
  for (float v : x) sq += (v - mean) * (v - mean);
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + eps);
  std::vector<double> y(d);
  for (size_t i = 0; i < d; ++i) y[i] = (x[i] - mean) * inv * w[i] + (b != nullptr ? b[i] : 0.0);
  return y;
}

void CheckNorms(const Kernels& k, const Kernels* compare_to) {
  for (size_t d : {1, 2, 7, 8, 31, 33, 61, 768, 4096}) {
    testing::Rng rng(static_cast<uint32_t>(d));
    // An offset mean (LayerNorm must subtract it accurately) and O(1) spread.
    std::vector<float> x = rng.Vec(d, 2.0f);
    for (float& v : x) v += 3.0f;
    std::vector<float> w(d), b = rng.Vec(d, 0.3f);
    for (float& v : w) v = rng.Uniform(0.5f, 1.5f);
    for (NormKind kind : {NormKind::LAYER_NORM, NormKind::RMS_NORM}) {
      for (bool bias : {false, true}) {
        if (kind == NormKind::RMS_NORM && bias) continue;
        const float eps = 1e-5f;
        std::vector<float> y(d + 8, 777.0f);
        if (kind == NormKind::LAYER_NORM) {
          k.layer_norm(d, x.data(), w.data(), bias ? b.data() : nullptr, eps, y.data());
        } else {
          k.rms_norm(d, x.data(), w.data(), eps, y.data());
        }
        const std::vector<double> want = NormFormula(kind, x, w, bias ? b.data() : nullptr, eps);
        double sq = 0.0;
        for (double v : want) sq += v * v;
        const double rms = std::sqrt(sq / static_cast<double>(d));
        for (size_t i = 0; i < d; ++i) {
          ASSERT_LE(std::fabs(y[i] - want[i]), kNormRelTol * (std::fabs(want[i]) + rms))
              << k.isa << (kind == NormKind::LAYER_NORM ? " layer_norm" : " rms_norm") << " bias "
              << bias << " d " << d << " i " << i;
        }
        for (size_t i = d; i < d + 8; ++i) ASSERT_EQ(y[i], 777.0f) << "wrote past d";
        if (compare_to != nullptr) {
          std::vector<float> z(d);
          if (kind == NormKind::LAYER_NORM) {
            compare_to->layer_norm(d, x.data(), w.data(), bias ? b.data() : nullptr, eps, z.data());
          } else {
            compare_to->rms_norm(d, x.data(), w.data(), eps, z.data());
          }
          for (size_t i = 0; i < d; ++i) {
            ASSERT_LE(std::fabs(y[i] - z[i]), 2 * kNormRelTol * (std::fabs(z[i]) + rms))
                << k.isa << " vs scalar, d " << d << " i " << i;
          }
        }
        // In place, as the backend may call it.
        std::vector<float> in_place = x;
        if (kind == NormKind::LAYER_NORM) {
          k.layer_norm(d, in_place.data(), w.data(), bias ? b.data() : nullptr, eps,
                       in_place.data());
        } else {
          k.rms_norm(d, in_place.data(), w.data(), eps, in_place.data());
        }
        for (size_t i = 0; i < d; ++i) ASSERT_EQ(in_place[i], y[i]) << "in place, i " << i;
      }
    }
  }
}

TEST(KernelsTest, ScalarNormsMatchDoubleFormula) { CheckNorms(ScalarKernels(), nullptr); }

TEST(KernelsTest, SimdNormsMatchDoubleFormulaAndScalar) {
  if (SimdKernels().empty()) GTEST_SKIP() << "no SIMD kernels for this CPU";
  for (const Kernels* k : SimdKernels()) CheckNorms(*k, &ScalarKernels());
}

TEST(KernelsTest, AddIsElementwise) {
  const std::vector<float> a = {1, 2, 3, 4, 5}, b = {10, 20, 30, 40, 50};
  std::vector<float> y(5);
  F32Add(5, a.data(), b.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{11, 22, 33, 44, 55}));
}

// ---- gemv: y[t, o] = bias[o] + Σ_j W[o, j]·x[t, j] from f32 / f16 / bf16 weights.

using testing::GuardedBuffer;

size_t GemvDTypeSize(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

// Rounds each value to the dtype (the values the kernel will see) and writes the stored elements
// to `out`.
void EncodeWeights(DType dtype, std::vector<float>& values, void* out) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) {
      std::memcpy(static_cast<float*>(out) + i, &values[i], sizeof(float));
      continue;
    }
    const uint16_t h = dtype == DType::F16 ? F32ToF16(values[i]) : F32ToBf16(values[i]);
    values[i] = dtype == DType::F16 ? F16ToF32(h) : Bf16ToF32(h);
    std::memcpy(static_cast<uint16_t*>(out) + i, &h, sizeof(h));
  }
}

// Tolerance. Each output is a sum of k products of f32 values, accumulated in f32 in some order
// (sequentially in the scalar kernel, per vector lane and then across lanes in the SIMD ones; fused
// or not), plus the bias. Whatever the order, that is at most k roundings on any path (adding an
// exact zero of a masked tail lane rounds nothing), and one more for the bias, so the classic
// bound |fl(Σ) - Σ| <= γ_n·Σ|terms|, γ_n ≈ n·2^-24, gives
//   |got - want| <= (k + 2)·2^-24·(Σ_j |w_j·x_j| + |bias|).
// The reference is exact up to double rounding (the products of f32 values are exact in double;
// k·2^-53 relative is absorbed by the "+ 2"). The bound is worst-case, not statistical, so it
// never flakes; it is still far below a dropped or repeated term (about Σ/k: >= 1e-3·Σ here).
double GemvTolerance(size_t k, double sum_abs, double bias) {
  return 1.01 * static_cast<double>(k + 2) * 0x1p-24 * (sum_abs + std::fabs(bias));
}

constexpr DType kGemvDTypes[] = {DType::F32, DType::F16, DType::BF16};
constexpr float kSentinel = -12345.0f;

// One case: every kernel set against the double reference, with and without bias, W and x ending
// at an unreadable page, y checked for writes between its rows (stride padding) and past its end.
void CheckGemv(DType dtype, size_t c, size_t k, size_t rows, size_t x_pad, size_t y_pad) {
  const uint32_t seed = static_cast<uint32_t>(1000003 * c + 1009 * k + rows);
  testing::Rng rng(seed);
  std::vector<float> w = rng.Vec(rows * k, 1.0f);
  GuardedBuffer w_buf(rows * k * GemvDTypeSize(dtype));
  EncodeWeights(dtype, w, w_buf.As<void>());
  const std::vector<float> bias_values = rng.Vec(rows, 1.0f);
  GuardedBuffer bias_buf(rows * sizeof(float));
  std::memcpy(bias_buf.As<float>(), bias_values.data(), rows * sizeof(float));
  const size_t x_stride = k + x_pad, y_stride = rows + y_pad;
  const size_t x_size = (c - 1) * x_stride + k, y_size = (c - 1) * y_stride + rows;
  const std::vector<float> x = rng.Vec(x_size, 2.0f);  // the padding holds values too: unused
  GuardedBuffer x_buf(x_size * sizeof(float));
  std::memcpy(x_buf.As<float>(), x.data(), x_size * sizeof(float));

  std::vector<double> dot(c * rows), sum_abs(c * rows);
  for (size_t t = 0; t < c; ++t) {
    for (size_t o = 0; o < rows; ++o) {
      double d = 0.0, a = 0.0;
      for (size_t j = 0; j < k; ++j) {
        const double p = static_cast<double>(w[o * k + j]) * x[t * x_stride + j];
        d += p;
        a += std::fabs(p);
      }
      dot[t * rows + o] = d;
      sum_abs[t * rows + o] = a;
    }
  }
  for (bool with_bias : {false, true}) {
    for (const Kernels* ks : AvailableKernels()) {
      GuardedBuffer y_buf(y_size * sizeof(float));
      float* y = y_buf.As<float>();
      for (size_t i = 0; i < y_size; ++i) y[i] = kSentinel;
      ks->gemv(c, k, rows, w_buf.As<void>(), FloatTypeOf(dtype),
               with_bias ? bias_buf.As<float>() : nullptr, x_buf.As<float>(), x_stride, y,
               y_stride);
      for (size_t t = 0; t < c; ++t) {
        for (size_t o = 0; o < rows; ++o) {
          const double b = with_bias ? bias_values[o] : 0.0;
          const double want = b + dot[t * rows + o];
          const double got = y[t * y_stride + o];
          ASSERT_LE(std::fabs(got - want), GemvTolerance(k, sum_abs[t * rows + o], b))
              << ks->isa << " " << DTypeName(dtype) << " c " << c << " k " << k << " rows "
              << rows << " bias " << with_bias << " x_stride " << x_stride << " y_stride "
              << y_stride << ": y[" << t << ", " << o << "] = " << got << ", want " << want;
        }
        for (size_t o = rows; o < y_stride && t + 1 < c; ++o) {
          ASSERT_EQ(y[t * y_stride + o], kSentinel)
              << ks->isa << " wrote y[" << t << ", " << o << "] in the stride padding";
        }
      }
    }
  }
}

TEST(KernelsTest, GemvMatchesDoubleReference) {
  for (DType dtype : kGemvDTypes) {
    for (size_t k : {1, 7, 8, 33, 64, 1001}) {
      for (size_t rows : {1, 3, 4, 5, 17, 64}) {
        for (size_t c = 1; c <= 9; ++c) {
          // Even token counts with padded strides, odd ones packed (x_stride = k, y_stride = rows).
          const bool padded = c % 2 == 0;
          CheckGemv(dtype, c, k, rows, padded ? 5 : 0, padded ? 3 : 0);
          if (HasFatalFailure()) return;
        }
      }
    }
    // Token counts past one batch of every kernel (AVX2 12, AVX-512 24 tokens), with x rows 4 KiB
    // apart (x_stride 1024: the AVX-512 kernel groups at most 4 tokens then) and not.
    for (size_t c : {13, 25, 50}) {
      CheckGemv(dtype, c, 1001, 5, 23, 1);
      if (HasFatalFailure()) return;
      CheckGemv(dtype, c, 33, 9, 0, 0);
      if (HasFatalFailure()) return;
    }
  }
}

// The backend splits rows among threads and may run tokens in different batches: a row's result
// must be bit-identical however the rows and tokens are split (the thread-count independence the
// backends promise).
TEST(KernelsTest, GemvIsIndependentOfRowAndTokenSplits) {
  const size_t c = 30, k = 203, rows = 23;
  for (DType dtype : kGemvDTypes) {
    std::vector<float> w = testing::Rng(5).Vec(rows * k, 1.0f);
    std::vector<uint8_t> w_bytes(rows * k * GemvDTypeSize(dtype));
    EncodeWeights(dtype, w, w_bytes.data());
    const std::vector<float> bias = testing::Rng(6).Vec(rows, 1.0f);
    // x_stride k, and 1024 (x rows 4 KiB apart: the AVX-512 kernel groups tokens differently).
    for (size_t x_stride : {k, size_t{1024}}) {
      const std::vector<float> x = testing::Rng(7).Vec(c * x_stride, 2.0f);
      for (const Kernels* ks : AvailableKernels()) {
        std::vector<float> whole(c * rows), split(c * rows, kSentinel);
        ks->gemv(c, k, rows, w_bytes.data(), FloatTypeOf(dtype), bias.data(), x.data(), x_stride,
                 whole.data(), rows);
        // Row ranges [0, 1), [1, 4), [4, 10), [10, 23) (offsets off the 4-row blocks), each for
        // tokens one at a time, then 3, then 4, then 22 (past one batch of every kernel).
        const size_t bounds[] = {0, 1, 4, 10, rows};
        const size_t token_bounds[] = {0, 1, 4, 8, c};
        for (size_t r = 0; r + 1 < sizeof(bounds) / sizeof(bounds[0]); ++r) {
          const size_t o = bounds[r], n = bounds[r + 1] - bounds[r];
          for (size_t g = 0; g + 1 < sizeof(token_bounds) / sizeof(token_bounds[0]); ++g) {
            const size_t t = token_bounds[g], m = token_bounds[g + 1] - token_bounds[g];
            ks->gemv(m, k, n, w_bytes.data() + o * k * GemvDTypeSize(dtype), FloatTypeOf(dtype),
                     bias.data() + o, x.data() + t * x_stride, x_stride,
                     split.data() + t * rows + o, rows);
          }
        }
        for (size_t i = 0; i < c * rows; ++i) {
          ASSERT_EQ(FloatBits(split[i]), FloatBits(whole[i]))
              << ks->isa << " " << DTypeName(dtype) << " x_stride " << x_stride << " token "
              << i / rows << " row " << i % rows;
        }
      }
    }
  }
}

// A NaN in one token's input (in the vector body or in the tail) reaches every output of that
// token and no other: no lane, tail or accumulator is shared between tokens.
TEST(KernelsTest, GemvNanInOneTokenStaysInThatToken) {
  const size_t c = 5, rows = 9;
  for (DType dtype : kGemvDTypes) {
    for (size_t k : {1, 13, 64}) {
      std::vector<float> w = testing::Rng(11).Vec(rows * k, 1.0f);
      std::vector<uint8_t> w_bytes(rows * k * GemvDTypeSize(dtype));
      EncodeWeights(dtype, w, w_bytes.data());
      for (size_t nan_at : {size_t{0}, k - 1}) {
        for (size_t nan_token = 0; nan_token < c; ++nan_token) {
          const std::vector<float> x = testing::Rng(12).Vec(c * k, 2.0f);
          std::vector<float> x_nan = x;
          x_nan[nan_token * k + nan_at] = std::numeric_limits<float>::quiet_NaN();
          for (const Kernels* ks : AvailableKernels()) {
            std::vector<float> clean(c * rows), got(c * rows);
            ks->gemv(c, k, rows, w_bytes.data(), FloatTypeOf(dtype), nullptr, x.data(), k,
                     clean.data(), rows);
            ks->gemv(c, k, rows, w_bytes.data(), FloatTypeOf(dtype), nullptr, x_nan.data(), k,
                     got.data(), rows);
            for (size_t t = 0; t < c; ++t) {
              for (size_t o = 0; o < rows; ++o) {
                const float v = got[t * rows + o];
                if (t == nan_token) {
                  ASSERT_TRUE(std::isnan(v)) << ks->isa << " " << DTypeName(dtype) << " k " << k
                                             << " NaN at x[" << t << ", " << nan_at
                                             << "]: y[" << t << ", " << o << "] = " << v;
                } else {
                  ASSERT_EQ(FloatBits(v), FloatBits(clean[t * rows + o]))
                      << ks->isa << " " << DTypeName(dtype) << " k " << k << " NaN in token "
                      << nan_token << " changed y[" << t << ", " << o << "]";
                }
              }
            }
          }
        }
      }
    }
  }
}

// ---- value rows: y[t, o] = bias[o] + Σ_j h[t, i_j]·V[i_j, o], V one row per neuron.

// One case: every kernel set against the double reference (GemvTolerance over the listed rows:
// the same sum of products, in list order), V and h ending at an unreadable page, y checked for
// writes in its stride padding; and the list of the rows whose h is nonzero for some token gives
// the bits of the list of every row (a zero h adds exactly 0).
void CheckValueRows(DType dtype, size_t c, size_t k, size_t cols, double silent, size_t y_pad) {
  const uint32_t seed = static_cast<uint32_t>(7919 * c + 31 * k + cols);
  testing::Rng rng(seed);
  std::vector<float> v = rng.Vec(k * cols, 1.0f);
  GuardedBuffer v_buf(k * cols * GemvDTypeSize(dtype));
  EncodeWeights(dtype, v, v_buf.As<void>());
  const std::vector<float> bias = rng.Vec(cols, 1.0f);
  const size_t h_stride = k + 3, y_stride = cols + y_pad;
  const size_t h_size = (c - 1) * h_stride + k, y_size = (c - 1) * y_stride + cols;
  std::vector<float> h = rng.Vec(h_size, 2.0f);
  // Silence a fraction of the neurons for every token, and a few more for some tokens only.
  for (size_t i = 0; i < k; ++i) {
    const bool off = rng.Uniform(0.0f, 1.0f) < silent;
    for (size_t t = 0; t < c; ++t) {
      if (off || rng.Uniform(0.0f, 1.0f) < 0.2f) h[t * h_stride + i] = 0.0f;
    }
  }
  GuardedBuffer h_buf(h_size * sizeof(float));
  std::memcpy(h_buf.As<float>(), h.data(), h_size * sizeof(float));
  std::vector<uint32_t> active;
  for (size_t i = 0; i < k; ++i) {
    bool fired = false;
    for (size_t t = 0; t < c; ++t) fired |= h[t * h_stride + i] != 0.0f;
    if (fired) active.push_back(static_cast<uint32_t>(i));
  }
  for (const Kernels* ks : AvailableKernels()) {
    std::vector<std::vector<float>> outs;
    for (const bool listed : {false, true}) {
      GuardedBuffer y_buf(y_size * sizeof(float));
      float* y = y_buf.As<float>();
      for (size_t i = 0; i < y_size; ++i) y[i] = kSentinel;
      ks->value_rows(c, cols, listed ? active.size() : k, listed ? active.data() : nullptr,
                     v_buf.As<void>(), FloatTypeOf(dtype), cols, bias.data(), h_buf.As<float>(),
                     h_stride, y, y_stride);
      for (size_t t = 0; t < c; ++t) {
        for (size_t o = 0; o < cols; ++o) {
          double want = bias[o], sum_abs = 0.0;
          for (size_t i = 0; i < k; ++i) {
            const double p = static_cast<double>(h[t * h_stride + i]) * v[i * cols + o];
            want += p;
            sum_abs += std::fabs(p);
          }
          const double got = y[t * y_stride + o];
          ASSERT_LE(std::fabs(got - want), GemvTolerance(k, sum_abs, bias[o]))
              << ks->isa << " " << DTypeName(dtype) << " c " << c << " k " << k << " cols "
              << cols << " listed " << listed << ": y[" << t << ", " << o << "] = " << got
              << ", want " << want;
        }
        for (size_t o = cols; o < y_stride && t + 1 < c; ++o) {
          ASSERT_EQ(y[t * y_stride + o], kSentinel) << ks->isa << " wrote the stride padding";
        }
      }
      outs.emplace_back(y, y + y_size);
    }
    ASSERT_EQ(std::memcmp(outs[0].data(), outs[1].data(), y_size * sizeof(float)), 0)
        << ks->isa << " " << DTypeName(dtype) << " c " << c << " k " << k << " cols " << cols
        << ": the list of firing rows differs from every row";
  }
}

TEST(KernelsTest, ValueRowsMatchDoubleReferenceAndSkipSilentRowsExactly) {
  for (DType dtype : kGemvDTypes) {
    // cols: below one vector, vector multiples, tails on 4, 8 and 16 lanes.
    for (size_t cols : {3, 16, 37, 200}) {
      for (size_t c : {1, 2, 5, 17}) {  // 17: two passes of 16 tokens
        // k: fewer rows than a group of 4, groups with a remainder, many rows.
        for (size_t k : {1, 6, 133}) {
          CheckValueRows(dtype, c, k, cols, 0.5, c % 2 == 0 ? 5 : 0);
        }
      }
      CheckValueRows(dtype, 1, 300, cols, 0.0, 0);
      CheckValueRows(dtype, 1, 300, cols, 0.999, 0);
      CheckValueRows(dtype, 3, 300, cols, 1.0, 0);  // every neuron silent: y = bias
    }
  }
}

}  // namespace
}  // namespace fflite
