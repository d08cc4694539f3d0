// Quantised weights (I8, I4; plain and block-rotated layouts) on the CPU backend against the
// reference on the same file: odd shapes, MoE layers, 1..300 tokens (both the float-activation
// and the int8-activation kernels), 1 and 3 threads, every kernel this CPU has, gate/up pairs,
// mixed dtypes, NaN. The sweep over dtype, layout, activation and tokens runs on every backend
// (backend_suites_test.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cpu/quant_engine.h"
#include "backends/cpu/cpu_backend.h"
#include "testing/backends.h"
#include "format/quantize.h"
#include "format/writer.h"
#include "gtest/gtest.h"
#include "testing/model_builder.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::FfnParams;
using testing::FfnTester;
using testing::MoeTester;
using testing::Rng;

// The backend's default: products of `dtype` weights of at least this many tokens take the int8
// kernels (of the pair given, or of the best pair).
size_t GemmTokens(DType dtype, const CpuBackendOptions& options = CpuBackendOptions()) {
  return DefaultQuantGemmMinTokens(QuantTypeOf(dtype),
                                   options.qgemv ? *options.qgemv : BestQGemvKernel(),
                                   options.qgemm ? *options.qgemm : BestQGemmKernel());
}

double ToleranceFor(DType dtype, size_t tokens,
                    const CpuBackendOptions& options = CpuBackendOptions()) {
  return tokens >= GemmTokens(dtype, options) ? testing::kInt8ActRelTol : testing::kF32RelTol;
}

// Shapes: k of 1, 31, 33 and 200; rows from 1 to 300; every token count class; 1 and 3 threads
// (300 tokens on 3 only: 84% of the sweep's work, and on 1 thread the same kernels as 41 tokens
// without the split, which 41 tokens on 1 and 3 threads already check; under qemu this halves
// the longest test).
TEST(QuantShapeTest, OddShapesTokensAndThreads) {
  const uint32_t shapes[][2] = {{1, 1}, {31, 17}, {33, 64}, {200, 301}, {64, 40}};
  for (DType dtype : {DType::I8, DType::I4}) {
    for (const auto& s : shapes) {
      for (size_t tokens : {size_t{1}, size_t{7}, size_t{8}, size_t{41}, size_t{300}}) {
        for (int threads : {1, 3}) {
          if (tokens == 300 && threads == 1) continue;
          FfnTester()
              .d_model(s[0])
              .d_ff(s[1])
              .activation(Activation::GELU_TANH)
              .gated(true)
              .bias(true)
              .dtype(dtype)
              .rotate(s[0] == 33)
              .tokens(tokens)
              .threads(threads)
              .tolerance(ToleranceFor(dtype, tokens))
              .Test("xnnpack");
        }
      }
    }
  }
}

// MoE: routed experts (1 token: decode; 130: many tokens per expert), shared experts behind
// the gate, under a budget.
TEST(QuantMoeTest, RoutedAndSharedExperts) {
  for (DType dtype : {DType::I8, DType::I4}) {
    for (size_t tokens : {size_t{1}, size_t{5}, size_t{130}}) {
      testing::MoeParams moe;
      moe.num_experts = 6;
      moe.top_k = 2;
      moe.num_shared = 1;
      moe.shared_gate = true;
      for (uint64_t budget : {uint64_t{0}, uint64_t{1}}) {
        MoeTester()
            .d_model(40)
            .d_ff(72)
            .moe(moe)
            .dtype(dtype)
            .tokens(tokens)
            .threads(tokens > 100 ? 3 : 1)
            .expert_budget(budget)
            .tolerance(ToleranceFor(dtype, tokens))
            .Test("xnnpack");
      }
    }
  }
}

// Experts large enough (about 43 tokens x 700 x 96 each) that the quantised engine shares each
// product among 3 threads, each applying the GLU to its own rows.
TEST(QuantMoeTest, ExpertProductsSharedAmongThreads) {
  for (DType dtype : {DType::I8, DType::I4}) {
    testing::MoeParams moe;
    moe.num_experts = 6;
    moe.top_k = 2;
    moe.num_shared = 1;
    MoeTester()
        .d_model(96)
        .d_ff(700)
        .moe(moe)
        .dtype(dtype)
        .tokens(130)
        .threads(3)
        .tolerance(ToleranceFor(dtype, 130))
        .Test("xnnpack");
  }
}


WriteOptions Quantized(DType dtype, bool rotate) {
  WriteOptions write;
  write.dtype = DType::F32;
  write.matrix_dtype = [dtype](const std::string&, DType) { return dtype; };
  write.quantize.rotate = rotate;
  return write;
}

ModelSpec OneLayer(uint32_t d, uint32_t ff, Rng& rng) {
  FfnParams p;
  p.d_model = d;
  p.d_ff = ff;
  ModelSpec spec;
  spec.d_model = d;
  LayerSpec layer;
  layer.ffn = testing::RandomFfn(p, rng);
  spec.layers.push_back(std::move(layer));
  return spec;
}

// Every float-activation and every int8-activation kernel this CPU offers, forced in turn.
TEST(QuantKernelSetsTest, EveryKernelMatchesReference) {
  Rng rng(3);
  const ModelSpec spec = OneLayer(77, 150, rng);
  for (DType dtype : {DType::I8, DType::I4}) {
    for (const QGemvKernel* gemv : AvailableQGemvKernels()) {
      for (const QGemmKernel* gemm : AvailableQGemmKernels()) {
        for (size_t tokens : {size_t{2}, size_t{33}}) {
          CpuBackendOptions options;
          options.qgemv = gemv;
          options.qgemm = gemm;
          testing::ExpectCpuMatchesReference(
              spec, Quantized(dtype, false), tokens, 1, options,
              ToleranceFor(dtype, tokens, options),
              absl::StrFormat("%s qgemv %s qgemm %s, %d tokens", DTypeName(dtype), gemv->isa,
                              gemm->isa, tokens));
        }
      }
    }
  }
}

// Float activations for every token count (quant_gemm_min_tokens 0): the f32 tolerance at 300.
TEST(QuantKernelSetsTest, FloatActivationsForManyTokens) {
  Rng rng(4);
  const ModelSpec spec = OneLayer(64, 96, rng);
  CpuBackendOptions options;
  options.quant_gemm_min_tokens = 0;
  testing::ExpectCpuMatchesReference(spec, Quantized(DType::I4, true), 300, 3, options,
                                     testing::kF32RelTol,
                                     "i4 rotated, float activations, 300 tokens");
}

// Rows are shared among threads at panel boundaries, and for many tokens the rotation and the
// int8 activations among them by tokens, each thread applying the GLU to its rows: 1 and 3
// threads give the same bits, on both paths, plain and rotated.
TEST(QuantThreadsTest, SameBitsForOneAndThreeThreads) {
  Rng rng(8);
  const ModelSpec spec = OneLayer(96, 700, rng);
  for (const auto& [dtype, rotate] : {std::pair{DType::I8, false}, std::pair{DType::I4, true}}) {
    for (size_t tokens : {size_t{1}, size_t{64}}) {
      std::vector<float> one, three;
      testing::ExpectCpuMatchesReference(spec, Quantized(dtype, rotate), tokens, 1,
                                         CpuBackendOptions(), ToleranceFor(dtype, tokens),
                                         "1 thread", &one);
      testing::ExpectCpuMatchesReference(spec, Quantized(dtype, rotate), tokens, 3,
                                         CpuBackendOptions(), ToleranceFor(dtype, tokens),
                                         "3 threads", &three);
      EXPECT_EQ(one, three) << tokens << " tokens, rotated " << rotate;
    }
  }
}

// The quantised engine's RunPair (a GLU's gate and up together: the activations prepared once,
// each thread computing both products for its rows and then the GLU on them) gives the bits of
// Run for gate then Run for up with the GLU: few tokens (float activations) and many (int8),
// plain and rotated, biases, an output stride wider than the rows, on the caller's thread and on
// 3 threads (64 tokens of 700 × 96: split), and a NaN in one token (both take the float path).
TEST(QuantPairTest, SameBitsAsGateThenUp) {
  const size_t rows = 700, k = 96, stride = 709;
  Rng rng(21);
  const std::vector<float> gate_f = rng.Vec(rows * k, 1.0f), up_f = rng.Vec(rows * k, 1.0f);
  const std::vector<float> gate_bias = rng.Vec(rows, 0.5f), up_bias = rng.Vec(rows, 0.5f);
  pthreadpool_t threadpool = pthreadpool_create(3);
  ASSERT_NE(threadpool, nullptr);
  PoolWorkers pool(threadpool, /*sleep_between=*/false);  // destroys the pthreadpool
  for (const auto& [dtype, rotate] : {std::pair{DType::I8, false}, std::pair{DType::I4, true}}) {
    QuantizeOptions quantize;
    quantize.rotate = rotate;
    const Layout layout = rotate ? Layout::PANEL16_K4_HADAMARD32 : Layout::PANEL16_K4;
    const size_t bytes = TensorBytes(dtype, {rows, k}, layout);
    std::vector<uint8_t> gate_q(bytes), up_q(bytes);
    ASSERT_TRUE(QuantizeMatrix(dtype, rows, k, gate_f.data(), quantize, "gate", gate_q.data(),
                               nullptr)
                    .ok());
    ASSERT_TRUE(
        QuantizeMatrix(dtype, rows, k, up_f.data(), quantize, "up", up_q.data(), nullptr).ok());
    TensorView gate_w;
    gate_w.dtype = dtype;
    gate_w.shape = {rows, k};
    gate_w.layout = layout;
    gate_w.size = bytes;
    gate_w.data = gate_q.data();
    TensorView up_w = gate_w;
    up_w.data = up_q.data();
    ASSERT_TRUE(QuantEngine::CanPair(gate_w, up_w));
    QuantEngine engine(BestQGemvKernel(), BestQGemmKernel(), kQuantGemmTokensAuto);
    ASSERT_TRUE(engine.Reserve(64, k));
    for (size_t tokens : {size_t{3}, size_t{64}}) {
      for (size_t threads : {size_t{1}, size_t{3}}) {
        for (bool nan : {false, true}) {
          const std::string what = absl::StrFormat("%s rotated %d, %d tokens, %d threads, nan %d",
                                                   DTypeName(dtype), rotate, tokens, threads, nan);
          std::vector<float> x = Rng(22).Vec(tokens * k, 2.0f);
          if (nan) x[2 * k + 5] = std::nanf("");
          const EngineContext ctx{threads > 1 ? &pool : nullptr, threads};
          std::vector<float> gate_a(tokens * stride), y_a(tokens * stride);
          std::vector<float> gate_b(tokens * stride), y_b(tokens * stride);
          engine.Run(gate_w, gate_bias.data(), tokens, x.data(), k, gate_a.data(), stride, ctx,
                     false, {});
          engine.Run(up_w, up_bias.data(), tokens, x.data(), k, y_a.data(), stride, ctx, true,
                     Epilogue{BestKernels().silu, gate_a.data(), nullptr});
          engine.RunPair(gate_w, gate_bias.data(), gate_b.data(), up_w, up_bias.data(), tokens,
                         x.data(), k, y_b.data(), stride, ctx, true,
                         Epilogue{BestKernels().silu, gate_b.data(), nullptr});
          for (size_t t = 0; t < tokens; ++t) {
            ASSERT_EQ(std::memcmp(gate_a.data() + t * stride, gate_b.data() + t * stride,
                                  rows * sizeof(float)),
                      0)
                << what << ", gate of token " << t;
            ASSERT_EQ(std::memcmp(y_a.data() + t * stride, y_b.data() + t * stride,
                                  rows * sizeof(float)),
                      0)
                << what << ", output of token " << t;
            EXPECT_EQ(std::isnan(y_b[t * stride]), nan && t == 2) << what << ", token " << t;
          }
        }
      }
    }
  }
}

// Gate and up quantised differently (I8 and I4, and I4 and f16) cannot share one pass: each runs
// on its own, against the reference.
TEST(QuantPairTest, GateAndUpOfDifferentDtypes) {
  Rng rng(23);
  const ModelSpec spec = OneLayer(96, 300, rng);
  for (DType up_dtype : {DType::I4, DType::F16}) {
    WriteOptions write = Quantized(DType::I8, false);
    write.matrix_dtype = [up_dtype](const std::string& path, DType) {
      const bool up = path.size() >= 2 && path.compare(path.size() - 2, 2, "up") == 0;
      return up ? up_dtype : DType::I8;
    };
    for (size_t tokens : {size_t{2}, size_t{64}}) {
      testing::ExpectCpuMatchesReference(
          spec, write, tokens, 3, CpuBackendOptions(),
          std::max(ToleranceFor(DType::I8, tokens), ToleranceFor(DType::I4, tokens)),
          absl::StrFormat("gate i8, up %s, %d tokens", DTypeName(up_dtype), tokens));
    }
  }
}

// --keep-style policies: a layer whose down matrix stays f16 while up and gate are I4 (one
// FFN, two engines), and the reverse.
TEST(QuantMixedTest, QuantisedAndFloatMatricesInOneFfn) {
  Rng rng(5);
  const ModelSpec spec = OneLayer(50, 90, rng);
  for (bool down_kept : {true, false}) {
    WriteOptions write = Quantized(DType::I4, false);
    write.matrix_dtype = [down_kept](const std::string& path, DType) {
      const bool down = path.size() >= 4 && path.compare(path.size() - 4, 4, "down") == 0;
      return down == down_kept ? DType::F16 : DType::I4;
    };
    for (size_t tokens : {size_t{1}, size_t{50}}) {
      testing::ExpectCpuMatchesReference(
          spec, write, tokens, 1, CpuBackendOptions(), ToleranceFor(DType::I4, tokens),
          absl::StrFormat("mixed, down kept %d, %d tokens", down_kept, tokens));
    }
  }
}

// A NaN in one token's input makes that token's outputs NaN and leaves the others as the
// reference has them, on the float path and on the int8 path (which cannot carry a NaN, so such
// a call takes the float path). The last case shares the tokens' preparation among 3 threads
// (64·700·96 multiply-adds), with the NaN in the last thread's share.
TEST(QuantNanTest, NanStaysInItsToken) {
  struct Case {
    uint32_t d, ff;
    size_t tokens, bad;
    int threads;
  };
  for (const Case& c : {Case{40, 64, 2, 1, 1}, Case{40, 64, 20, 1, 1}, Case{96, 700, 64, 50, 3}}) {
    Rng rng(12);
    const ModelSpec spec = OneLayer(c.d, c.ff, rng);
    auto built = testing::BuildModel(spec, Quantized(DType::I8, true));
    ASSERT_TRUE(built.ok()) << built.status();
    std::vector<float> input = Rng(13).Vec(c.tokens * c.d, 2.0f);
    input[c.bad * c.d + 7] = std::nanf("");
    auto got = testing::RunLayer(*built->model, "xnnpack", 0, input, c.tokens, c.threads);
    auto want = testing::RunLayer(*built->model, "reference", 0, input, c.tokens);
    ASSERT_TRUE(got.ok() && want.ok());
    for (size_t t = 0; t < c.tokens; ++t) {
      for (size_t i = 0; i < c.d; ++i) {
        const float g = (*got)[t * c.d + i], w = (*want)[t * c.d + i];
        if (t == c.bad) {
          EXPECT_TRUE(std::isnan(g)) << c.tokens << " tokens, feature " << i;
        } else {
          EXPECT_NEAR(g, w, testing::kF32RelTol * (std::fabs(w) + 1.0)) << c.tokens << " tokens";
        }
      }
    }
  }
}

}  // namespace
}  // namespace fflite
