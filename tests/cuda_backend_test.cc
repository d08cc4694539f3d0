// The cuda backend beyond the conformance suite: what it says without a GPU (tested everywhere it
// is built), and on a GPU the device-pointer runs (session stream and a caller's stream, equal to
// the host-pointer run), refused host pointers, the device's name, quantised weights (dequantised
// on upload and kept quantised, FFLITE_CUDA_QUANT) and larger layers that take cuBLAS's
// tensor-core paths. GPU cases are skipped with the reason without one.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernels.h"
#include "gtest/gtest.h"
#include "session/session.h"
#include "testing/model_builder.h"
#include "testing/moe_variants.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::FfnTester;
using testing::MoeTester;
using testing::Rng;

#define SKIP_WITHOUT_GPU()                                                   \
  do {                                                                       \
    std::string why_;                                                        \
    if (!CudaBackendAvailable(&why_)) GTEST_SKIP() << "no usable GPU: " << why_; \
  } while (0)

#define ASSERT_STATUS_OK(expr)                \
  do {                                        \
    const absl::Status status_ = (expr);      \
    ASSERT_TRUE(status_.ok()) << status_;     \
  } while (0)

// A dense SwiGLU layer (pre-RMSNorm, residual) and a Qwen2-MoE-like layer, f32.
testing::LoadedModel TwoLayerModel(uint32_t d) {
  Rng rng(5);
  ModelSpec spec;
  spec.d_model = d;
  testing::FfnParams f;
  f.d_model = d;
  f.d_ff = 3 * d + 5;
  f.activation = Activation::SILU;
  f.gated = true;
  LayerSpec dense;
  dense.ffn = testing::RandomFfn(f, rng);
  dense.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng);
  dense.residual = true;
  spec.layers.push_back(std::move(dense));
  testing::MoeParams p = testing::ParamsFor(testing::Variant::kQwen2Moe);
  p.expert = f;
  LayerSpec moe;
  moe.kind = LayerKind::kMoe;
  moe.moe = testing::RandomMoe(p, rng);
  spec.layers.push_back(std::move(moe));
  auto built = testing::BuildModel(spec);
  EXPECT_TRUE(built.ok()) << built.status();
  return std::move(*built);
}

TEST(CudaBackendTest, WithoutAGpuSessionsAreUnavailableWithTheReason) {
  std::string why;
  if (CudaBackendAvailable(&why)) GTEST_SKIP() << "a GPU is here: the GPU cases cover it";
  EXPECT_FALSE(why.empty());
  testing::LoadedModel m = TwoLayerModel(16);
  SessionOptions options;
  options.backend = "cuda";
  auto session = Session::Create(*m.model, options);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(session.status().message().find(why), std::string::npos) << session.status();
  // auto passes over it.
  options.backend = "auto";
  auto fallback = Session::Create(*m.model, options);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_STRNE((*fallback)->backend_name(), "cuda");
}

// cuBLAS is opened on first use: the library this build found, with every entry point the
// backend calls (a misspelt symbol fails here, GPU or not).
TEST(CudaBackendTest, CublasOpensWithEveryEntryPoint) {
  std::string why;
  EXPECT_TRUE(CublasLoads(&why)) << why;
}

TEST(CudaBackendTest, ExpertBudgetIsRefusedWithItsName) {
  testing::LoadedModel m = TwoLayerModel(16);
  BackendConfig config;
  config.max_tokens = 4;
  config.expert_budget_bytes = 1 << 20;
  auto backend = CreateCudaBackend(*m.model, config);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.status().message().find("expert_budget_bytes"), std::string::npos);
}

// --- On a GPU. ---

TEST(CudaBackendTest, AutoChoosesTheGpuAndFallsBackWhereItRefuses) {
  SKIP_WITHOUT_GPU();
  testing::LoadedModel m = TwoLayerModel(16);
  SessionOptions options;
  options.backend = "auto";
  auto session = Session::Create(*m.model, options);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_STREQ((*session)->backend_name(), "cuda");
  // cuda refuses an expert budget; auto then takes the next backend that takes it.
  options.expert_budget_bytes = 1 << 20;
  auto fallback = Session::Create(*m.model, options);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_STRNE((*fallback)->backend_name(), "cuda");
}

// Device memory by the CUDA runtime itself, as a caller of fflite_session_run_device has it.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    ptr = static_cast<float*>(p);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  float* ptr;
};

// A copy between host and device memory (either way); OK or the CUDA error's name.
absl::Status CudaCopy(void* to, const void* from, size_t bytes, bool to_device) {
  const cudaError_t e =
      cudaMemcpy(to, from, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? absl::OkStatus() : absl::InternalError(cudaGetErrorName(e));
}

TEST(CudaBackendTest, DeviceRunsEqualHostRunsOnBothStreams) {
  SKIP_WITHOUT_GPU();
  const uint32_t d = 64;
  const size_t tokens = 37;
  testing::LoadedModel m = TwoLayerModel(d);
  SessionOptions options;
  options.backend = "cuda";
  options.max_tokens = tokens;
  auto session = Session::Create(*m.model, options);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_NE(std::string((*session)->device()).find("sm_"), std::string::npos)
      << (*session)->device();
  Rng rng(9);
  const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
  const size_t bytes = input.size() * sizeof(float);
  DeviceBuffer in(bytes), out(bytes);
  ASSERT_TRUE(CudaCopy(in.ptr, input.data(), bytes, true).ok());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (size_t layer = 0; layer < 2; ++layer) {
    for (size_t n : {size_t{1}, size_t{5}, tokens}) {
      std::vector<float> want(n * d), got(n * d), got_stream(n * d);
      ASSERT_STATUS_OK((*session)->Run(layer, input.data(), n, want.data()));
      ASSERT_STATUS_OK((*session)->RunDevice(layer, in.ptr, n, out.ptr, nullptr));
      ASSERT_TRUE(CudaCopy(got.data(), out.ptr, n * d * sizeof(float), false).ok());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), n * d * sizeof(float)), 0)
          << "layer " << layer << ", " << n << " tokens";
      ASSERT_EQ(cudaMemsetAsync(out.ptr, 0, bytes, stream), cudaSuccess);
      ASSERT_STATUS_OK((*session)->RunDevice(layer, in.ptr, n, out.ptr, stream));
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      ASSERT_TRUE(CudaCopy(got_stream.data(), out.ptr, n * d * sizeof(float), false).ok());
      EXPECT_EQ(std::memcmp(want.data(), got_stream.data(), n * d * sizeof(float)), 0)
          << "caller's stream, layer " << layer << ", " << n << " tokens";
    }
  }
  cudaStreamDestroy(stream);
  // Device pointers need not be 16-byte aligned (the kernels' vector loads then fall back): one
  // float past the allocation's start, against the host run of the same input.
  for (size_t layer = 0; layer < 2; ++layer) {
    for (size_t n : {size_t{1}, size_t{3}}) {
      std::vector<float> want(n * d), got(n * d);
      ASSERT_STATUS_OK((*session)->Run(layer, input.data() + 1, n, want.data()));
      ASSERT_STATUS_OK((*session)->RunDevice(layer, in.ptr + 1, n, out.ptr + 1, nullptr));
      ASSERT_TRUE(CudaCopy(got.data(), out.ptr + 1, n * d * sizeof(float), false).ok());
      testing::ExpectOutputsNear(want, got, n, d, testing::kF32RelTol,
                                 "unaligned device pointers, layer " + std::to_string(layer));
    }
  }
  // Host pointers are refused by the device-pointer run.
  std::vector<float> host_out(d);
  const absl::Status st = (*session)->RunDevice(0, input.data(), 1, out.ptr, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("not device memory"), std::string::npos) << st;
  EXPECT_EQ((*session)->RunDevice(0, in.ptr, 1, host_out.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// The device's routing kernels against route::Route on the host, on logits with many ties and
// NaNs: the same experts in the same order, the weights to double rounding (the device's exp
// may differ from the host's in the last bit).
TEST(CudaBackendTest, RoutingMatchesTheHostsRoute) {
  SKIP_WITHOUT_GPU();
  const size_t n = 67;
  for (uint32_t experts : {7u, 60u, 160u}) {
    for (uint8_t scoring : {route::kSoftmax, route::kSigmoid}) {
      for (bool bias : {false, true}) {
        route::Params p{};
        p.num_experts = experts;
        p.top_k = 4;
        p.scoring = scoring;
        p.group_scoring = route::kGroupHighest;
        p.normalize_top_k = bias ? 1 : 0;
        p.n_group = 1;
        p.topk_group = 1;
        p.routed_scaling_factor = bias ? 2.5 : 1.0;
        Rng rng(experts + scoring);
        std::vector<float> logits(n * experts);
        for (size_t i = 0; i < logits.size(); ++i) {
          logits[i] = static_cast<float>(static_cast<int>(rng.Uniform(0.0f, 6.0f))) * 0.5f;  // ties
        }
        logits[3 * experts + 5] = NAN;  // token 3: a NaN among the logits
        logits[4 * experts] = NAN;      // token 4: logits[0] is NaN
        std::vector<double> correction(experts);
        for (double& c : correction) c = bias ? 0.25 * static_cast<int>(rng.Uniform(0.0f, 3.0f)) : 0.0;
        DeviceBuffer d_logits(logits.size() * sizeof(float));
        DeviceBuffer d_bias(experts * sizeof(double));
        DeviceBuffer d_scratch(n * cuda::RouteScratchBytes(p));
        DeviceBuffer d_experts(n * p.top_k * sizeof(uint32_t));
        DeviceBuffer d_weights(n * p.top_k * sizeof(double));
        ASSERT_TRUE(CudaCopy(d_logits.ptr, logits.data(), logits.size() * 4, true).ok());
        ASSERT_TRUE(CudaCopy(d_bias.ptr, correction.data(), experts * 8, true).ok());
        route::Params dp = p;
        if (bias) dp.score_correction_bias = reinterpret_cast<const double*>(d_bias.ptr);
        ASSERT_EQ(cuda::Route(dp, d_logits.ptr, n, d_scratch.ptr,
                              reinterpret_cast<uint32_t*>(d_experts.ptr),
                              reinterpret_cast<double*>(d_weights.ptr), nullptr),
                  cudaSuccess);
        std::vector<uint32_t> got_e(n * p.top_k);
        std::vector<double> got_w(n * p.top_k);
        ASSERT_TRUE(CudaCopy(got_e.data(), d_experts.ptr, got_e.size() * 4, false).ok());
        ASSERT_TRUE(CudaCopy(got_w.data(), d_weights.ptr, got_w.size() * 8, false).ok());
        route::Params hp = p;
        if (bias) hp.score_correction_bias = correction.data();
        std::vector<double> d(3 * experts + 1);
        std::vector<uint8_t> b(experts + 1);
        for (size_t t = 0; t < n; ++t) {
          std::vector<double> lg(logits.begin() + t * experts, logits.begin() + (t + 1) * experts);
          const route::Scratch sc{d.data(), d.data() + experts, d.data() + 2 * experts, b.data(),
                                  b.data() + experts};
          uint32_t want_e[4];
          double want_w[4];
          route::Route(hp, lg.data(), sc, want_e, want_w);
          for (uint32_t j = 0; j < p.top_k; ++j) {
            const std::string what = "experts " + std::to_string(experts) + ", scoring " +
                                     std::to_string(scoring) + ", bias " + std::to_string(bias) +
                                     ", token " + std::to_string(t) + ", choice " +
                                     std::to_string(j);
            EXPECT_EQ(got_e[t * p.top_k + j], want_e[j]) << what;
            const double w = want_w[j], g = got_w[t * p.top_k + j];
            if (std::isnan(w)) {
              EXPECT_TRUE(std::isnan(g)) << what;
            } else {
              EXPECT_NEAR(g, w, 1e-14 * std::fabs(w)) << what;
            }
          }
        }
      }
    }
  }
}

// FFLITE_CUDA_QUANT set for a scope (sessions read it at creation), then unset.
class QuantEnv {
 public:
  explicit QuantEnv(const char* value) { setenv("FFLITE_CUDA_QUANT", value, 1); }
  ~QuantEnv() { unsetenv("FFLITE_CUDA_QUANT"); }
};

// i8/i4 weights dequantised on upload (exactly), or kept quantised (their own gemv up to 8 tokens,
// dequantised rows for cuBLAS beyond; each weight the same f32 value): f32 tolerances apply.
// Rotated matrices are dequantised either way. d_model 72: not a multiple of 32 (the gemv's
// per-weight path for i4, 16-byte steps for i8); 64: the 16-byte steps.
TEST(CudaBackendTest, QuantisedWeightsMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const char* quant : {"f32", "packed"}) {
    QuantEnv env(quant);
    for (DType dtype : {DType::I8, DType::I4}) {
      for (bool rotate : {false, true}) {
        for (uint32_t d : {64u, 72u}) {
          for (size_t tokens : {size_t{1}, size_t{3}, size_t{8}, size_t{40}}) {
            SCOPED_TRACE(::testing::Message() << quant << " " << DTypeName(dtype) << " rotate "
                                            << rotate << " d " << d << " tokens " << tokens);
            FfnTester()
                .d_model(d)
                .d_ff(160)
                .tokens(tokens)
                .activation(Activation::SILU)
                .gated(true)
                .dtype(dtype)
                .rotate(rotate)
                .tolerance(testing::kF32RelTol)
                .Test("cuda");
          }
        }
      }
    }
  }
}

// The k-quants (d_model 256: whole super-blocks) kept quantised or dequantised on upload: q4_k
// (nibbles, a min per block), q6_k and q3_k (a byte per value, Q6_K's scales per 16), q5_k (a
// byte per value, a min per block), q2_k (Q6_K's scales and a min per 16). d_ff 512 keeps down
// a k-quant too; at 320 down falls back to i4 or i8 (mixed types in one FFN).
TEST(CudaBackendTest, KQuantWeightsMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const char* quant : {"f32", "packed"}) {
    QuantEnv env(quant);
    for (DType dtype : {DType::Q4_K, DType::Q6_K_PACKED, DType::Q3_K_PACKED, DType::Q5_K_PACKED,
                        DType::Q2_K_PACKED}) {
      for (uint32_t ff : {512u, 320u}) {
        for (size_t tokens : {size_t{1}, size_t{3}, size_t{8}, size_t{40}}) {
          SCOPED_TRACE(::testing::Message() << quant << " " << DTypeName(dtype) << " d_ff " << ff
                                            << " tokens " << tokens);
          FfnTester()
              .d_model(256)
              .d_ff(ff)
              .tokens(tokens)
              .activation(Activation::SILU)
              .gated(true)
              .dtype(dtype)
              .tolerance(testing::kF32RelTol)
              .Test("cuda");
        }
      }
    }
  }
}

// Kept quantised, a product of many tokens dequantises at most 64 MiB of f32 rows at a time: up
// (8200 x 2048) and down (2048 x 8200) are 67 MB each, so each goes in two chunks (Q4_K: up and
// gate; its down, 8200 columns, falls back to I4).
TEST(CudaBackendTest, PackedPrefillInChunksMatchesReference) {
  SKIP_WITHOUT_GPU();
  QuantEnv env("packed");
  for (DType dtype : {DType::I8, DType::I4, DType::Q4_K}) {
    FfnTester()
        .d_model(2048)
        .d_ff(8200)
        .tokens(40)
        .activation(Activation::SILU)
        .gated(true)
        .dtype(dtype)
        .tolerance(testing::kF32RelTol)
        .Test("cuda");
  }
}

// Quantised MoE experts kept quantised: up to 8 tokens on the fused decode (its kernels read the
// codes with the decode gemv's loop), more on the grouped path. The k-quants need whole
// super-blocks (d_model 256): Mixtral's experts are all of the type (the fused kernels on q4_k and
// q6_k throughout); Qwen2-MoE's at d_ff 320 and its shared expert (d_ff 53) have their down in i4,
// so the fused kernels take q4_k up/gate and i4 down (as a GGUF Q4_K_M's Q4_K and Q6_K experts).
TEST(CudaBackendTest, PackedQuantisedMoeMatchesReference) {
  SKIP_WITHOUT_GPU();
  QuantEnv env("packed");
  struct Case {
    DType dtype;
    testing::Variant variant;
    uint32_t d, ff;
  };
  for (const Case& c : {Case{DType::I8, testing::Variant::kQwen2Moe, 64, 96},
                        Case{DType::I4, testing::Variant::kQwen2Moe, 64, 96},
                        Case{DType::Q4_K, testing::Variant::kMixtral, 256, 256},
                        Case{DType::Q6_K_PACKED, testing::Variant::kMixtral, 256, 256},
                        Case{DType::Q4_K, testing::Variant::kQwen2Moe, 256, 320}}) {
    for (size_t tokens : {size_t{1}, size_t{5}, size_t{40}}) {
      MoeTester()
          .d_model(c.d)
          .d_ff(c.ff)
          .moe(testing::ParamsFor(c.variant))
          .tokens(tokens)
          .dtype(c.dtype)
          .tolerance(testing::kF32RelTol)
          .Test("cuda");
    }
  }
}

// A value of FFLITE_CUDA_QUANT that is neither f32 nor packed fails the creation, naming it.
TEST(CudaBackendTest, UnknownQuantModeIsRefusedByName) {
  QuantEnv env("int4");
  bool keep = false;
  const absl::Status status = CudaKeepsQuantised(&keep);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("FFLITE_CUDA_QUANT is 'int4'"), std::string::npos) << status;
}

// Every quantised matrix is dequantised for the upload at session creation, so a NaN scale (which
// the loader leaves to first use) fails the creation, naming the matrix, row and block.
TEST(CudaBackendTest, NanScaleFailsSessionCreationByName) {
  SKIP_WITHOUT_GPU();
  Rng rng(6);
  ModelSpec spec;
  spec.d_model = 32;
  testing::FfnParams f;
  f.d_model = 32;
  f.d_ff = 64;
  LayerSpec dense;
  dense.ffn = testing::RandomFfn(f, rng);
  spec.layers.push_back(std::move(dense));
  WriteOptions options;
  options.matrix_dtype = [](const std::string&, DType) { return DType::I4; };
  auto built = testing::BuildModel(spec, options);
  ASSERT_TRUE(built.ok()) << built.status();
  const TensorView& down = built->model->layers()[0].ffn.down;
  const uint16_t nan = 0x7e00;  // the first panel's scales come first: row 0 of block 0
  std::memcpy(built->bytes.data() + (down.data - built->bytes.data()), &nan, sizeof(nan));
  BackendConfig config;
  config.max_tokens = 4;
  auto backend = CreateCudaBackend(*built->model, config);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(backend.status().message().find("layers[0].ffn.down: the scale of row 0, block 0"),
            std::string::npos)
      << backend.status();
}

// Layers large enough for cuBLAS's tensor-core kernels (and several GEMV blocks per row).
TEST(CudaBackendTest, LargerLayersMatchReference) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (size_t tokens : {size_t{1}, size_t{130}}) {
      FfnTester()
          .d_model(512)
          .d_ff(1376)
          .tokens(tokens)
          .activation(Activation::SILU)
          .gated(true)
          .dtype(dtype)
          .norm(NormKind::RMS_NORM, NormPlacement::PRE)
          .residual(true)
          .Test("cuda");
    }
  }
  testing::MoeParams p = testing::ParamsFor(testing::Variant::kMixtral);
  MoeTester().d_model(256).d_ff(704).tokens(300).moe(p).dtype(DType::BF16).Test("cuda");
}

}  // namespace
}  // namespace fflite
