// mixtral: a sparse MoE block with softmax routing over all experts, top-k, renormalised.
// Source: transformers models/mixtral/modeling_mixtral.py (MixtralSparseMoeBlock: softmax over
// router_logits, topk(num_experts_per_tok), `routing_weights /= routing_weights.sum(...)`;
// MixtralBlockSparseTop2MLP: w2(act_fn(w1(x)) * w3(x))), MixtralDecoderLayer.
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertMixtral(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t d_ff, c.Dim("intermediate_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t experts, c.Count("num_local_experts", 1, 1 << 16, 8));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t top_k,
                          c.Count("num_experts_per_tok", 1, experts, std::min(2u, experts)));
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("hidden_act", "silu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "hidden_act", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("rms_norm_eps", 1e-5));
  plan.metadata = {{"source.hidden_act", act_name}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    const std::string moe = layer + ".block_sparse_moe";
    plan.sublayers.push_back({moe, [&ctx, layer, moe, d, d_ff, experts, top_k, act, eps]()
                                       -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = moe;
      l.kind = LayerKind::kMoe;
      l.moe.top_k = top_k;
      l.moe.scoring = Scoring::SOFTMAX;
      l.moe.normalize_top_k = true;
      FFLITE_ASSIGN_OR_RETURN(l.moe.router, Tensor(ctx, moe + ".gate.weight", {experts, d},
                                                   "[num_local_experts, hidden_size]"));
      // w1 = gate, w3 = up, w2 = down.
      GatedNames names;
      names.gate = "w1";
      names.up = "w3";
      names.down = "w2";
      for (uint32_t e = 0; e < experts; ++e) {
        FFLITE_ASSIGN_OR_RETURN(FfnSpec f,
                                GatedFfn(ctx, absl::StrFormat("%s.experts.%d", moe, e), names, d,
                                         d_ff, "intermediate_size", act, /*bias=*/false));
        l.moe.experts.push_back(std::move(f));
      }
      FFLITE_RETURN_IF_ERROR(PostAttentionPreNorm(ctx, layer, d, eps, /*unit_offset=*/false, &l));
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
