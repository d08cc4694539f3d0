// The CPU backend against the reference over shapes (odd, prime, padded or not, 1..300 tokens),
// every activation, gated or not, biases, norms, residual, f32/f16/bf16, 1 and 3 threads, the
// scalar and the SIMD kernels, sliced and chunked execution, MoE delegation and released pages.
#include "backends/cpu/cpu_backend.h"
#include "testing/backends.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "session/session.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::FfnParams;
using testing::FfnTester;
using testing::Rng;

constexpr Activation kActivations[] = {Activation::RELU, Activation::GELU_ERF,
                                       Activation::GELU_TANH, Activation::SILU,
                                       Activation::SIGMOID, Activation::SWIGLU_OAI};

// The sweep over activations, gating, biases, norms and shapes runs on every backend:
// backend_conformance_test.cc.

// A handful of larger layers: several 2 MiB slices per matrix, several token chunks.
TEST(CpuLargerTest, LlamaLikeSwiGlu) {
  FfnTester()
      .d_model(512)
      .d_ff(1376)
      .tokens(130)
      .threads(3)
      .activation(Activation::SILU)
      .gated(true)
      .norm(NormKind::RMS_NORM, NormPlacement::PRE)
      .residual(true)
      .Test("xnnpack");
}

TEST(CpuLargerTest, BertLikeGeluPostLayerNorm) {
  FfnTester()
      .d_model(384)
      .d_ff(1536)
      .tokens(67)
      .activation(Activation::GELU_ERF)
      .gated(false)
      .bias(true)
      .norm(NormKind::LAYER_NORM, NormPlacement::POST)
      .residual(true)
      .Test("xnnpack");
}

TEST(CpuLargerTest, Bf16GeGluDecode) {
  FfnTester()
      .d_model(1024)
      .d_ff(2816)
      .tokens(1)
      .dtype(DType::BF16)
      .activation(Activation::GELU_TANH)
      .gated(true)
      .Test("xnnpack");
}

// --- Direct backend runs: options (slices, chunks, kernels), norms FfnTester does not make. ---

ModelSpec OneLayer(const FfnParams& p, Rng& rng) {
  ModelSpec spec;
  spec.d_model = p.d_model;
  LayerSpec layer;
  layer.ffn = testing::RandomFfn(p, rng);
  spec.layers.push_back(std::move(layer));
  return spec;
}

// Dense layers are prepared on first use: f16/bf16 ones run calls of at most direct_max_tokens
// on the file's rows and pack for larger calls, f32 ones pack on their first call. The path
// depends only on a call's token count: a few-token call gives the same bits before and after
// a larger call packed the layer, and every call matches the reference.
TEST(CpuLazyDenseTest, SameBitsBeforeAndAfterPacking) {
  for (DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    Rng rng(21);
    FfnParams p;
    p.d_model = 48;
    p.d_ff = 130;
    p.gated = true;
    p.bias = true;
    ModelSpec spec = OneLayer(p, rng);
    WriteOptions write;
    write.dtype = dtype;
    auto built = testing::BuildModel(spec, write);
    ASSERT_TRUE(built.ok()) << built.status();
    BackendConfig config;
    config.num_threads = 3;
    config.max_tokens = 64;
    CpuBackendOptions options;
    options.direct_max_tokens = 8;
    auto backend = CreateCpuBackendWithOptions(*built->model, config, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    const std::vector<float> few = rng.Vec(3 * 48, 2.0f), many = rng.Vec(64 * 48, 2.0f);
    std::vector<float> before(few.size()), after(few.size()), packed(many.size());
    ASSERT_TRUE((*backend)->Run(0, few.data(), 3, before.data()).ok());
    ASSERT_TRUE((*backend)->Run(0, many.data(), 64, packed.data()).ok());
    ASSERT_TRUE((*backend)->Run(0, few.data(), 3, after.data()).ok());
    EXPECT_EQ(before, after) << DTypeName(dtype);
    auto want_few = testing::RunLayer(*built->model, "reference", 0, few, 3, 1);
    auto want_many = testing::RunLayer(*built->model, "reference", 0, many, 64, 1);
    ASSERT_TRUE(want_few.ok() && want_many.ok());
    testing::ExpectOutputsNear(*want_few, before, 3, 48, testing::kF32RelTol,
                               std::string(DTypeName(dtype)) + ", 3 tokens");
    testing::ExpectOutputsNear(*want_many, packed, 64, 48, testing::FloatRelTol(dtype),
                               std::string(DTypeName(dtype)) + ", 64 tokens");
  }
}

TEST(CpuOptionsTest, ManySlicesAndSmallChunks) {
  for (Activation act : kActivations) {
    for (bool gated : {false, true}) {
      Rng rng(3);
      FfnParams p;
      p.d_model = 37;
      p.d_ff = 150;
      p.activation = act;
      p.gated = gated;
      p.bias = true;
      ModelSpec spec = OneLayer(p, rng);
      spec.layers[0].norm = testing::RandomNorm(NormKind::LAYER_NORM, NormPlacement::PRE, 37, rng);
      spec.layers[0].residual = true;
      CpuBackendOptions options;
      options.packed_engine = CpuBackendOptions::PackedEngine::kXnnpack;
      options.slice_bytes = 1;  // 16 output channels per operator: 10 slices of up, 3 of down
      options.token_chunk = 5;  // 23 tokens in chunks of 5, 5, 5, 5, 3
      WriteOptions write;
      write.d_ff_alignment = 1;
      // 3 threads once: ~70 tiny parallel dispatches per run are slow where threads > cores.
      const int threads = gated && act == Activation::SILU ? 3 : 1;
      testing::ExpectCpuMatchesReference(
          spec, write, 23, threads, options, testing::kF32RelTol,
          absl::StrFormat("sliced %s gated %d", ActivationName(act), gated));
    }
  }
}

TEST(CpuOptionsTest, OneOperatorPerMatrix) {
  Rng rng(4);
  FfnParams p;
  p.d_model = 29;
  p.d_ff = 71;
  CpuBackendOptions options;
  options.packed_engine = CpuBackendOptions::PackedEngine::kXnnpack;
  options.slice_bytes = 0;
  testing::ExpectCpuMatchesReference(OneLayer(p, rng), WriteOptions(), 9, 1, options,
                                     testing::kF32RelTol, "unsliced");
}

// Both packed engines, and the gemm engine with each of its kernels this CPU runs (scalar twins
// included; bf16 arithmetic on and off for bf16 weights; f16/bf16 weights in 16-bit panels where
// the f32 kernel has a twin for them, and for the best f32 kernel in f32 panels too), over
// f32/f16/bf16 weights, a fused ReLU clamp and a gated layer, partial tiles and panels, chunks of
// tokens and 1 and 3 threads.
TEST(CpuOptionsTest, EveryPackedEngineMatchesReference) {
  using Engine = CpuBackendOptions::PackedEngine;
  struct Setting {
    Engine engine;
    const GemmKernel* f32;
    const GemmKernel* bf16;
    bool bf16_arithmetic;
    std::string name;
    bool half_panels = true;
    CpuBackendOptions::GemmAhead ahead = CpuBackendOptions::GemmAhead::kAuto;
  };
  std::vector<Setting> settings = {{Engine::kXnnpack, nullptr, nullptr, false, "xnnpack"}};
  for (const GemmKernel* g : AvailableGemmKernels(FloatType::kF32)) {
    settings.push_back({Engine::kGemm, g, nullptr, false, std::string("gemm ") + g->isa});
  }
  settings.push_back({Engine::kGemm, &BestGemmKernel(FloatType::kF32), nullptr, false,
                      std::string("gemm ") + BestGemmKernel(FloatType::kF32).isa + ", f32 panels",
                      false});
  for (const GemmKernel* g : AvailableGemmKernels(FloatType::kBF16)) {
    settings.push_back({Engine::kGemm, nullptr, g, true, std::string("gemm ") + g->isa});
  }
  // With and without the AVX-512 kernels' ahead prefetch, whatever this CPU's default (the best
  // kernels; f32 and 16-bit panels, bf16 arithmetic where it is faster).
  settings.push_back({Engine::kGemm, nullptr, nullptr, true, "gemm, ahead prefetch on", true,
                      CpuBackendOptions::GemmAhead::kOn});
  settings.push_back({Engine::kGemm, nullptr, nullptr, true, "gemm, ahead prefetch off", true,
                      CpuBackendOptions::GemmAhead::kOff});
  // The AMX kernel's layout and tile source on its software model (gemm.h).
  settings.push_back({Engine::kGemm, nullptr, &GemmAmxModelKernel(), true, "gemm amx-bf16-model"});
  for (const Setting& setting : settings) {
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      for (bool gated : {false, true}) {
        Rng rng(9);
        FfnParams p;
        p.d_model = 70;
        p.d_ff = 300;
        p.activation = gated ? Activation::SILU : Activation::RELU;
        p.gated = gated;
        p.bias = true;
        ModelSpec spec = OneLayer(p, rng);
        CpuBackendOptions options;
        options.packed_engine = setting.engine;
        options.gemm_f32 = setting.f32;
        options.gemm_bf16 = setting.bf16;
        options.bf16_arithmetic = setting.bf16_arithmetic;
        options.half_panels = setting.half_panels;
        options.gemm_ahead = setting.ahead;
        options.token_chunk = 50;  // 131 tokens: chunks of 50, 50, 31
        options.direct_max_tokens = 0;
        WriteOptions write;
        write.dtype = dtype;
        write.d_ff_alignment = 1;
        const bool bf16_math = setting.bf16_arithmetic && dtype == DType::BF16;
        for (size_t tokens : {size_t{1}, size_t{131}}) {
          testing::ExpectCpuMatchesReference(
              spec, write, tokens, gated ? 3 : 1, options,
              bf16_math ? testing::kBf16ActRelTol : testing::kF32RelTol,
              absl::StrFormat("%s, %s, gated %d, %d tokens", setting.name, DTypeName(dtype),
                              gated, tokens));
        }
      }
    }
  }
}

// gemm_ahead: the kernels keep their ahead forms where asked and leave them out where asked not
// to (the engine's name says so); by default they follow GemmAheadByDefault (registry_test.cc).
TEST(CpuOptionsTest, AheadPrefetchRunsWhereAskedAndNotWhereNot) {
  using GemmAhead = CpuBackendOptions::GemmAhead;
  CpuBackendOptions options;
  options.packed_engine = CpuBackendOptions::PackedEngine::kGemm;
  const bool has_ahead = BestGemmKernel(FloatType::kF32).ahead != nullptr;
  auto without = [&](GemmAhead ahead) {
    options.gemm_ahead = ahead;
    return absl::StrContains(CpuPackedEngineName(options), "without the ahead prefetch");
  };
  EXPECT_FALSE(without(GemmAhead::kOn));
  EXPECT_EQ(without(GemmAhead::kOff), has_ahead);
}

// With many tokens per thread (kGemmFfnTokensPerThread) the gemm engine splits a dense layer's
// tokens among the threads, each running the norm, the whole FFN and the residual on its own:
// every kernel, gated (pre-norm) or not (post-norm), with biases and odd sizes (partial tiles and
// panels in every range), matches the reference and gives the bits of one thread, which splits
// nothing.
TEST(CpuOptionsTest, GemmTokenSplitMatchesReferenceAndOneThread) {
  using Engine = CpuBackendOptions::PackedEngine;
  std::vector<std::pair<const GemmKernel*, bool>> kernels;  // kernel, bf16 arithmetic
  for (const GemmKernel* g : AvailableGemmKernels(FloatType::kF32)) kernels.push_back({g, false});
  for (const GemmKernel* g : AvailableGemmKernels(FloatType::kBF16)) kernels.push_back({g, true});
  kernels.push_back({&GemmAmxModelKernel(), true});
  for (const auto& [kernel, bf16] : kernels) {
    for (bool gated : {false, true}) {
      Rng rng(12);
      FfnParams p;
      p.d_model = 40;
      p.d_ff = 70;
      p.activation = gated ? Activation::GELU_TANH : Activation::RELU;
      p.gated = gated;
      p.bias = true;
      ModelSpec spec = OneLayer(p, rng);
      spec.layers[0].norm = testing::RandomNorm(
          gated ? NormKind::RMS_NORM : NormKind::LAYER_NORM,
          gated ? NormPlacement::PRE : NormPlacement::POST, p.d_model, rng);
      spec.layers[0].residual = true;
      WriteOptions write;
      write.dtype = bf16 ? DType::BF16 : DType::F32;
      write.d_ff_alignment = 1;
      const size_t tokens = 150;  // 2 threads: 75 + 75; 3 threads: 50 + 50 + 50
      CpuBackendOptions options;
      options.packed_engine = Engine::kGemm;
      (bf16 ? options.gemm_bf16 : options.gemm_f32) = kernel;
      options.bf16_arithmetic = bf16;
      options.token_chunk = tokens;
      options.direct_max_tokens = 0;
      std::vector<float> one, got;
      for (int threads : {1, 2, 3}) {
        const std::string what = absl::StrFormat("%s, gated %d, %d threads", kernel->isa, gated,
                                                 threads);
        testing::ExpectCpuMatchesReference(
            spec, write, tokens, threads, options,
            bf16 ? testing::kBf16ActRelTol : testing::kF32RelTol, what, &got);
        ASSERT_FALSE(HasFatalFailure()) << what;
        if (threads == 1) {
          one = got;
        } else {
          ASSERT_EQ(got.size(), one.size()) << what;
          ASSERT_EQ(std::memcmp(got.data(), one.data(), got.size() * sizeof(float)), 0) << what;
        }
      }
    }
  }
}

TEST(CpuOptionsTest, ScalarKernelsMatchReference) {
  for (Activation act : kActivations) {
    for (NormKind kind : {NormKind::LAYER_NORM, NormKind::RMS_NORM}) {
      Rng rng(5);
      FfnParams p;
      p.d_model = 45;
      p.d_ff = 83;
      p.activation = act;
      p.gated = kind == NormKind::RMS_NORM;
      ModelSpec spec = OneLayer(p, rng);
      spec.layers[0].norm = testing::RandomNorm(kind, NormPlacement::POST, 45, rng);
      spec.layers[0].residual = true;
      CpuBackendOptions options;
      options.kernels = &ScalarKernels();
      testing::ExpectCpuMatchesReference(
          spec, WriteOptions(), 6, 1, options, testing::kF32RelTol,
          absl::StrFormat("scalar kernels, %s", ActivationName(act)));
    }
  }
}

TEST(CpuNormTest, UnitOffsetEpsAndLayerNormWithoutBias) {
  for (NormPlacement placement : {NormPlacement::PRE, NormPlacement::POST}) {
    for (NormKind kind : {NormKind::LAYER_NORM, NormKind::RMS_NORM}) {
      Rng rng(6);
      FfnParams p;
      p.d_model = 33;
      p.d_ff = 65;
      ModelSpec spec = OneLayer(p, rng);
      NormSpec norm = testing::RandomNorm(kind, placement, 33, rng);
      norm.unit_offset = true;  // Gemma: (1 + w)
      norm.eps = 0.5f;          // large enough that a dropped eps shows
      norm.bias = TensorSource();
      spec.layers[0].norm = std::move(norm);
      testing::ExpectCpuMatchesReference(spec, WriteOptions(), 4, 1, CpuBackendOptions(),
                                         testing::kF32RelTol, "unit offset");
    }
  }
}

// --- Results do not depend on the thread count: XNNPACK splits rows and columns, never the
// reduction, so 1 and 3 threads give the same bits. ---
TEST(CpuThreadsTest, SameResultForOneAndThreeThreads) {
  Rng rng(8);
  FfnParams p;
  p.d_model = 96;
  p.d_ff = 300;
  ModelSpec spec = OneLayer(p, rng);
  auto built = testing::BuildModel(spec);
  ASSERT_TRUE(built.ok()) << built.status();
  for (size_t tokens : {1, 7, 64}) {
    const std::vector<float> input = Rng(9).Vec(tokens * 96, 2.0f);
    auto one = testing::RunLayer(*built->model, "xnnpack", 0, input, tokens, 1);
    auto three = testing::RunLayer(*built->model, "xnnpack", 0, input, tokens, 3);
    ASSERT_TRUE(one.ok() && three.ok());
    testing::ExpectOutputsNear(*one, *three, tokens, 96, testing::kF32RelTol, "1 vs 3 threads");
  }
}

// --- MoE layers run through the internal reference, next to dense layers. ---
TEST(CpuMoeTest, MoeLayerMatchesReference) {
  testing::MoeParams moe;
  moe.num_experts = 4;
  moe.top_k = 2;
  moe.num_shared = 1;
  testing::MoeTester().d_model(19).d_ff(29).tokens(5).moe(moe).Test("xnnpack");
}

TEST(CpuMoeTest, MixedModelRunsEveryLayer) {
  Rng rng(10);
  FfnParams p;
  p.d_model = 21;
  p.d_ff = 40;
  ModelSpec spec = OneLayer(p, rng);
  LayerSpec moe_layer;
  moe_layer.kind = LayerKind::kMoe;
  testing::MoeParams moe;
  moe.num_experts = 3;
  moe.top_k = 1;
  moe.expert = p;
  moe_layer.moe = testing::RandomMoe(moe, rng);
  spec.layers.push_back(std::move(moe_layer));
  spec.layers.push_back(OneLayer(p, rng).layers[0]);
  auto built = testing::BuildModel(spec);
  ASSERT_TRUE(built.ok()) << built.status();
  const std::vector<float> input = rng.Vec(3 * 21, 1.0f);
  for (size_t layer = 0; layer < 3; ++layer) {
    auto want = testing::RunLayer(*built->model, "reference", layer, input, 3);
    auto got = testing::RunLayer(*built->model, "xnnpack", layer, input, 3);
    ASSERT_TRUE(want.ok() && got.ok());
    testing::ExpectOutputsNear(*want, *got, 3, 21, testing::kF32RelTol,
                               absl::StrFormat("layer %d", layer));
  }
}

// --- A file-backed model: the backend releases the mapped weight pages after packing, and two
// sessions on one model both work (the second re-reads the released pages). ---
TEST(CpuFileTest, ReleasesPagesAndStillMatches) {
  Rng rng(12);
  FfnParams p;
  p.d_model = 40;
  p.d_ff = 100;
  ModelSpec spec = OneLayer(p, rng);
  const std::string path = absl::StrFormat("%s/xnnpack_test_%d.fflite", ::testing::TempDir(),
                                           static_cast<int>(getpid()));
  ASSERT_TRUE(WriteModelFile(spec, WriteOptions(), path).ok());
  auto model = Model::LoadFile(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<float> input = rng.Vec(4 * 40, 1.0f);
  auto first = testing::RunLayer(**model, "xnnpack", 0, input, 4);
  auto second = testing::RunLayer(**model, "xnnpack", 0, input, 4);
  auto want = testing::RunLayer(**model, "reference", 0, input, 4);
  ASSERT_TRUE(first.ok() && second.ok() && want.ok());
  testing::ExpectOutputsNear(*want, *first, 4, 40, testing::kF32RelTol, "first session");
  testing::ExpectOutputsNear(*want, *second, 4, 40, testing::kF32RelTol, "second session");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace fflite
