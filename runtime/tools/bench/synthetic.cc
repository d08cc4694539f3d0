// Synthetic model specs whose tensors fill themselves with a fast generator while written.
#include "bench/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"

namespace fflite {
namespace bench {

namespace {

// f32 values uniform in ±scale from a xorshift generator (fast enough for 135M weights).
TensorSource Random(std::vector<uint64_t> shape, float scale, uint32_t seed) {
  TensorSource t;
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  t.fill = [scale, seed](uint8_t* dst, uint64_t bytes) {
    uint32_t s = seed * 2654435761u + 1u;
    for (uint64_t i = 0; i + 4 <= bytes; i += 4) {
      s ^= s << 13;
      s ^= s >> 17;
      s ^= s << 5;
      const float v = (static_cast<float>(s >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale;
      std::memcpy(dst + i, &v, 4);
    }
    return absl::OkStatus();
  };
  return t;
}

TensorSource Ones(uint64_t n) {
  TensorSource t;
  t.dtype = DType::F32;
  t.shape = {n};
  t.fill = [](uint8_t* dst, uint64_t bytes) {
    const float one = 1.0f;
    for (uint64_t i = 0; i + 4 <= bytes; i += 4) std::memcpy(dst + i, &one, 4);
    return absl::OkStatus();
  };
  return t;
}

// A shape: its d_model, its own number of layers, and layer i from its weights' seeds offset by
// `seed` = i · kLayerSeeds (layer 0 keeps the seeds the one-layer shapes always had).
struct Shape {
  uint32_t d_model = 0;
  uint32_t layers = 1;
  std::function<LayerSpec(uint32_t seed)> layer;
};

// Above every seed a layer uses (qwen3-30b-a3b's 128 experts: up to 100 + 3 · 127 + 2).
constexpr uint32_t kLayerSeeds = 1000;

Shape Dense(uint32_t d, uint32_t ff, Activation act, bool gated, bool bias, NormKind norm,
            NormPlacement placement) {
  return {d, 1, [=](uint32_t seed) {
    LayerSpec layer;
    layer.name = "ffn";
    FfnSpec& f = layer.ffn;
    f.activation = act;
    f.gated = gated;
    f.d_ff = ff;
    const float s_in = 1.0f / std::sqrt(static_cast<float>(d));
    const float s_ff = 1.0f / std::sqrt(static_cast<float>(ff));
    f.up = Random({ff, d}, s_in, seed + 1);
    if (gated) f.gate = Random({ff, d}, s_in, seed + 2);
    f.down = Random({d, ff}, s_ff, seed + 3);
    if (bias) {
      f.up_bias = Random({ff}, 0.1f, seed + 4);
      if (gated) f.gate_bias = Random({ff}, 0.1f, seed + 5);
      f.down_bias = Random({d}, 0.1f, seed + 6);
    }
    NormSpec n;
    n.kind = norm;
    n.placement = placement;
    n.eps = 1e-5f;
    n.weight = Ones(d);
    if (norm == NormKind::LAYER_NORM) n.bias = Random({d}, 0.1f, seed + 7);
    layer.norm = std::move(n);
    layer.residual = true;
    return layer;
  }};
}

FfnSpec SwiGlu(uint32_t d, uint32_t ff, uint32_t seed) {
  FfnSpec f;
  f.activation = Activation::SILU;
  f.gated = true;
  f.d_ff = ff;
  f.up = Random({ff, d}, 1.0f / std::sqrt(static_cast<float>(d)), seed);
  f.gate = Random({ff, d}, 1.0f / std::sqrt(static_cast<float>(d)), seed + 1);
  f.down = Random({d, ff}, 1.0f / std::sqrt(static_cast<float>(ff)), seed + 2);
  return f;
}

// An MoE layer of SwiGLU experts, softmax routing, pre-RMSNorm + residual. The router's weights
// (±2/sqrt(d)) give logits of about unit spread on normalised inputs, so that routing varies with
// the input (and, each layer having its own router, from layer to layer).
Shape Moe(uint32_t d, uint32_t ff, uint32_t experts, uint32_t top_k, bool normalize,
          uint32_t shared_ff, uint32_t layers = 1) {
  return {d, layers, [=](uint32_t seed) {
    LayerSpec layer;
    layer.name = "moe";
    layer.kind = LayerKind::kMoe;
    MoeSpec& m = layer.moe;
    m.top_k = top_k;
    m.scoring = Scoring::SOFTMAX;
    m.normalize_top_k = normalize;
    m.router = Random({experts, d}, 2.0f / std::sqrt(static_cast<float>(d)), seed + 11);
    for (uint32_t e = 0; e < experts; ++e) {
      m.experts.push_back(SwiGlu(d, ff, seed + 100 + 3 * e));
    }
    if (shared_ff > 0) {
      m.shared_experts.push_back(SwiGlu(d, shared_ff, seed + 20));
      m.shared_expert_gate = Random({1, d}, 1.0f / std::sqrt(static_cast<float>(d)), seed + 23);
    }
    NormSpec n;
    n.kind = NormKind::RMS_NORM;
    n.placement = NormPlacement::PRE;
    n.eps = 1e-5f;
    n.weight = Ones(d);
    layer.norm = std::move(n);
    layer.residual = true;
    return layer;
  }};
}

absl::StatusOr<Shape> FindShape(const std::string& name) {
  if (name == "llama") {
    return Dense(4096, 11008, Activation::SILU, true, false, NormKind::RMS_NORM,
                 NormPlacement::PRE);
  }
  if (name == "llama-70b") {  // one Llama-2/3-70B FFN: the cuda backend's decode goal
    return Dense(8192, 28672, Activation::SILU, true, false, NormKind::RMS_NORM,
                 NormPlacement::PRE);
  }
  if (name == "bert") {
    return Dense(768, 3072, Activation::GELU_ERF, false, true, NormKind::LAYER_NORM,
                 NormPlacement::POST);
  }
  if (name == "llama-reglu") {  // a ReLU-fied Llama FFN (ReGLU): sparse decode's shape
    return Dense(4096, 11008, Activation::RELU, true, false, NormKind::RMS_NORM,
                 NormPlacement::PRE);
  }
  if (name == "opt") {  // an OPT-6.7B FFN: fc1/fc2 with biases, ReLU, pre-LayerNorm
    return Dense(4096, 16384, Activation::RELU, false, true, NormKind::LAYER_NORM,
                 NormPlacement::PRE);
  }
  if (name == "tiny-relu") {  // for the bench's smoke test of --sparsity
    return Dense(64, 256, Activation::RELU, true, false, NormKind::RMS_NORM, NormPlacement::PRE);
  }
  if (name == "tiny") {
    return Dense(64, 256, Activation::SILU, true, false, NormKind::RMS_NORM, NormPlacement::PRE);
  }
  if (name == "tiny-moe") return Moe(64, 96, 8, 2, true, 128);  // for the bench's smoke test
  if (name == "mixtral-mini") return Moe(1024, 3584, 8, 2, true, 0);
  if (name == "qwen-moe") return Moe(2048, 1408, 60, 4, false, 5632);
  if (name == "qwen3-30b-a3b") return Moe(2048, 768, 128, 8, true, 0, 48);
  return absl::InvalidArgumentError("--synthetic: '" + name +
                                    "' is not one of " FFLITE_SYNTHETIC_SHAPES);
}

}  // namespace

absl::StatusOr<ModelSpec> SyntheticSpec(const std::string& name, std::optional<int64_t> layers) {
  absl::StatusOr<Shape> shape = FindShape(name);
  if (!shape.ok()) return shape.status();
  if (layers.has_value() && (*layers < 1 || *layers > kMaxSyntheticLayers)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--layers: %d must be in [1, %d] (without it: %s's own %d)", *layers,
                        kMaxSyntheticLayers, name, shape->layers));
  }
  const uint32_t n = static_cast<uint32_t>(layers.value_or(shape->layers));
  ModelSpec spec;
  spec.d_model = shape->d_model;
  for (uint32_t i = 0; i < n; ++i) {
    spec.layers.push_back(shape->layer(i * kLayerSeeds));
    if (n > 1) spec.layers.back().name += absl::StrFormat(".%d", i);
  }
  return spec;
}

absl::Status SetSparsity(double fraction, ModelSpec* spec) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--sparsity: %g must be in [0, 1]", fraction));
  }
  bool any = false;
  for (LayerSpec& l : spec->layers) {
    if (l.kind != LayerKind::kDense || l.ffn.activation != Activation::RELU) continue;
    FfnSpec& f = l.ffn;
    const uint32_t ff = f.d_ff;
    // Exactly round(fraction · ff) neurons silent, spread by a multiplicative hash.
    const uint64_t silent = static_cast<uint64_t>(std::llround(fraction * ff));
    std::vector<float> bias(ff, 3.0f);
    for (uint64_t i = 0; i < silent; ++i) bias[(i * 2654435761u) % ff] = -100.0f;
    // The multiplier is odd and ff need not be a power of two: fill any collisions' shortfall.
    uint64_t count = 0;
    for (float b : bias) count += b < 0.0f;
    for (uint32_t i = 0; i < ff && count < silent; ++i) {
      if (bias[i] > 0.0f) {
        bias[i] = -100.0f;
        ++count;
      }
    }
    (f.gated ? f.gate_bias : f.up_bias) = TensorFromF32({ff}, std::move(bias));
    any = true;
  }
  if (!any) {
    return absl::InvalidArgumentError(
        "--sparsity needs ReLU-family layers: --synthetic llama-reglu, opt or tiny-relu");
  }
  return absl::OkStatus();
}

absl::Status SetRoutingSkew(double s, ModelSpec* spec) {
  if (!(s >= 0.0 && s <= 4.0)) {
    return absl::InvalidArgumentError(absl::StrFormat("--routing_skew: %g must be in [0, 4]", s));
  }
  bool any = false;
  uint32_t layer = 0;
  for (LayerSpec& l : spec->layers) {
    ++layer;
    if (l.kind != LayerKind::kMoe) continue;
    const uint32_t experts = static_cast<uint32_t>(l.moe.experts.size());
    std::vector<uint32_t> order(experts);
    for (uint32_t e = 0; e < experts; ++e) order[e] = e;
    std::mt19937 gen(1000 + layer);
    std::shuffle(order.begin(), order.end(), gen);
    std::vector<float> bias(experts);
    for (uint32_t rank = 0; rank < experts; ++rank) {
      bias[order[rank]] = static_cast<float>(-s * std::log(rank + 1.0));
    }
    l.moe.router_bias = TensorFromF32({experts}, std::move(bias));
    any = true;
  }
  if (!any) return absl::InvalidArgumentError("--routing_skew needs an MoE model");
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace fflite
