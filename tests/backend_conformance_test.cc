// Every registered backend (but the reference, the oracle) against the reference on the same
// cases: every activation, gated or not, biases, norms before and after, residual, f32/f16/bf16,
// odd and prime shapes padded or not, 1 to 300 tokens; MoE with every routing variant, idle
// experts, all tokens on one expert, exact ties and NaN inputs. A backend that is built but cannot
// run here (cuda without a GPU) has its cases skipped with the reason in the log.
//
// Tolerances: testing::BackendRelTol (tolerances.h argues each). Options a backend lacks are left
// at their defaults for it: threads only matter to the CPU backends, and expert budgets are
// swept only where the backend takes one (xnnpack; cuda refuses a budget and keeps every expert).
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "base/half.h"
#include "gtest/gtest.h"
#include "kernels/quant_kernels.h"
#include "session/session.h"
#include "testing/backends.h"
#include "testing/model_builder.h"
#include "testing/moe_variants.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::BackendName;
using testing::BackendsUnderTest;
using testing::EveryBackend;
using testing::FfnParams;
using testing::FfnTester;
using testing::MoeParams;
using testing::MoeTester;
using testing::ParamsFor;
using testing::OneExpert;
using testing::Rng;
using testing::TakesBudget;
using testing::Variant;

constexpr Activation kActivations[] = {Activation::RELU, Activation::GELU_ERF,
                                       Activation::GELU_TANH, Activation::SILU,
                                       Activation::SIGMOID, Activation::SWIGLU_OAI};

// --- Dense: activation x gated x bias x norm/residual, small odd shapes. ---

enum class NormCase {
  kNone,
  kPreRmsResidual,
  kPostLayerNormResidual,
  kPreLayerNorm,
  kPostRms,
  kSandwichRmsResidual,  // Gemma 2/3: x + OutNorm(FFN(Norm(x)))
  kSandwichLayerNorm,
};

struct NormSetup {
  bool present;
  NormKind kind;
  NormPlacement placement;
  bool residual;
};

NormSetup NormSetupFor(NormCase c) {
  switch (c) {
    case NormCase::kPreRmsResidual: return {true, NormKind::RMS_NORM, NormPlacement::PRE, true};
    case NormCase::kPostLayerNormResidual:
      return {true, NormKind::LAYER_NORM, NormPlacement::POST, true};
    case NormCase::kPreLayerNorm: return {true, NormKind::LAYER_NORM, NormPlacement::PRE, false};
    case NormCase::kPostRms: return {true, NormKind::RMS_NORM, NormPlacement::POST, false};
    case NormCase::kSandwichRmsResidual:
      return {true, NormKind::RMS_NORM, NormPlacement::SANDWICH, true};
    case NormCase::kSandwichLayerNorm:
      return {true, NormKind::LAYER_NORM, NormPlacement::SANDWICH, false};
    default: return {false, NormKind::RMS_NORM, NormPlacement::PRE, false};
  }
}

using SweepParam = std::tuple<std::string, Activation, bool, bool, NormCase>;

class DenseSweepTest : public ::testing::TestWithParam<SweepParam> {};

TEST_P(DenseSweepTest, MatchesReference) {
  const auto [backend, activation, gated, bias, norm_case] = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  const NormSetup norm = NormSetupFor(norm_case);
  // Rotate dtypes, tokens and threads through the sweep so that every combination meets each.
  const size_t index =
      static_cast<size_t>(activation) * 28 + gated * 14 + bias * 7 + static_cast<size_t>(norm_case);
  const DType dtypes[] = {DType::F32, DType::F16, DType::BF16};
  const size_t tokens[] = {1, 2, 7, 13};
  FfnTester t;
  t.d_model(23).d_ff(41).activation(activation).gated(gated).bias(bias).residual(norm.residual);
  t.dtype(dtypes[index % 3]).tokens(tokens[index % 4]).threads(index % 2 == 0 ? 1 : 3);
  t.d_ff_alignment(index % 5 == 0 ? 1 : 64).seed(static_cast<uint32_t>(index + 1));
  if (norm.present) t.norm(norm.kind, norm.placement);
  t.Test(backend);
}

std::string SweepName(const ::testing::TestParamInfo<SweepParam>& info) {
  static const char* const kNorms[] = {"none",    "prerms_res",      "postln_res", "preln",
                                       "postrms", "sandwichrms_res", "sandwichln"};
  return absl::StrFormat("%s_%s_%s_%s_%s", std::get<0>(info.param),
                         ActivationName(std::get<1>(info.param)),
                         std::get<2>(info.param) ? "gated" : "plain",
                         std::get<3>(info.param) ? "bias" : "nobias",
                         kNorms[static_cast<int>(std::get<4>(info.param))]);
}

INSTANTIATE_TEST_SUITE_P(
    All, DenseSweepTest,
    ::testing::Combine(::testing::ValuesIn(BackendsUnderTest()), ::testing::ValuesIn(kActivations),
                       ::testing::Bool(), ::testing::Bool(),
                       ::testing::Values(NormCase::kNone, NormCase::kPreRmsResidual,
                                         NormCase::kPostLayerNormResidual, NormCase::kPreLayerNorm,
                                         NormCase::kPostRms, NormCase::kSandwichRmsResidual,
                                         NormCase::kSandwichLayerNorm)),
    SweepName);

// --- Dense shapes: odd and prime sizes, padded and not, 1 to 300 tokens, 1 and 3 threads. ---

struct Shape {
  uint32_t d_model, d_ff, alignment;
  size_t tokens;
};

using ShapeParam = std::tuple<std::string, Shape, int>;

std::string ShapeName(const ::testing::TestParamInfo<ShapeParam>& info) {
  const Shape& s = std::get<1>(info.param);
  return absl::StrFormat("%s_d%d_ff%d_align%d_t%d_threads%d", std::get<0>(info.param), s.d_model,
                         s.d_ff, s.alignment, s.tokens, std::get<2>(info.param));
}

class DenseShapeTest : public ::testing::TestWithParam<ShapeParam> {};

TEST_P(DenseShapeTest, MatchesReference) {
  const auto [backend, shape, threads] = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  for (bool gated : {false, true}) {
    FfnTester()
        .d_model(shape.d_model)
        .d_ff(shape.d_ff)
        .d_ff_alignment(shape.alignment)
        .tokens(shape.tokens)
        .threads(threads)
        .activation(gated ? Activation::SILU : Activation::GELU_ERF)
        .gated(gated)
        .bias(!gated)
        .norm(NormKind::RMS_NORM, NormPlacement::PRE)
        .residual(true)
        .Test(backend);
  }
}

constexpr Shape kDenseShapes[] = {
    {1, 1, 1, 1},      {2, 3, 64, 2},    {17, 53, 1, 7},     {31, 97, 64, 64},
    {61, 173, 1, 300}, {64, 128, 64, 5}, {97, 211, 64, 300}, {127, 257, 1, 2},
};

INSTANTIATE_TEST_SUITE_P(All, DenseShapeTest,
                         ::testing::Combine(::testing::ValuesIn(BackendsUnderTest()),
                                            ::testing::ValuesIn(kDenseShapes),
                                            ::testing::Values(1, 3)),
                         ShapeName);

// --- Sandwich layers (Gemma 2/3) on many tokens and threads: the CPU backend's token-split
// whole pass and its MoE finish. ---

class SandwichTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SandwichTest, ManyTokensMatchReference) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  for (size_t threads : {size_t{1}, size_t{3}}) {
    FfnTester()
        .d_model(61)
        .d_ff(173)
        .tokens(300)
        .threads(threads)
        .activation(Activation::GELU_TANH)
        .gated(true)
        .norm(NormKind::RMS_NORM, NormPlacement::SANDWICH)
        .residual(true)
        .Test(backend);
    MoeTester()
        .d_model(23)
        .d_ff(41)
        .tokens(300)
        .threads(threads)
        .moe(ParamsFor(Variant::kQwen2Moe))
        .activation(Activation::SILU)
        .gated(true)
        .norm(NormKind::LAYER_NORM, NormPlacement::SANDWICH)
        .residual(true)
        .Test(backend);
  }
}

INSTANTIATE_TEST_SUITE_P(All, SandwichTest, ::testing::ValuesIn(BackendsUnderTest()), BackendName);

// --- MoE: every routing variant x tokens; threads, budget, norm and dtype rotate. ---

using MoeSweepParam = std::tuple<std::string, Variant, size_t>;

class MoeSweepTest : public ::testing::TestWithParam<MoeSweepParam> {};

std::string MoeSweepName(const ::testing::TestParamInfo<MoeSweepParam>& info) {
  return absl::StrFormat("%s_%s_t%d", std::get<0>(info.param),
                         testing::VariantName(std::get<1>(info.param)), std::get<2>(info.param));
}

// Budgets (where the backend takes one): none, a single expert, below one expert (1 byte), half
// of the experts.
TEST_P(MoeSweepTest, MatchesReference) {
  const auto [backend, variant, tokens] = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  const size_t index = static_cast<size_t>(variant) * 7 + tokens;
  MoeParams p = ParamsFor(variant);
  const bool plain = variant == Variant::kRouterBias;
  const uint32_t d = 23, ff = 41;
  const uint64_t one = OneExpert(d, ff, !plain);
  const uint64_t budgets[] = {0, one, 1, one * p.num_experts / 2};
  MoeTester t;
  t.d_model(d).d_ff(ff).tokens(tokens).moe(p).seed(static_cast<uint32_t>(index + 1));
  t.activation(plain ? Activation::GELU_ERF : Activation::SILU).gated(!plain).bias(plain);
  t.threads(index % 2 == 0 ? 1 : 3);
  if (TakesBudget(backend)) t.expert_budget(budgets[index % 4]);
  if (index % 4 == 0) t.norm(NormKind::RMS_NORM, NormPlacement::PRE).residual(true);
  if (index % 4 == 1) t.norm(NormKind::LAYER_NORM, NormPlacement::POST).residual(true);
  if (index % 4 == 3) t.norm(NormKind::RMS_NORM, NormPlacement::SANDWICH).residual(true);
  if (index % 5 == 2) t.dtype(DType::BF16);
  t.Test(backend);
}

INSTANTIATE_TEST_SUITE_P(
    All, MoeSweepTest,
    ::testing::Combine(::testing::ValuesIn(BackendsUnderTest()),
                       ::testing::Values(Variant::kMixtral, Variant::kQwen2Moe,
                                         Variant::kDeepseekV3, Variant::kDeepseekV2,
                                         Variant::kRouterBias, Variant::kSigmoidTop1),
                       ::testing::Values(size_t{1}, size_t{2}, size_t{37}, size_t{300})),
    MoeSweepName);

// --- MoE shapes: odd and prime sizes, padded or not, 1 and 3 threads. ---

class MoeShapeTest : public ::testing::TestWithParam<ShapeParam> {};

TEST_P(MoeShapeTest, MatchesReference) {
  const auto [backend, shape, threads] = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  MoeTester()
      .d_model(shape.d_model)
      .d_ff(shape.d_ff)
      .d_ff_alignment(shape.alignment)
      .tokens(shape.tokens)
      .threads(threads)
      .moe(ParamsFor(Variant::kQwen2Moe))
      .norm(NormKind::RMS_NORM, NormPlacement::PRE)
      .residual(true)
      .Test(backend);
}

constexpr Shape kMoeShapes[] = {
    {1, 1, 1, 1}, {2, 3, 64, 5}, {17, 53, 1, 7}, {31, 97, 64, 129}, {61, 173, 1, 300},
};

INSTANTIATE_TEST_SUITE_P(All, MoeShapeTest,
                         ::testing::Combine(::testing::ValuesIn(BackendsUnderTest()),
                                            ::testing::ValuesIn(kMoeShapes),
                                            ::testing::Values(1, 3)),
                         ShapeName);

// --- Routing corner cases. ---

class MoeRoutingTest : public ::testing::TestWithParam<std::string> {};

// One token, top-1 of 16: fifteen experts receive nothing (and are never packed under a budget).
TEST_P(MoeRoutingTest, IdleExperts) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  MoeParams p;
  p.num_experts = 16;
  p.top_k = 1;
  for (uint64_t budget : {uint64_t{0}, OneExpert(19, 29, true)}) {
    if (budget != 0 && !TakesBudget(backend)) continue;
    MoeTester().d_model(19).d_ff(29).tokens(1).moe(p).expert_budget(budget).Test(backend);
  }
}

// A router bias of +50 on expert 5: every token goes there (top-1), or there and elsewhere
// (top-2). The batch of expert 5 is then the whole chunk (the path without a gather).
TEST_P(MoeRoutingTest, AllTokensOnOneExpert) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  for (uint32_t k : {1u, 2u}) {
    for (size_t tokens : {size_t{1}, size_t{37}, size_t{300}}) {
      MoeParams p;
      p.top_k = k;
      MoeTester()
          .d_model(21)
          .d_ff(33)
          .tokens(tokens)
          .threads(tokens == 37 ? 3 : 1)
          .moe(p)
          .expert_budget(tokens == 300 && TakesBudget(backend) ? OneExpert(21, 33, true) : 0)
          .customize([](MoeSpec* m) {
            std::vector<float> bias(8, 0.0f);
            bias[5] = 50.0f;
            m->router_bias = TensorFromF32({8}, bias);
          })
          .Test(backend);
    }
  }
}

// Exact ties: an all-zero router gives every expert the same score, so the lowest indices win in
// both backends; identical router rows 2 and 6 (both lifted by the same bias) tie at the top and
// expert 2 wins.
TEST_P(MoeRoutingTest, TiesGoToTheLowerIndex) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  MoeParams p;
  p.top_k = 3;
  MoeTester()
      .d_model(18)
      .d_ff(20)
      .tokens(9)
      .moe(p)
      .customize([](MoeSpec* m) {
        m->router = TensorFromF32({8, 18}, std::vector<float>(8 * 18));
      })
      .Test(backend);
  p.top_k = 1;
  MoeTester()
      .d_model(18)
      .d_ff(20)
      .tokens(11)
      .moe(p)
      .seed(4)
      .customize([](MoeSpec* m) {
        Rng rng(7);
        std::vector<float> w = rng.Vec(8 * 18, 0.3f);
        for (size_t i = 0; i < 18; ++i) w[6 * 18 + i] = w[2 * 18 + i];
        m->router = TensorFromF32({8, 18}, w);
        std::vector<float> bias(8, 0.0f);
        bias[2] = bias[6] = 20.0f;
        m->router_bias = TensorFromF32({8}, bias);
      })
      .Test(backend);
}

// NaN in one token propagates to that token only; the others match the reference.
TEST_P(MoeRoutingTest, NanInputStaysInItsToken) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  Rng rng(21);
  MoeParams p = ParamsFor(Variant::kQwen2Moe);
  p.expert.d_model = 16;
  p.expert.d_ff = 24;
  ModelSpec spec;
  spec.d_model = 16;
  LayerSpec layer;
  layer.kind = LayerKind::kMoe;
  layer.moe = testing::RandomMoe(p, rng);
  spec.layers.push_back(std::move(layer));
  auto built = testing::BuildModel(spec);
  ASSERT_TRUE(built.ok()) << built.status();
  std::vector<float> input = rng.Vec(3 * 16, 1.0f);
  input[16 + 4] = NAN;
  auto want = testing::RunLayer(*built->model, "reference", 0, input, 3);
  auto got = testing::RunLayer(*built->model, backend, 0, input, 3);
  ASSERT_TRUE(want.ok() && got.ok());
  for (size_t t : {size_t{0}, size_t{2}}) {
    const std::vector<float> w(want->begin() + t * 16, want->begin() + (t + 1) * 16);
    const std::vector<float> g(got->begin() + t * 16, got->begin() + (t + 1) * 16);
    testing::ExpectOutputsNear(w, g, 1, 16, testing::kF32RelTol, "finite token");
  }
  bool any_nan = false;
  for (size_t i = 16; i < 32; ++i) any_nan |= std::isnan((*got)[i]);
  EXPECT_TRUE(any_nan);
}

INSTANTIATE_TEST_SUITE_P(All, MoeRoutingTest, ::testing::ValuesIn(BackendsUnderTest()),
                         BackendName);

// --- Neuron edits: h_i <- s_i · h_i before the down projection. ---

// Column i of down [d_model, d_ff] (f32) multiplied by scales[i]: the model an edit stands for.
// The values are first rounded to `stored` (the dtype the edited model keeps down in), and the
// result is to be written as f32, so that the edit and the file differ by no second rounding.
TensorSource ScaledDownColumns(const TensorSource& down, const std::vector<float>& scales,
                               DType stored = DType::F32) {
  const uint64_t rows = down.shape[0], cols = down.shape[1];
  std::vector<float> v(rows * cols);
  EXPECT_TRUE(down.fill(reinterpret_cast<uint8_t*>(v.data()), v.size() * sizeof(float)).ok());
  for (float& x : v) {
    if (stored == DType::BF16) x = Bf16ToF32(F32ToBf16(x));
    if (stored == DType::F16) x = F16ToF32(F32ToF16(x));
  }
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) v[r * cols + c] *= scales[c];
  }
  return TensorFromF32({rows, cols}, std::move(v));
}

// Scales with zeros (neurons off), negatives, a large one and ones.
std::vector<float> EditScales(uint32_t d_ff, uint32_t seed) {
  Rng rng(seed);
  std::vector<float> s = rng.Vec(d_ff, 2.0f);
  for (uint32_t i = 0; i < d_ff; i += 3) s[i] = 0.0f;
  for (uint32_t i = 1; i < d_ff; i += 7) s[i] = 1.0f;
  s[d_ff / 2] = 40.0f;
  return s;
}

class NeuronEditTest : public ::testing::TestWithParam<std::string> {};

// The edited session on the model equals the reference on the model with scaled down columns,
// through every path of the backend (few tokens, many tokens, split among threads, fused ReLU,
// f16/bf16); clearing the scales gives the model's own result again.
TEST_P(NeuronEditTest, DenseEditEqualsScaledDownColumns) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  struct Case {
    Activation act;
    bool gated, bias;
    DType dtype;
    size_t tokens;
    int threads;
  };
  const Case cases[] = {
      {Activation::SILU, true, false, DType::F32, 1, 1},
      {Activation::RELU, false, true, DType::F32, 7, 1},    // ReLU fused into the product
      {Activation::GELU_ERF, false, true, DType::F32, 130, 2},  // split among threads
      {Activation::SILU, true, true, DType::BF16, 130, 1},
      {Activation::GELU_TANH, true, false, DType::F16, 3, 3},
  };
  const uint32_t d = 64, ff = 150;
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrFormat("%s %s, %d tokens, %d threads", ActivationName(c.act),
                                 DTypeName(c.dtype), c.tokens, c.threads));
    Rng rng(seed++);
    FfnParams p{d, ff, c.act, c.gated, c.bias};
    ModelSpec spec;
    spec.d_model = d;
    LayerSpec layer;
    layer.ffn = testing::RandomFfn(p, rng);
    layer.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng);
    layer.residual = true;
    spec.layers.push_back(layer);
    const std::vector<float> scales = EditScales(ff, seed);
    ModelSpec edited = spec;
    edited.layers[0].ffn.down = ScaledDownColumns(spec.layers[0].ffn.down, scales, c.dtype);
    WriteOptions options;
    options.dtype = c.dtype;
    WriteOptions want_options = options;  // the scaled down exactly, in f32
    want_options.matrix_dtype = [](const std::string& path, DType dtype) {
      return path == "layers[0].ffn.down" ? DType::F32 : dtype;
    };
    auto model = testing::BuildModel(spec, options);
    auto want_model = testing::BuildModel(edited, want_options);
    ASSERT_TRUE(model.ok() && want_model.ok());
    ASSERT_EQ(want_model->model->layers()[0].ffn.down.dtype, DType::F32);
    const std::vector<float> input = rng.Vec(c.tokens * d, 1.0f);
    auto want = testing::RunLayer(*want_model->model, "reference", 0, input, c.tokens);
    auto plain = testing::RunLayer(*model->model, "reference", 0, input, c.tokens);
    ASSERT_TRUE(want.ok() && plain.ok());

    SessionOptions so;
    so.backend = backend;
    so.num_threads = c.threads;
    so.max_tokens = c.tokens;
    auto session = Session::Create(*model->model, so);
    ASSERT_TRUE(session.ok()) << session.status();
    std::vector<float> got(c.tokens * d);
    const double tol = testing::BackendRelTol(backend, c.dtype);
    ASSERT_TRUE((*session)->SetNeuronScales(0, -1, scales.data(), ff).ok());
    ASSERT_TRUE((*session)->Run(0, input.data(), c.tokens, got.data()).ok());
    testing::ExpectOutputsNear(*want, got, c.tokens, d, tol, backend + " edited");
    ASSERT_TRUE((*session)->ClearNeuronScales(0, -1).ok());
    ASSERT_TRUE((*session)->Run(0, input.data(), c.tokens, got.data()).ok());
    testing::ExpectOutputsNear(*plain, got, c.tokens, d, tol, backend + " cleared");
  }
}

// An MoE layer with two routed experts edited: routing is unchanged (down does not feed it), so
// the result equals the model whose two experts' down columns are scaled.
TEST_P(NeuronEditTest, MoeExpertEditEqualsScaledDownColumns) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  const uint32_t d = 48, ff = 40;
  Rng rng(31);
  MoeParams p = ParamsFor(Variant::kQwen2Moe);
  p.expert = FfnParams{d, ff, Activation::SILU, true, false};
  ModelSpec spec;
  spec.d_model = d;
  LayerSpec layer;
  layer.kind = LayerKind::kMoe;
  layer.moe = testing::RandomMoe(p, rng);
  spec.layers.push_back(layer);
  const std::vector<float> s1 = EditScales(ff, 5), s3 = EditScales(ff, 6);
  ModelSpec edited = spec;
  edited.layers[0].moe.experts[1].down = ScaledDownColumns(spec.layers[0].moe.experts[1].down, s1);
  edited.layers[0].moe.experts[3].down = ScaledDownColumns(spec.layers[0].moe.experts[3].down, s3);
  auto model = testing::BuildModel(spec);
  auto want_model = testing::BuildModel(edited);
  ASSERT_TRUE(model.ok() && want_model.ok());
  for (size_t tokens : {size_t{1}, size_t{37}}) {
    const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
    auto want = testing::RunLayer(*want_model->model, "reference", 0, input, tokens);
    ASSERT_TRUE(want.ok());
    SessionOptions so;
    so.backend = backend;
    so.max_tokens = tokens;
    auto session = Session::Create(*model->model, so);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->SetNeuronScales(0, 1, s1.data(), ff).ok());
    ASSERT_TRUE((*session)->SetNeuronScales(0, 3, s3.data(), ff).ok());
    std::vector<float> got(tokens * d);
    ASSERT_TRUE((*session)->Run(0, input.data(), tokens, got.data()).ok());
    testing::ExpectOutputsNear(*want, got, tokens, d, testing::BackendRelTol(backend, DType::F32),
                               absl::StrFormat("%s, %d tokens", backend, tokens));
  }
}

// Quantised weights (i8, i4): the edited backend against the edited reference on the same file
// (scaling a quantised column in the file would requantise its block, so the file cannot stand
// for the edit here). Few tokens keep float activations (kF32RelTol); many take the int8 kernels.
TEST_P(NeuronEditTest, QuantisedEditMatchesEditedReference) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  if (backend == "reference") GTEST_SKIP() << "the reference is the other side of this test";
  const uint32_t d = 64, ff = 96;
  for (DType dtype : {DType::I8, DType::I4}) {
    for (size_t tokens : {size_t{3}, size_t{40}}) {
      Rng rng(51);
      ModelSpec spec;
      spec.d_model = d;
      LayerSpec layer;
      layer.ffn = testing::RandomFfn(FfnParams{d, ff, Activation::SILU, true, false}, rng);
      spec.layers.push_back(layer);
      WriteOptions options;
      options.matrix_dtype = [dtype](const std::string&, DType) { return dtype; };
      auto model = testing::BuildModel(spec, options);
      ASSERT_TRUE(model.ok()) << model.status();
      // No 40x neuron here: the int8 kernels quantise the edited h per block of 32, and one
      // outlier would coarsen its block beyond kInt8ActRelTol's argument (as it would unedited).
      std::vector<float> scales = EditScales(ff, 52);
      scales[ff / 2] = 1.5f;
      const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
      std::vector<std::vector<float>> out;
      for (const std::string& b : {std::string("reference"), backend}) {
        SessionOptions so;
        so.backend = b;
        so.max_tokens = tokens;
        auto session = Session::Create(*model->model, so);
        ASSERT_TRUE(session.ok()) << session.status();
        ASSERT_TRUE((*session)->SetNeuronScales(0, -1, scales.data(), ff).ok());
        out.emplace_back(tokens * d);
        ASSERT_TRUE((*session)->Run(0, input.data(), tokens, out.back().data()).ok());
      }
      const bool int8 = backend == "xnnpack" &&
                        tokens >= DefaultQuantGemmMinTokens(QuantTypeOf(dtype), BestQGemvKernel(),
                                                            BestQGemmKernel());
      const double tol = int8 ? testing::kInt8ActRelTol : testing::kF32RelTol;
      testing::ExpectOutputsNear(out[0], out[1], tokens, d, tol,
                                 absl::StrFormat("%s %s, %d tokens", backend, DTypeName(dtype),
                                                 tokens));
    }
  }
}

// Bad arguments get a status naming the problem; nothing changes.
TEST_P(NeuronEditTest, BadArgumentsAreRefused) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  Rng rng(41);
  ModelSpec spec;
  spec.d_model = 16;
  LayerSpec dense;
  dense.ffn = testing::RandomFfn(FfnParams{16, 24}, rng);
  spec.layers.push_back(dense);
  LayerSpec moe;
  moe.kind = LayerKind::kMoe;
  MoeParams p;
  p.expert = FfnParams{16, 24};
  moe.moe = testing::RandomMoe(p, rng);
  spec.layers.push_back(moe);
  auto model = testing::BuildModel(spec);
  ASSERT_TRUE(model.ok());
  SessionOptions so;
  so.backend = backend;
  auto session = Session::Create(*model->model, so);
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  std::vector<float> ones(24, 1.0f), nan = ones;
  nan[5] = NAN;
  auto expect = [](const absl::Status& st, absl::StatusCode code, const std::string& text) {
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(text), std::string::npos) << st;
  };
  expect(s.SetNeuronScales(0, -1, ones.data(), 23), absl::StatusCode::kInvalidArgument, "d_ff 24");
  expect(s.SetNeuronScales(0, -1, nan.data(), 24), absl::StatusCode::kInvalidArgument,
         "scales[5]");
  expect(s.SetNeuronScales(0, -1, nullptr, 24), absl::StatusCode::kInvalidArgument, "null");
  expect(s.SetNeuronScales(0, 0, ones.data(), 24), absl::StatusCode::kInvalidArgument, "dense");
  expect(s.SetNeuronScales(1, -1, ones.data(), 24), absl::StatusCode::kInvalidArgument,
         "MoE layer");
  expect(s.SetNeuronScales(1, 8, ones.data(), 24), absl::StatusCode::kOutOfRange, "8 routed");
  expect(s.SetNeuronScales(2, -1, ones.data(), 24), absl::StatusCode::kOutOfRange, "2 layers");
  expect(s.ClearNeuronScales(1, 9), absl::StatusCode::kOutOfRange, "expert 9");
}

// The reference too: its edit against the scaled file is a test of the edit, not of itself.
INSTANTIATE_TEST_SUITE_P(All, NeuronEditTest, ::testing::ValuesIn(EveryBackend()), BackendName);

// `auto`'s rule over a table of backends: in order, skipping those `auto` may not choose and those
// that cannot run here, the first that takes the model; after refusals, the last one's error.
bool Runs(std::string* /*why*/) { return true; }
bool DoesNotRun(std::string* why) {
  *why = "not here";
  return false;
}
absl::StatusOr<std::unique_ptr<Backend>> RefusesA(const Model&, const BackendConfig&) {
  return absl::UnimplementedError("a refuses");
}
absl::StatusOr<std::unique_ptr<Backend>> RefusesB(const Model&, const BackendConfig&) {
  return absl::ResourceExhaustedError("b refuses");
}

ModelSpec OneDenseLayer(uint32_t seed) {
  Rng rng(seed);
  ModelSpec spec;
  spec.d_model = 16;
  LayerSpec layer;
  layer.ffn = testing::RandomFfn(FfnParams{16, 24}, rng);
  spec.layers.push_back(layer);
  return spec;
}

TEST(BackendRegistryTest, AutoTakesTheFirstBackendThatRunsAndTakesTheModel) {
  auto built = testing::BuildModel(OneDenseLayer(3));
  ASSERT_TRUE(built.ok()) << built.status();
  BackendConfig config;
  config.max_tokens = 4;
  const BackendEntry table[] = {
      {"not-here", DoesNotRun, CreateReferenceBackend, true},
      {"refuses", Runs, RefusesA, true},
      {"by-name-only", Runs, CreateReferenceBackend, false},
      {"takes", Runs, CreateReferenceBackend, true},
      {"later", Runs, CreateReferenceBackend, true},
  };
  const BackendEntry* chosen = nullptr;
  auto backend = CreateAutoBackend(table, *built->model, config, &chosen);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_NE(chosen, nullptr);
  EXPECT_STREQ(chosen->name, "takes");

  // Every one refuses: the last refusal is reported.
  const BackendEntry refusing[] = {{"a", Runs, RefusesA, true}, {"b", Runs, RefusesB, true}};
  backend = CreateAutoBackend(refusing, *built->model, config, &chosen);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(backend.status().message(), "b refuses");
  // None runs here.
  const BackendEntry none[] = {{"x", DoesNotRun, CreateReferenceBackend, true},
                               {"y", Runs, CreateReferenceBackend, false}};
  backend = CreateAutoBackend(none, *built->model, config, &chosen);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
}

// The registry's order is auto's preference: cuda (where built), then the CPU backend, then the
// reference; an auto session takes the first of them that runs here.
TEST(BackendRegistryTest, AutoPrefersCudaThenTheCpuThenTheReference) {
  std::vector<std::string> want = {"xnnpack", "reference"};
#ifdef FFLITE_HAVE_CUDA
  want.insert(want.begin(), "cuda");
#endif
  EXPECT_EQ(testing::EveryBackend(), want);
  auto built = testing::BuildModel(OneDenseLayer(4));
  ASSERT_TRUE(built.ok()) << built.status();
  auto session = Session::Create(*built->model, SessionOptions());
  ASSERT_TRUE(session.ok()) << session.status();
  std::string first_here;
  for (const std::string& name : want) {
    std::string why;
    if (FindBackend(name)->available(&why)) {
      first_here = name;
      break;
    }
  }
  EXPECT_EQ((*session)->backend_name(), first_here);
}

}  // namespace
}  // namespace fflite
