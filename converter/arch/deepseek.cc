// deepseek_v2 and deepseek_v3: fine-grained routed experts plus shared experts (one FFN of
// moe_intermediate_size · n_shared_experts), the first first_k_dense_replace layers dense.
// Source: the modeling_deepseek.py files published with deepseek-ai/DeepSeek-V2 and -V3
// (MoEGate.forward, DeepseekV{2,3}MoE, DeepseekV{2,3}DecoderLayer.__init__), which the
// checkpoints were trained with; transformers' ports agree for every released config.
//   v2: softmax scores; topk_method "greedy" or "group_limited_greedy" (group score = the
//       highest expert score); `if top_k > 1 and norm_topk_prob: w /= sum(w) else:
//       w *= routed_scaling_factor` (the scaling factor only applies without renormalisation).
//   v3: sigmoid scores; selection by scores + e_score_correction_bias ("noaux_tc"); group score
//       = sum of the group's top-2; weights from the uncorrected scores, renormalised if
//       top_k > 1 and norm_topk_prob, then always times routed_scaling_factor.
#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {

absl::StatusOr<ArchPlan> ConvertDeepseek(const ArchContext& ctx) {
  const HfConfig& c = ctx.config;
  const bool v3 = ctx.model_type == "deepseek_v3";
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("hidden_act", "silu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "hidden_act", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("rms_norm_eps", 1e-6));
  FFLITE_ASSIGN_OR_RETURN(const bool mlp_bias, c.Bool("mlp_bias", false));
  if (mlp_bias) return c.Error("mlp_bias", "true is not supported for DeepSeek checkpoints");
  // n_routed_experts = null means a dense model (every layer an MLP).
  const bool has_moe = c.Has("n_routed_experts");
  uint32_t experts = 0, top_k = 0, first_dense = 0, freq = 1, moe_ff = 0, shared = 0;
  uint32_t n_group = 1, topk_group = 1;
  bool normalize = false;
  double scale = 1.0;
  Scoring scoring = Scoring::SOFTMAX;
  GroupScoring group_scoring = GroupScoring::HIGHEST;
  bool correction = false;
  if (has_moe) {
    FFLITE_ASSIGN_OR_RETURN(experts, c.Count("n_routed_experts", 1, 1 << 16));
    FFLITE_ASSIGN_OR_RETURN(top_k, c.Count("num_experts_per_tok", 1, experts));
    FFLITE_ASSIGN_OR_RETURN(first_dense, c.Count("first_k_dense_replace", 0, 1 << 16, 0));
    FFLITE_ASSIGN_OR_RETURN(freq, c.Count("moe_layer_freq", 1, 1 << 16, 1));
    FFLITE_ASSIGN_OR_RETURN(moe_ff, c.Dim("moe_intermediate_size"));
    FFLITE_ASSIGN_OR_RETURN(shared, c.Count("n_shared_experts", 0, 1 << 16, 0));
    if (uint64_t{moe_ff} * shared > static_cast<uint64_t>(kMaxConfigDim)) {
      return c.Error("n_shared_experts",
                     absl::StrFormat("%d times moe_intermediate_size %d exceeds %d", shared,
                                     moe_ff, kMaxConfigDim));
    }
    FFLITE_ASSIGN_OR_RETURN(const bool norm_topk, c.Bool("norm_topk_prob", v3));
    FFLITE_ASSIGN_OR_RETURN(scale, c.Float("routed_scaling_factor", v3 ? 2.5 : 1.0));
    if (!(scale > 0.0) || scale > std::numeric_limits<float>::max()) {
      return c.Error("routed_scaling_factor",
                     absl::StrFormat("%g must be positive and at most %g (stored as float32)",
                                     scale, std::numeric_limits<float>::max()));
    }
    FFLITE_ASSIGN_OR_RETURN(const std::string scoring_func,
                            c.String("scoring_func", v3 ? "sigmoid" : "softmax"));
    FFLITE_ASSIGN_OR_RETURN(const std::string method,
                            c.String("topk_method", v3 ? "noaux_tc" : "greedy"));
    if (v3) {
      if (scoring_func != "sigmoid") {
        return c.Error("scoring_func", absl::StrFormat("\"%s\" is not supported for deepseek_v3 "
                                                       "(only \"sigmoid\")", scoring_func));
      }
      if (method != "noaux_tc") {
        return c.Error("topk_method", absl::StrFormat("\"%s\" is not supported for deepseek_v3 "
                                                      "(only \"noaux_tc\")", method));
      }
      scoring = Scoring::SIGMOID;
      correction = true;
      group_scoring = GroupScoring::TOP2_SUM;
      normalize = top_k > 1 && norm_topk;
    } else {
      if (scoring_func != "softmax") {
        return c.Error("scoring_func", absl::StrFormat("\"%s\" is not supported for deepseek_v2 "
                                                       "(only \"softmax\")", scoring_func));
      }
      if (method != "greedy" && method != "group_limited_greedy") {
        return c.Error("topk_method", absl::StrFormat("\"%s\" is not supported for deepseek_v2 "
                                                      "(greedy, group_limited_greedy)", method));
      }
      normalize = top_k > 1 && norm_topk;
      if (normalize) scale = 1.0;  // v2 scales only the unnormalised weights
    }
    if (v3 || method == "group_limited_greedy") {
      FFLITE_ASSIGN_OR_RETURN(n_group, c.Count("n_group", 1, experts, 1));
      FFLITE_ASSIGN_OR_RETURN(topk_group, c.Count("topk_group", 1, n_group, 1));
      if (experts % n_group != 0) {
        return c.Error("n_group", absl::StrFormat("%d does not divide n_routed_experts = %d",
                                                  n_group, experts));
      }
      if (n_group == 1) topk_group = 1;
      // The format's limits on grouped routing, checked here to name the keys: v3 scores a group
      // by its two best experts (HF's topk(2) fails on smaller groups too), and the kept groups
      // must hold top_k experts.
      const uint32_t per_group = experts / n_group;
      if (n_group > 1 && v3 && per_group < 2) {
        return c.Error("n_group", absl::StrFormat(
            "%d leaves %d expert per group of n_routed_experts = %d; deepseek_v3 scores a group by "
            "the sum of its top 2 experts, so each group needs at least 2", n_group, per_group,
            experts));
      }
      if (n_group > 1 && uint64_t{top_k} > uint64_t{topk_group} * per_group) {
        return c.Error("num_experts_per_tok", absl::StrFormat(
            "%d exceeds the %d experts in topk_group = %d of n_group = %d groups of %d", top_k,
            uint64_t{topk_group} * per_group, topk_group, n_group, per_group));
      }
    }
  }
  auto sparse = [&](uint32_t i) { return has_moe && i >= first_dense && i % freq == 0; };
  uint32_t d_ff = 0;
  for (uint32_t i = 0; i < layers; ++i) {
    if (!sparse(i)) {
      FFLITE_ASSIGN_OR_RETURN(d_ff, c.Dim("intermediate_size"));
      break;
    }
  }
  plan.metadata = {{"source.hidden_act", act_name}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    const std::string mlp = layer + ".mlp";
    const bool is_sparse = sparse(i);
    plan.sublayers.push_back({mlp, [=, &ctx]() -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = mlp;
      if (!is_sparse) {
        l.kind = LayerKind::kDense;
        FFLITE_ASSIGN_OR_RETURN(l.ffn, GatedFfn(ctx, mlp, GatedNames(), d, d_ff,
                                                "intermediate_size", act, false));
      } else {
        l.kind = LayerKind::kMoe;
        MoeSpec& m = l.moe;
        m.top_k = top_k;
        m.scoring = scoring;
        m.normalize_top_k = normalize;
        m.routed_scaling_factor = static_cast<float>(scale);
        m.n_group = n_group;
        m.topk_group = topk_group;
        m.group_scoring = group_scoring;
        FFLITE_ASSIGN_OR_RETURN(m.router, Tensor(ctx, mlp + ".gate.weight", {experts, d},
                                                 "[n_routed_experts, hidden_size]"));
        if (correction) {
          FFLITE_ASSIGN_OR_RETURN(m.score_correction_bias,
                                  Tensor(ctx, mlp + ".gate.e_score_correction_bias", {experts},
                                         "[n_routed_experts]"));
        }
        for (uint32_t e = 0; e < experts; ++e) {
          FFLITE_ASSIGN_OR_RETURN(
              FfnSpec f, GatedFfn(ctx, absl::StrFormat("%s.experts.%d", mlp, e), GatedNames(), d,
                                  moe_ff, "moe_intermediate_size", act, false));
          m.experts.push_back(std::move(f));
        }
        if (shared > 0) {
          FFLITE_ASSIGN_OR_RETURN(
              FfnSpec f, GatedFfn(ctx, mlp + ".shared_experts", GatedNames(), d, moe_ff * shared,
                                  "moe_intermediate_size * n_shared_experts", act, false));
          m.shared_experts.push_back(std::move(f));
        }
      }
      FFLITE_RETURN_IF_ERROR(PostAttentionPreNorm(ctx, layer, d, eps, /*unit_offset=*/false, &l));
      return l;
    }});
  }
  return plan;
}

}  // namespace converter
}  // namespace fflite
