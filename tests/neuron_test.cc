// The FFN as key-value memory: neuron capture on every backend (the reference's h against h
// computed here from the weights; the others' against the reference's), and its arguments.
//
// Tolerances: h is an FFN's intermediate, computed by the same products and activations as the
// output, so a backend's h carries the same rounding as its output: testing::BackendRelTol
// (tolerances.h argues it), relative to each row's magnitude.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "session/session.h"
#include "testing/backends.h"
#include "testing/model_builder.h"
#include "testing/moe_variants.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::BackendName;
using testing::EveryBackend;
using testing::FfnParams;
using testing::MoeParams;
using testing::Rng;

// A TensorSource's f32 values (the builder's tensors are f32).
std::vector<float> Values(const TensorSource& t) {
  uint64_t n = 1;
  for (uint64_t s : t.shape) n *= s;
  std::vector<float> v(n);
  EXPECT_TRUE(t.fill(reinterpret_cast<uint8_t*>(v.data()), n * sizeof(float)).ok());
  return v;
}

// NaN: a value no run writes into a captured buffer, to see which entries were written.
constexpr float kUnwritten = std::numeric_limits<float>::quiet_NaN();

ModelSpec DenseModel(const FfnParams& p, Rng& rng, bool norm) {
  ModelSpec spec;
  spec.d_model = p.d_model;
  LayerSpec layer;
  layer.ffn = testing::RandomFfn(p, rng);
  if (norm) {
    layer.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, p.d_model, rng);
    layer.residual = true;
  }
  spec.layers.push_back(layer);
  return spec;
}

ModelSpec MoeModel(testing::Variant variant, uint32_t d, uint32_t ff, Rng& rng) {
  MoeParams p = testing::ParamsFor(variant);
  p.expert = FfnParams{d, ff, Activation::SILU, true, false};
  ModelSpec spec;
  spec.d_model = d;
  LayerSpec layer;
  layer.kind = LayerKind::kMoe;
  layer.moe = testing::RandomMoe(p, rng);
  layer.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng);
  layer.residual = true;
  spec.layers.push_back(layer);
  return spec;
}

// The reference's captured h equals h computed here, in double, from the spec's weights (no norm
// in front, so the FFN sees the input): act(up·x + b) or act(gate·x + b_g) ⊙ (up·x + b_u), times
// the neuron edits. Rows beyond the run's tokens are left alone.
TEST(NeuronCaptureTest, ReferenceCapturesTheHiddenActivations) {
  for (const bool gated : {false, true}) {
    const Activation act = gated ? Activation::SILU : Activation::RELU;
    const uint32_t d = 20, ff = 37;
    Rng rng(gated ? 3 : 4);
    const FfnParams p{d, ff, act, gated, /*bias=*/true};
    const ModelSpec spec = DenseModel(p, rng, /*norm=*/false);
    auto model = testing::BuildModel(spec);
    ASSERT_TRUE(model.ok()) << model.status();
    const size_t tokens = 3, max_tokens = 5;
    const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
    std::vector<float> scales(ff, 1.0f);
    scales[2] = 0.0f;
    scales[7] = -3.0f;

    SessionOptions so;
    so.backend = "reference";
    so.max_tokens = max_tokens;
    auto session = Session::Create(*model->model, so);
    ASSERT_TRUE(session.ok());
    std::vector<float> h(max_tokens * ff, kUnwritten), out(tokens * d);
    ASSERT_TRUE((*session)->SetCapture(0, h.data(), h.size(), nullptr, nullptr, 0).ok());
    ASSERT_TRUE((*session)->SetNeuronScales(0, -1, scales.data(), ff).ok());
    ASSERT_TRUE((*session)->Run(0, input.data(), tokens, out.data()).ok());

    const FfnSpec& f = spec.layers[0].ffn;
    const std::vector<float> up = Values(f.up), bu = Values(f.up_bias);
    const std::vector<float> gate = gated ? Values(f.gate) : std::vector<float>();
    const std::vector<float> bg = gated ? Values(f.gate_bias) : std::vector<float>();
    std::vector<float> want(tokens * ff);
    for (size_t t = 0; t < tokens; ++t) {
      for (size_t i = 0; i < ff; ++i) {
        double u = bu[i], g = gated ? bg[i] : 0.0;
        for (size_t c = 0; c < d; ++c) {
          u += static_cast<double>(up[i * d + c]) * input[t * d + c];
          if (gated) g += static_cast<double>(gate[i * d + c]) * input[t * d + c];
        }
        const double silu_g = g / (1.0 + std::exp(-g));
        const double v = gated ? silu_g * u : (u > 0.0 ? u : 0.0);
        want[t * ff + i] = static_cast<float>(v * scales[i]);
      }
    }
    const std::vector<float> got(h.begin(), h.begin() + tokens * ff);
    testing::ExpectOutputsNear(want, got, tokens, ff, testing::kF32RelTol,
                               gated ? "SwiGLU" : "ReLU");
    for (size_t i = tokens * ff; i < h.size(); ++i) {
      ASSERT_TRUE(std::isnan(h[i])) << "h[" << i << "] was written beyond the run's tokens";
    }
  }
}

// Each backend's h, routing and output against the reference's: dense layers through every path
// (few tokens, many split among threads, fused ReLU, f16/bf16), MoE layers of every routing
// variant.
class NeuronCaptureBackendTest : public ::testing::TestWithParam<std::string> {};

// Runs `tokens` tokens of layer 0 on `backend` with capture of h (and routing for MoE).
struct Captured {
  std::vector<float> h, weights, out;
  std::vector<int32_t> experts;
};

Captured RunCaptured(const Model& model, const std::string& backend, const std::vector<float>& in,
                     size_t tokens, int threads, size_t h_per_token, uint32_t top_k) {
  SessionOptions so;
  so.backend = backend;
  so.max_tokens = tokens;
  so.num_threads = threads;
  auto session = Session::Create(model, so);
  EXPECT_TRUE(session.ok()) << session.status();
  Captured c;
  c.h.assign(tokens * h_per_token, kUnwritten);
  c.out.resize(tokens * model.d_model());
  const bool moe = model.layers()[0].kind == LayerKind::kMoe;
  if (moe) {
    c.experts.assign(tokens * top_k, -1);
    c.weights.assign(tokens * top_k, kUnwritten);
  }
  if (!session.ok()) return c;
  EXPECT_TRUE((*session)
                  ->SetCapture(0, c.h.data(), c.h.size(), moe ? c.experts.data() : nullptr,
                               moe ? c.weights.data() : nullptr, c.experts.size())
                  .ok());
  EXPECT_TRUE((*session)->Run(0, in.data(), tokens, c.out.data()).ok());
  return c;
}

TEST_P(NeuronCaptureBackendTest, DenseCaptureMatchesReference) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  if (backend == "reference") GTEST_SKIP() << "the reference is the other side of this test";
  struct Case {
    Activation act;
    bool gated;
    DType dtype;
    size_t tokens;
    int threads;
  };
  const Case cases[] = {
      {Activation::RELU, false, DType::F32, 1, 1},  // ReLU fused into the up product
      {Activation::SILU, true, DType::BF16, 1, 1},  // the direct kernel on the file's rows
      {Activation::GELU_TANH, true, DType::F16, 5, 3},
      {Activation::RELU, true, DType::F32, 130, 2},  // many tokens split among threads
      {Activation::GELU_ERF, false, DType::BF16, 70, 1},
      {Activation::SIGMOID, true, DType::F32, 2, 1},
      {Activation::RELU, true, DType::BF16, 3, 2},  // ReGLU on the direct path: up listed
  };
  const uint32_t d = 64, ff = 150;
  uint32_t seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrFormat("%s %s %s, %d tokens, %d threads", ActivationName(c.act),
                                 c.gated ? "gated" : "plain", DTypeName(c.dtype), c.tokens,
                                 c.threads));
    Rng rng(seed++);
    const ModelSpec spec = DenseModel(FfnParams{d, ff, c.act, c.gated, true}, rng, true);
    WriteOptions options;
    options.dtype = c.dtype;
    auto model = testing::BuildModel(spec, options);
    ASSERT_TRUE(model.ok()) << model.status();
    const std::vector<float> input = rng.Vec(c.tokens * d, 1.0f);
    const Captured want = RunCaptured(*model->model, "reference", input, c.tokens, 1, ff, 1);
    const Captured got = RunCaptured(*model->model, backend, input, c.tokens, c.threads, ff, 1);
    const double tol = testing::BackendRelTol(backend, c.dtype);
    testing::ExpectOutputsNear(want.h, got.h, c.tokens, ff, tol, backend + " h");
    testing::ExpectOutputsNear(want.out, got.out, c.tokens, d, tol, backend + " output");
  }
}

TEST_P(NeuronCaptureBackendTest, MoeCaptureMatchesReference) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  if (backend == "reference") GTEST_SKIP() << "the reference is the other side of this test";
  const uint32_t d = 48, ff = 40;
  uint32_t seed = 30;
  using testing::Variant;
  for (const Variant variant : {Variant::kMixtral, Variant::kQwen2Moe, Variant::kDeepseekV3,
                                Variant::kDeepseekV2, Variant::kRouterBias,
                                Variant::kSigmoidTop1}) {
    for (const size_t tokens : {size_t{1}, size_t{37}}) {
      SCOPED_TRACE(absl::StrFormat("%s, %d tokens", testing::VariantName(variant), tokens));
      Rng rng(seed++);
      const ModelSpec spec = MoeModel(variant, d, ff, rng);
      auto model = testing::BuildModel(spec);
      ASSERT_TRUE(model.ok()) << model.status();
      const uint32_t k = spec.layers[0].moe.top_k;
      const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
      const Captured want = RunCaptured(*model->model, "reference", input, tokens, 1, k * ff, k);
      const Captured got = RunCaptured(*model->model, backend, input, tokens, 2, k * ff, k);
      // Random inputs leave no near-ties among the scores: the same experts in the same order.
      ASSERT_EQ(want.experts, got.experts);
      const double tol = testing::BackendRelTol(backend, DType::F32);
      testing::ExpectOutputsNear(want.weights, got.weights, tokens, k, tol, "weights");
      testing::ExpectOutputsNear(want.h, got.h, tokens * k, ff, tol, backend + " h");
      testing::ExpectOutputsNear(want.out, got.out, tokens, d, tol, backend + " output");
    }
  }
}

// Off means off: after clear nothing is written; a capture of routing only leaves h alone.
TEST_P(NeuronCaptureBackendTest, ClearStopsCaptureAndPartsAreOptional) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  const uint32_t d = 32, ff = 24;
  Rng rng(50);
  ModelSpec spec = DenseModel(FfnParams{d, ff}, rng, false);
  spec.layers.push_back(MoeModel(testing::Variant::kMixtral, d, ff, rng).layers[0]);
  auto model = testing::BuildModel(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  SessionOptions so;
  so.backend = backend;
  so.max_tokens = 4;
  auto session = Session::Create(*model->model, so);
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  const uint32_t k = spec.layers[1].moe.top_k;
  const std::vector<float> input = rng.Vec(4 * d, 1.0f);
  std::vector<float> out(4 * d), h(4 * ff, kUnwritten), moe_h(4 * k * ff, kUnwritten);
  std::vector<int32_t> experts(4 * k, -1);
  std::vector<float> weights(4 * k, kUnwritten);

  ASSERT_TRUE(s.SetCapture(0, h.data(), h.size(), nullptr, nullptr, 0).ok());
  ASSERT_TRUE(s.SetCapture(0, nullptr, 0, nullptr, nullptr, 0).ok());  // cleared
  ASSERT_TRUE(s.Run(0, input.data(), 4, out.data()).ok());
  for (float v : h) ASSERT_TRUE(std::isnan(v)) << "written after the capture was cleared";

  // Routing only: the trace is written, no h.
  ASSERT_TRUE(s.SetCapture(1, nullptr, 0, experts.data(), weights.data(), experts.size()).ok());
  ASSERT_TRUE(s.Run(1, input.data(), 4, out.data()).ok());
  for (int32_t e : experts) EXPECT_TRUE(e >= 0 && e < 8) << e;
  for (float w : weights) EXPECT_TRUE(std::isfinite(w));
  // h only: the trace is not written.
  std::fill(experts.begin(), experts.end(), -1);
  ASSERT_TRUE(s.SetCapture(1, moe_h.data(), moe_h.size(), nullptr, nullptr, 0).ok());
  ASSERT_TRUE(s.Run(1, input.data(), 4, out.data()).ok());
  for (int32_t e : experts) EXPECT_EQ(e, -1);
  for (float v : moe_h) ASSERT_FALSE(std::isnan(v)) << "an h row was not written";
}

// Bad arguments get a status naming the problem.
TEST_P(NeuronCaptureBackendTest, BadArgumentsAreRefused) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  const uint32_t d = 16, ff = 24;
  Rng rng(60);
  ModelSpec spec = DenseModel(FfnParams{d, ff}, rng, false);
  spec.layers.push_back(MoeModel(testing::Variant::kMixtral, d, ff, rng).layers[0]);
  auto model = testing::BuildModel(spec);
  ASSERT_TRUE(model.ok());
  SessionOptions so;
  so.backend = backend;
  so.max_tokens = 10;
  auto session = Session::Create(*model->model, so);
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  const uint32_t k = spec.layers[1].moe.top_k;
  std::vector<float> h(10 * k * ff), w(10 * k);
  std::vector<int32_t> e(10 * k);
  auto expect = [](const absl::Status& st, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(text), std::string::npos) << st;
  };
  expect(s.SetCapture(0, h.data(), 10 * ff - 1, nullptr, nullptr, 0),
         absl::StatusCode::kInvalidArgument, absl::StrFormat("needs %d floats", 10 * ff));
  expect(s.SetCapture(0, h.data(), h.size(), e.data(), w.data(), e.size()),
         absl::StatusCode::kInvalidArgument, "dense");
  expect(s.SetCapture(1, h.data(), 10 * k * ff - 1, nullptr, nullptr, 0),
         absl::StatusCode::kInvalidArgument, absl::StrFormat("needs %d floats", 10 * k * ff));
  expect(s.SetCapture(1, nullptr, 0, e.data(), nullptr, e.size()),
         absl::StatusCode::kInvalidArgument, "weights is null");
  expect(s.SetCapture(1, nullptr, 0, e.data(), w.data(), e.size() - 1),
         absl::StatusCode::kInvalidArgument, absl::StrFormat("needs %d entries", 10 * k));
  expect(s.SetCapture(2, h.data(), h.size(), nullptr, nullptr, 0), absl::StatusCode::kOutOfRange,
         "2 layers");
}

INSTANTIATE_TEST_SUITE_P(All, NeuronCaptureBackendTest, ::testing::ValuesIn(EveryBackend()),
                         BackendName);

// --- Sparse decode: down stored as value rows, only the rows of firing neurons read. ---

// A ReLU-family FFN (ReLU, or ReGLU when gated) whose neurons are silent for every token with
// probability `silent`: their pre-activation bias is -100 (the activated one: gate when gated).
FfnSpec SilencedFfn(uint32_t d, uint32_t ff, bool gated, double silent, Rng& rng) {
  FfnSpec f = testing::RandomFfn(FfnParams{d, ff, Activation::RELU, gated, true}, rng);
  std::vector<float> b = rng.Vec(ff, 0.5f);
  for (uint32_t i = 0; i < ff; ++i) {
    if (rng.Uniform(0.0f, 1.0f) < silent) b[i] = -100.0f;
  }
  (gated ? f.gate_bias : f.up_bias) = TensorFromF32({ff}, std::move(b));
  return f;
}

WriteOptions ValueRowsOptions(DType dtype, bool value_rows) {
  WriteOptions options;
  options.dtype = dtype;
  if (value_rows) options.down_value_rows = [](const std::string&, const FfnSpec&) { return true; };
  return options;
}

class SparseDecodeTest : public ::testing::TestWithParam<std::string> {};

// The value-row model on `backend` equals the reference on the row-major model (the reference on
// value rows is the same sums in the same order: equal bits), at sparsities from none to every
// neuron silent, through the direct path (few tokens) and the packed one (many).
TEST_P(SparseDecodeTest, ValueRowsEqualRowMajorReference) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  const uint32_t d = 72, ff = 200;
  uint32_t seed = 70;
  for (const double silent : {0.0, 0.5, 0.9, 0.999, 1.0}) {
    for (const bool gated : {false, true}) {
      for (const DType dtype : {DType::F32, DType::BF16}) {
        Rng rng(seed++);
        ModelSpec spec;
        spec.d_model = d;
        LayerSpec layer;
        layer.ffn = SilencedFfn(d, ff, gated, silent, rng);
        layer.norm = testing::RandomNorm(NormKind::LAYER_NORM, NormPlacement::PRE, d, rng);
        layer.residual = true;
        spec.layers.push_back(layer);
        auto rows_model = testing::BuildModel(spec, ValueRowsOptions(dtype, true));
        auto plain_model = testing::BuildModel(spec, ValueRowsOptions(dtype, false));
        ASSERT_TRUE(rows_model.ok() && plain_model.ok()) << rows_model.status();
        ASSERT_TRUE(rows_model->model->layers()[0].ffn.down.value_rows());
        for (const size_t tokens : {size_t{1}, size_t{3}, size_t{40}}) {
          SCOPED_TRACE(absl::StrFormat("silent %g, %s, %s, %d tokens", silent,
                                       gated ? "ReGLU" : "ReLU", DTypeName(dtype), tokens));
          const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
          auto want = testing::RunLayer(*plain_model->model, "reference", 0, input, tokens);
          ASSERT_TRUE(want.ok());
          SessionOptions so;
          so.backend = backend;
          so.max_tokens = tokens;
          so.num_threads = tokens == 3 ? 2 : 1;
          auto session = Session::Create(*rows_model->model, so);
          ASSERT_TRUE(session.ok()) << session.status();
          std::vector<float> got(tokens * d);
          ASSERT_TRUE((*session)->Run(0, input.data(), tokens, got.data()).ok());
          if (backend == "reference") {
            ASSERT_EQ(std::memcmp(want->data(), got.data(), got.size() * sizeof(float)), 0);
          } else {
            testing::ExpectOutputsNear(*want, got, tokens, d,
                                       testing::BackendRelTol(backend, dtype), backend);
          }
        }
      }
    }
  }
}

// Routed experts with value rows (ReLU experts): the same against the row-major reference.
TEST_P(SparseDecodeTest, MoeExpertsWithValueRows) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  const uint32_t d = 48, ff = 64;
  Rng rng(90);
  MoeParams p = testing::ParamsFor(testing::Variant::kMixtral);
  p.expert = FfnParams{d, ff, Activation::RELU, false, true};
  ModelSpec spec;
  spec.d_model = d;
  LayerSpec layer;
  layer.kind = LayerKind::kMoe;
  layer.moe = testing::RandomMoe(p, rng);
  for (FfnSpec& e : layer.moe.experts) e = SilencedFfn(d, ff, false, 0.8, rng);
  spec.layers.push_back(layer);
  auto rows_model = testing::BuildModel(spec, ValueRowsOptions(DType::F32, true));
  auto plain_model = testing::BuildModel(spec, ValueRowsOptions(DType::F32, false));
  ASSERT_TRUE(rows_model.ok() && plain_model.ok());
  for (const size_t tokens : {size_t{1}, size_t{37}}) {
    const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
    auto want = testing::RunLayer(*plain_model->model, "reference", 0, input, tokens);
    auto got = testing::RunLayer(*rows_model->model, backend, 0, input, tokens);
    ASSERT_TRUE(want.ok() && got.ok());
    testing::ExpectOutputsNear(*want, *got, tokens, d, testing::BackendRelTol(backend, DType::F32),
                               absl::StrFormat("%s, %d tokens", backend, tokens));
  }
}

// xnnpack reads only the rows of the neurons that fire, and the list gives the bits of every row:
// the backend forced to the list (dense fraction 1) equals it forced to every row (0) bitwise,
// and counts exactly the firing neurons as read (an all-silent token reads none).
TEST(SparseDecodeXnnpackTest, ListedRowsEqualEveryRowBitwise) {
  SKIP_UNLESS_AVAILABLE("xnnpack");
  const uint32_t d = 96, ff = 320;
  for (const double silent : {0.0, 0.9, 1.0}) {
    Rng rng(static_cast<uint32_t>(100 + silent * 10));
    ModelSpec spec;
    spec.d_model = d;
    LayerSpec layer;
    layer.ffn = SilencedFfn(d, ff, true, silent, rng);
    spec.layers.push_back(layer);
    auto model = testing::BuildModel(spec, ValueRowsOptions(DType::BF16, true));
    ASSERT_TRUE(model.ok());
    const size_t tokens = 2;
    const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
    std::vector<std::vector<float>> outs;
    std::vector<BackendStats> reads;
    for (const double fraction : {1.0, 0.0}) {
      CpuBackendOptions options;
      options.value_rows_dense_fraction = fraction;
      BackendConfig config;
      config.max_tokens = tokens;
      config.num_threads = 2;
      auto backend = CreateCpuBackendWithOptions(*model->model, config, options);
      ASSERT_TRUE(backend.ok()) << backend.status();
      outs.emplace_back(tokens * d);
      ASSERT_TRUE((*backend)->Run(0, input.data(), tokens, outs.back().data()).ok());
      reads.push_back((*backend)->Stats());
    }
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0)
        << "silent " << silent;
    // The firing neurons, from the reference's captured h of the same tokens.
    SessionOptions so;
    so.backend = "reference";
    so.max_tokens = tokens;
    auto session = Session::Create(*model->model, so);
    ASSERT_TRUE(session.ok());
    std::vector<float> h(tokens * ff), out(tokens * d);
    ASSERT_TRUE((*session)->SetCapture(0, h.data(), h.size(), nullptr, nullptr, 0).ok());
    ASSERT_TRUE((*session)->Run(0, input.data(), tokens, out.data()).ok());
    uint64_t firing = 0;
    for (uint32_t i = 0; i < ff; ++i) firing += h[i] != 0.0f || h[ff + i] != 0.0f;
    const uint64_t padded = model->model->layers()[0].ffn.d_ff_padded;
    EXPECT_EQ(reads[0].value_rows_read, firing) << "silent " << silent;
    // ReGLU: up computed for the neurons whose gate fired (those whose h is nonzero here).
    EXPECT_EQ(reads[0].up_rows_read, firing) << "silent " << silent;
    EXPECT_EQ(reads[0].up_rows_total, padded);
    EXPECT_EQ(reads[1].up_rows_total, 0u) << "dense fraction 0 computes up whole";
    EXPECT_EQ(reads[0].value_rows_total, padded);
    EXPECT_EQ(reads[1].value_rows_read, padded);
    if (silent == 1.0) {
      EXPECT_EQ(firing, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SparseDecodeTest, ::testing::ValuesIn(EveryBackend()), BackendName);

}  // namespace
}  // namespace fflite
