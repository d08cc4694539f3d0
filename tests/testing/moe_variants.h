// The MoE routing variants the tests sweep, as the converter maps the architectures (Mixtral,
// Qwen2-MoE, DeepSeek-V3/V2, a router bias, sigmoid top-1), shared by every backend's tests.
#ifndef FFLITE_TESTS_TESTING_MOE_VARIANTS_H_
#define FFLITE_TESTS_TESTING_MOE_VARIANTS_H_

#include "testing/model_builder.h"

namespace fflite {
namespace testing {

enum class Variant {
  kMixtral,       // softmax, top-2 of 8, renormalised
  kQwen2Moe,      // softmax, top-4 of 12, not renormalised, shared expert behind a sigmoid gate
  kDeepseekV3,    // sigmoid, correction bias, 4 groups keep 2 (sum of top 2), scale 2.5, shared
  kDeepseekV2,    // softmax, 4 groups keep 2 (highest), scale 1.5, not renormalised
  kRouterBias,    // softmax + router bias, plain GELU experts with biases, top-3 of 7
  kSigmoidTop1,   // sigmoid, top-1 of 5, not renormalised, two shared experts without a gate
};

inline MoeParams ParamsFor(Variant v) {
  MoeParams p;
  switch (v) {
    case Variant::kMixtral: break;
    case Variant::kQwen2Moe:
      p.num_experts = 12;
      p.top_k = 4;
      p.normalize_top_k = false;
      p.num_shared = 1;
      p.shared_d_ff = 53;
      p.shared_gate = true;
      break;
    case Variant::kDeepseekV3:
      p.scoring = Scoring::SIGMOID;
      p.score_correction_bias = true;
      p.n_group = 4;
      p.topk_group = 2;
      p.group_scoring = GroupScoring::TOP2_SUM;
      p.top_k = 3;
      p.routed_scaling_factor = 2.5f;
      p.num_shared = 1;
      p.shared_d_ff = 30;
      break;
    case Variant::kDeepseekV2:
      p.n_group = 4;
      p.topk_group = 2;
      p.normalize_top_k = false;
      p.routed_scaling_factor = 1.5f;
      break;
    case Variant::kRouterBias:
      p.num_experts = 7;
      p.top_k = 3;
      p.router_bias = true;
      break;
    case Variant::kSigmoidTop1:
      p.num_experts = 5;
      p.top_k = 1;
      p.scoring = Scoring::SIGMOID;
      p.normalize_top_k = false;
      p.num_shared = 2;
      p.shared_d_ff = 19;
      break;
  }
  return p;
}

inline const char* VariantName(Variant v) {
  static const char* const kNames[] = {"mixtral",     "qwen2_moe",   "deepseek_v3",
                                       "deepseek_v2", "router_bias", "sigmoid_top1"};
  return kNames[static_cast<int>(v)];
}

// Two MoE layers (sharing one budget) and a dense layer; a stream of varied inputs of varied
// sizes so that the routing, and with it the resident set, keeps changing.
inline ModelSpec BudgetModel(Rng& rng, uint32_t d, uint32_t ff) {
  ModelSpec spec;
  spec.d_model = d;
  for (int l = 0; l < 3; ++l) {
    LayerSpec layer;
    FfnParams f;
    f.d_model = d;
    f.d_ff = ff;
    if (l == 1) {
      layer.ffn = RandomFfn(f, rng);
    } else {
      MoeParams p = ParamsFor(l == 0 ? Variant::kMixtral : Variant::kQwen2Moe);
      p.expert = f;
      layer.kind = LayerKind::kMoe;
      layer.moe = RandomMoe(p, rng);
    }
    layer.norm = RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng);
    layer.residual = true;
    spec.layers.push_back(std::move(layer));
  }
  return spec;
}

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_TESTING_MOE_VARIANTS_H_
