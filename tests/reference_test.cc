// The reference backend against values worked out by hand: every activation, the GLU family,
// biases, norms and their placement, residual, MoE with shared experts, padding exactness, and
// position-wise independence.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"
#include "testing/tolerances.h"
#include "format/writer.h"

namespace fflite {
namespace {

using testing::BuildModel;
using testing::RunLayer;

// Published values: Φ(1) = 0.841344746068543, σ(1) = 0.731058578630005,
// GELU_tanh(1) = 0.5·(1 + tanh(√(2/π)·1.044715)) = 0.841191990608276.
constexpr double kGelu1 = 0.841344746068543;
constexpr double kGeluM1 = 1.0 * kGelu1 - 1.0;  // GELU(-x) = GELU(x) - x
constexpr double kSig1 = 0.731058578630005;
constexpr double kSigM1 = 1.0 - kSig1;
constexpr double kGeluTanh1 = 0.841191990608276;
constexpr double kGeluTanhM1 = kGeluTanh1 - 1.0;

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], testing::kHandAbsTol + testing::kHandRelTol * std::fabs(want[i]))
        << "element " << i;
  }
}

// A 2x2 FFN with given matrices (row-major, [out, in]) and no padding surprises.
FfnSpec Ffn2(Activation act, bool gated, std::vector<float> up, std::vector<float> gate,
             std::vector<float> down) {
  FfnSpec f;
  f.activation = act;
  f.gated = gated;
  f.d_ff = 2;
  f.up = TensorFromF32({2, 2}, std::move(up));
  if (gated) f.gate = TensorFromF32({2, 2}, std::move(gate));
  f.down = TensorFromF32({2, 2}, std::move(down));
  return f;
}

std::vector<float> RunOne(LayerSpec layer, const std::vector<float>& x, uint32_t d = 2) {
  ModelSpec spec;
  spec.d_model = d;
  spec.layers.push_back(std::move(layer));
  auto built = BuildModel(spec);
  EXPECT_TRUE(built.ok()) << built.status();
  if (!built.ok()) return {};
  auto out = RunLayer(*built->model, "reference", 0, x, x.size() / d);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<float>();
}

LayerSpec Dense(FfnSpec f) {
  LayerSpec l;
  l.kind = LayerKind::kDense;
  l.ffn = std::move(f);
  return l;
}

const std::vector<float> kIdentity = {1, 0, 0, 1};

struct ActivationCase {
  Activation activation;
  double at_one, at_minus_one;
};

class ActivationTest : public ::testing::TestWithParam<ActivationCase> {};

// y = act(x) through identity matrices, at x = (1, -1).
TEST_P(ActivationTest, PlainFfnAppliesTheActivation) {
  const ActivationCase c = GetParam();
  ExpectNear(RunOne(Dense(Ffn2(c.activation, false, kIdentity, {}, kIdentity)), {1, -1}),
             {c.at_one, c.at_minus_one});
}

// GLU family: y = act(gate·x) ⊙ (up·x) with gate = I, up = 2I, at x = (1, -1).
TEST_P(ActivationTest, GatedFfnMultipliesActivatedGateByUp) {
  const ActivationCase c = GetParam();
  ExpectNear(RunOne(Dense(Ffn2(c.activation, true, {2, 0, 0, 2}, kIdentity, kIdentity)), {1, -1}),
             {2.0 * c.at_one, -2.0 * c.at_minus_one});
}

// gpt-oss's SwiGLU, worked by hand: gate c = min(g, 7), c·σ(1.702·c), times clamp(u, -7, 7) + 1.
// Gate rows (1, 10): c = 1 and 7 (clamped); up rows (x0 + x1, -x0 - 2·x1) at x = (2, 5): u = 7,
// clamped 7 -> 8, and -12, clamped -7 -> -6. σ(1.702) = 0.845795766..., σ(11.914) =
// 0.999993304...: y = (1·0.845795766·8, 7·0.999993304·(-6)) through down = identity.
TEST(ReferenceTest, SwigluOaiClampsGateAndUp) {
  const double s1 = 1.0 / (1.0 + std::exp(-1.702)), s7 = 1.0 / (1.0 + std::exp(-1.702 * 7.0));
  EXPECT_NEAR(s1, 0.845795766, 1e-9);
  EXPECT_NEAR(s7, 0.999993304, 1e-9);
  // gate·x = (x0 / 2, 2·x1): (1, 10).
  FfnSpec f = Ffn2(Activation::SWIGLU_OAI, true, {1, 1, -1, -2}, {0.5f, 0, 0, 2}, kIdentity);
  ExpectNear(RunOne(Dense(std::move(f)), {2, 5}), {1.0 * s1 * 8.0, 7.0 * s7 * -6.0});
  // Without a gate: c·σ(1.702·c) of the up values (7 and -12: not clamped below).
  FfnSpec plain = Ffn2(Activation::SWIGLU_OAI, false, {1, 1, -1, -2}, {}, kIdentity);
  const double sm12 = 1.0 / (1.0 + std::exp(1.702 * 12.0));
  ExpectNear(RunOne(Dense(std::move(plain)), {2, 5}), {7.0 * s7, -12.0 * sm12});
}

INSTANTIATE_TEST_SUITE_P(
    Reference, ActivationTest,
    ::testing::Values(ActivationCase{Activation::RELU, 1.0, 0.0},            // ReGLU
                      ActivationCase{Activation::GELU_ERF, kGelu1, kGeluM1},  // GeGLU
                      ActivationCase{Activation::GELU_TANH, kGeluTanh1, kGeluTanhM1},
                      ActivationCase{Activation::SILU, kSig1, -kSigM1},       // SwiGLU
                      ActivationCase{Activation::SIGMOID, kSig1, kSigM1}),    // GLU
    [](const auto& p) { return std::string(ActivationName(p.param.activation)); });

// y = down·relu(up·x + b_up) + b_down, worked out by hand:
//   up·x = (1·2 + 2·1, 3·2 - 1·1) = (4, 5); + b_up (-5, 1) = (-1, 6); relu = (0, 6)
//   down·h = (0.5·0 + 1·6, -1·0 + 0.25·6) = (6, 1.5); + b_down (0.1, -0.2) = (6.1, 1.3)
TEST(ReferenceTest, BiasesOnEveryMatrix) {
  FfnSpec f = Ffn2(Activation::RELU, false, {1, 2, 3, -1}, {}, {0.5f, 1, -1, 0.25f});
  f.up_bias = TensorFromF32({2}, {-5, 1});
  f.down_bias = TensorFromF32({2}, {0.1f, -0.2f});
  ExpectNear(RunOne(Dense(std::move(f)), {2, 1}), {6.1, 1.3});
}

// Gated with biases: gate·x + b_g = (1, -1) + (0, 2) = (1, 1); up·x + b_u = (1, -1) + (1, 1)
// = (2, 0); h = silu(1)·2, silu(1)·0; y = I·h.
TEST(ReferenceTest, GatedBiases) {
  FfnSpec f = Ffn2(Activation::SILU, true, kIdentity, kIdentity, kIdentity);
  f.gate_bias = TensorFromF32({2}, {0, 2});
  f.up_bias = TensorFromF32({2}, {1, 1});
  ExpectNear(RunOne(Dense(std::move(f)), {1, -1}), {2.0 * kSig1, 0.0});
}

NormSpec Norm(NormKind kind, NormPlacement placement, std::vector<float> w,
              std::vector<float> b = {}, bool unit_offset = false) {
  NormSpec n;
  n.kind = kind;
  n.placement = placement;
  n.eps = 0.0f;
  n.unit_offset = unit_offset;
  n.weight = TensorFromF32({2}, std::move(w));
  if (!b.empty()) n.bias = TensorFromF32({2}, std::move(b));
  return n;
}

// Pre-norm RMSNorm + residual (Llama): x = (3, 4), rms = √12.5, w = (2, 0.5):
//   h = (3, 4)/√12.5 ⊙ (2, 0.5) = (1.697056274847714, 0.565685424949238); FFN = relu(I·h) = h
//   y = x + h = (4.697056274847714, 4.565685424949238)
TEST(ReferenceTest, PreRmsNormWithResidual) {
  LayerSpec l = Dense(Ffn2(Activation::RELU, false, kIdentity, {}, kIdentity));
  l.norm = Norm(NormKind::RMS_NORM, NormPlacement::PRE, {2, 0.5f});
  l.residual = true;
  ExpectNear(RunOne(std::move(l), {3, 4}), {4.697056274847714, 4.565685424949238});
}

// Gemma's unit offset: weight stored as (1, -0.5) multiplies by (2, 0.5): same as above.
TEST(ReferenceTest, RmsNormUnitOffset) {
  LayerSpec l = Dense(Ffn2(Activation::RELU, false, kIdentity, {}, kIdentity));
  l.norm = Norm(NormKind::RMS_NORM, NormPlacement::PRE, {1, -0.5f}, {}, true);
  l.residual = true;
  ExpectNear(RunOne(std::move(l), {3, 4}), {4.697056274847714, 4.565685424949238});
}

// Post-norm LayerNorm + residual (BERT): x = (1, 3), FFN = relu(x) = (1, 3), r = x + f = (2, 6),
// mean 4, var 4, (r - 4)/2 = (-1, 1), ⊙ w (1, 3) + b (0.5, 0) = (-0.5, 3).
TEST(ReferenceTest, PostLayerNormWithResidual) {
  LayerSpec l = Dense(Ffn2(Activation::RELU, false, kIdentity, {}, kIdentity));
  l.norm = Norm(NormKind::LAYER_NORM, NormPlacement::POST, {1, 3}, {0.5f, 0});
  l.residual = true;
  ExpectNear(RunOne(std::move(l), {1, 3}), {-0.5, 3.0});
}

// Pre-norm LayerNorm, no residual: x = (1, 3) -> (-1, 1) -> relu -> (0, 1).
TEST(ReferenceTest, PreLayerNormWithoutResidual) {
  LayerSpec l = Dense(Ffn2(Activation::RELU, false, kIdentity, {}, kIdentity));
  l.norm = Norm(NormKind::LAYER_NORM, NormPlacement::PRE, {1, 1});
  ExpectNear(RunOne(std::move(l), {1, 3}), {0.0, 1.0});
}

// Two tokens are independent rows.
TEST(ReferenceTest, TokensAreRows) {
  ExpectNear(RunOne(Dense(Ffn2(Activation::RELU, false, kIdentity, {}, {2, 0, 0, 3})),
                    {1, -1, -2, 5}),
             {2, 0, 0, 15});
}

// A plain ReLU expert with d_ff 1: relu(u·x)·v.
FfnSpec ReluExpert(std::vector<float> u, std::vector<float> v) {
  FfnSpec f;
  f.activation = Activation::RELU;
  f.d_ff = 1;
  f.up = TensorFromF32({1, 2}, std::move(u));
  f.down = TensorFromF32({2, 1}, std::move(v));
  return f;
}

// The three experts and router of the MoE tests below (softmax, top-2).
LayerSpec ThreeExpertMoe() {
  LayerSpec l;
  l.kind = LayerKind::kMoe;
  l.moe.top_k = 2;
  l.moe.scoring = Scoring::SOFTMAX;
  l.moe.router = TensorFromF32({3, 2}, {0, 0, std::log(2.0f), 0, std::log(3.0f), 0});
  l.moe.experts.push_back(ReluExpert({7, 0}, {7, 7}));
  l.moe.experts.push_back(ReluExpert({2, 0}, {1, 0}));
  l.moe.experts.push_back(ReluExpert({1, 0}, {0, 5}));
  return l;
}

// MoE by hand. d = 2, 3 experts, each a plain ReLU FFN with d_ff 1: expert e computes
// relu(u_e·x)·v_e. Router logits = R·x. Softmax top-2 renormalised, plus a shared expert behind
// a sigmoid gate.
//   x = (1, 0); R rows: (0, 0), (ln 2, 0), (ln 3, 0) -> logits (0, ln2, ln3) -> softmax (1,2,3)/6
//   top-2: expert 2 (3/6), expert 1 (2/6); renormalised: 0.6, 0.4
//   expert 1: u = (2, 0), v = (1, 0) -> (2, 0); expert 2: u = (1, 0), v = (0, 5) -> (0, 5)
//   routed: 0.4·(2, 0) + 0.6·(0, 5) = (0.8, 3)
//   shared: u = (1, 0), v = (1, 1) -> (1, 1); gate g = (0, 0) -> σ(0) = 0.5 -> (0.5, 0.5)
//   y = (1.3, 3.5)
TEST(ReferenceTest, MoeSoftmaxTopKWithGatedSharedExpert) {
  LayerSpec l = ThreeExpertMoe();
  l.moe.normalize_top_k = true;
  l.moe.shared_experts.push_back(ReluExpert({1, 0}, {1, 1}));
  l.moe.shared_expert_gate = TensorFromF32({1, 2}, {0, 0});
  ExpectNear(RunOne(std::move(l), {1, 0}), {1.3, 3.5});
}

// Same experts, without renormalisation and with a routed scaling factor of 2:
//   routed: 2·(2/6·(2, 0) + 3/6·(0, 5)) = (4/3, 5); no shared expert.
TEST(ReferenceTest, MoeWithoutRenormalisationScaled) {
  LayerSpec l = ThreeExpertMoe();
  l.moe.normalize_top_k = false;
  l.moe.routed_scaling_factor = 2.0f;
  ExpectNear(RunOne(std::move(l), {1, 0}), {4.0 / 3.0, 5.0});
}

// ---- Properties over random layers ---------------------------------------------------------

ModelSpec RandomModel(uint32_t seed, bool moe) {
  testing::Rng rng(seed);
  ModelSpec spec;
  spec.d_model = 23;
  LayerSpec l;
  testing::FfnParams fp;
  fp.d_model = 23;
  fp.d_ff = 37;
  fp.activation = Activation::GELU_ERF;
  fp.gated = true;
  fp.bias = true;
  if (moe) {
    testing::MoeParams mp;
    mp.expert = fp;
    mp.num_experts = 6;
    mp.top_k = 2;
    mp.num_shared = 1;
    mp.shared_gate = true;
    l.kind = LayerKind::kMoe;
    l.moe = testing::RandomMoe(mp, rng);
  } else {
    l.ffn = testing::RandomFfn(fp, rng);
  }
  l.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, 23, rng);
  l.residual = true;
  spec.layers.push_back(std::move(l));
  return spec;
}

class PropertyTest : public ::testing::TestWithParam<bool> {};

// Padding d_ff with zero rows/columns is exact: outputs are bit-identical.
TEST_P(PropertyTest, PaddingIsExact) {
  const ModelSpec spec = RandomModel(7, GetParam());
  WriteOptions unpadded, padded;
  unpadded.d_ff_alignment = 1;
  padded.d_ff_alignment = 64;
  ASSERT_OK_AND_ASSIGN(auto a, BuildModel(spec, unpadded));
  ASSERT_OK_AND_ASSIGN(auto b, BuildModel(spec, padded));
  const FfnView& fa = GetParam() ? a.model->layers()[0].moe.experts[0] : a.model->layers()[0].ffn;
  const FfnView& fb = GetParam() ? b.model->layers()[0].moe.experts[0] : b.model->layers()[0].ffn;
  EXPECT_EQ(fa.d_ff_padded, 37u);
  EXPECT_EQ(fb.d_ff_padded, 64u);
  const std::vector<float> x = testing::Rng(3).Vec(5 * 23, 2.0f);
  ASSERT_OK_AND_ASSIGN(auto ya, RunLayer(*a.model, "reference", 0, x, 5));
  ASSERT_OK_AND_ASSIGN(auto yb, RunLayer(*b.model, "reference", 0, x, 5));
  EXPECT_EQ(ya, yb);
}

// Changing one token's input changes only that token's output (and, for MoE, its routing only).
TEST_P(PropertyTest, TokensArePositionWise) {
  ASSERT_OK_AND_ASSIGN(auto m, BuildModel(RandomModel(11, GetParam())));
  std::vector<float> x = testing::Rng(5).Vec(6 * 23, 2.0f);
  ASSERT_OK_AND_ASSIGN(auto y0, RunLayer(*m.model, "reference", 0, x, 6));
  for (int i = 0; i < 23; ++i) x[2 * 23 + i] = -x[2 * 23 + i] + 0.5f;
  ASSERT_OK_AND_ASSIGN(auto y1, RunLayer(*m.model, "reference", 0, x, 6));
  for (size_t t = 0; t < 6; ++t) {
    const std::vector<float> r0(y0.begin() + t * 23, y0.begin() + (t + 1) * 23);
    const std::vector<float> r1(y1.begin() + t * 23, y1.begin() + (t + 1) * 23);
    if (t == 2) {
      EXPECT_NE(r0, r1);
    } else {
      EXPECT_EQ(r0, r1) << "token " << t;
    }
  }
}

// Rounds a tensor's f32 values to `dtype` precision (and back to f32) as they are produced.
void RoundTo(DType dtype, TensorSource* t) {
  if (!t->present()) return;
  auto fill = t->fill;
  t->fill = [fill, dtype](uint8_t* dst, uint64_t bytes) -> absl::Status {
    absl::Status st = fill(dst, bytes);
    std::vector<uint8_t> half(bytes / 2);
    ConvertElements(DType::F32, dst, dtype, half.data(), bytes / 4);
    ConvertElements(dtype, half.data(), DType::F32, dst, bytes / 4);
    return st;
  };
}

void RoundTo(DType dtype, FfnSpec* f) {
  for (TensorSource* t : {&f->up, &f->gate, &f->down, &f->up_bias, &f->gate_bias, &f->down_bias}) {
    RoundTo(dtype, t);
  }
}

void RoundTo(DType dtype, ModelSpec* spec) {
  for (LayerSpec& l : spec->layers) {
    RoundTo(dtype, &l.ffn);
    for (FfnSpec& e : l.moe.experts) RoundTo(dtype, &e);
    for (FfnSpec& e : l.moe.shared_experts) RoundTo(dtype, &e);
    for (TensorSource* t : {&l.moe.router, &l.moe.router_bias, &l.moe.score_correction_bias,
                            &l.moe.shared_expert_gate}) {
      RoundTo(dtype, t);
    }
    if (l.norm) {
      RoundTo(dtype, &l.norm->weight);
      RoundTo(dtype, &l.norm->bias);
    }
  }
}

// f16 and bf16 weights are read as exactly their stored values: a model stored as f16 (bf16)
// gives bit-identical outputs to an f32 model holding the same values rounded to f16 (bf16).
TEST_P(PropertyTest, HalfWeightsUseTheirStoredValues) {
  const std::vector<float> x = testing::Rng(9).Vec(3 * 23, 2.0f);
  ASSERT_OK_AND_ASSIGN(auto f, BuildModel(RandomModel(13, GetParam())));
  ASSERT_OK_AND_ASSIGN(auto yf, RunLayer(*f.model, "reference", 0, x, 3));
  for (DType dtype : {DType::F16, DType::BF16}) {
    WriteOptions half;
    half.dtype = dtype;
    ASSERT_OK_AND_ASSIGN(auto h, BuildModel(RandomModel(13, GetParam()), half));
    const LayerView& hl = h.model->layers()[0];
    EXPECT_EQ(GetParam() ? hl.moe.experts[0].up.dtype : hl.ffn.up.dtype, dtype);
    ASSERT_OK_AND_ASSIGN(auto yh, RunLayer(*h.model, "reference", 0, x, 3));

    ModelSpec rounded = RandomModel(13, GetParam());
    RoundTo(dtype, &rounded);
    ASSERT_OK_AND_ASSIGN(auto r, BuildModel(rounded));
    EXPECT_EQ(r.model->layers()[0].norm.weight.dtype, DType::F32);
    ASSERT_OK_AND_ASSIGN(auto yr, RunLayer(*r.model, "reference", 0, x, 3));
    EXPECT_EQ(yh, yr) << DTypeName(dtype);

    // The rounding did change something, by about the storage precision (2^-11 for f16, 2^-8
    // for bf16, relative per weight; outputs move by a small multiple of that).
    double max_diff = 0.0, max_abs = 0.0;
    for (size_t i = 0; i < yf.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(yf[i] - yh[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(yf[i])));
    }
    EXPECT_GT(max_diff, 0.0) << DTypeName(dtype);
    EXPECT_LT(max_diff, (dtype == DType::BF16 ? 0.05 : 0.005) * max_abs) << DTypeName(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoe, PropertyTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Moe" : "Dense"; });

}  // namespace
}  // namespace fflite
