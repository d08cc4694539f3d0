// qwen2_moe and qwen3_moe: softmax top-k routing (renormalised iff norm_topk_prob); some layers
// stay dense (decoder_sparse_step, mlp_only_layers). qwen2_moe adds one shared expert behind a
// sigmoid gate; qwen3_moe has routed experts only. Source: transformers models/qwen2_moe/
// modeling_qwen2_moe.py (Qwen2MoeSparseMoeBlock, Qwen2MoeMLP, Qwen2MoeDecoderLayer.__init__) and
// models/qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeSparseMoeBlock, Qwen3MoeDecoderLayer.__init__).
#include <algorithm>
#include <set>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/arch/arch.h"

namespace fflite {
namespace converter {
namespace {

// Where the two generations differ: the shared expert, and the config's defaults for absent keys
// (Qwen2MoeConfig: 60 experts, top 4; Qwen3MoeConfig: 128 experts, top 8).
struct QwenMoeVariant {
  int64_t default_experts;
  int64_t default_top_k;
  bool shared_expert;
};

absl::StatusOr<ArchPlan> ConvertQwenMoe(const ArchContext& ctx, const QwenMoeVariant& variant) {
  const HfConfig& c = ctx.config;
  ArchPlan plan;
  FFLITE_ASSIGN_OR_RETURN(plan.d_model, c.Dim("hidden_size"));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t layers, c.Count("num_hidden_layers", 1, 1 << 16));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t experts,
                          c.Count("num_experts", 0, 1 << 16, variant.default_experts));
  FFLITE_ASSIGN_OR_RETURN(const uint32_t step, c.Count("decoder_sparse_step", 1, 1 << 16, 1));
  FFLITE_ASSIGN_OR_RETURN(const bool norm_topk, c.Bool("norm_topk_prob", false));
  FFLITE_ASSIGN_OR_RETURN(const std::string act_name, c.String("hidden_act", "silu"));
  FFLITE_ASSIGN_OR_RETURN(const Activation act, HfActivation(c, "hidden_act", act_name));
  FFLITE_ASSIGN_OR_RETURN(const double eps, c.Epsilon("rms_norm_eps", 1e-6));
  std::set<int64_t> mlp_only;
  if (c.Has("mlp_only_layers")) {
    const nlohmann::json& v = c.json()["mlp_only_layers"];
    if (!v.is_array()) return c.Error("mlp_only_layers", "must be a list of layer indices");
    for (const nlohmann::json& x : v) {
      if (!x.is_number_integer()) {
        return c.Error("mlp_only_layers", "must be a list of layer indices (integers)");
      }
      // transformers ignores an index that names no layer. Such a config was written for another
      // depth or counts from 1: converting it would make the layer it meant sparse.
      const int64_t i = x.get<int64_t>();
      if (i < 0 || i >= layers) {
        return c.Error("mlp_only_layers",
                       absl::StrFormat("index %d is not a layer: num_hidden_layers is %d", i,
                                       layers));
      }
      mlp_only.insert(i);
    }
  }
  // Dense layers use intermediate_size; only read what the model's layers need.
  uint32_t d_ff = 0, moe_ff = 0, shared_ff = 0, top_k = 0;
  auto sparse = [&](uint32_t i) {
    return mlp_only.count(i) == 0 && experts > 0 && (i + 1) % step == 0;
  };
  bool any_dense = false, any_sparse = false;
  for (uint32_t i = 0; i < layers; ++i) (sparse(i) ? any_sparse : any_dense) = true;
  if (any_dense) {
    FFLITE_ASSIGN_OR_RETURN(d_ff, c.Dim("intermediate_size"));
  }
  if (any_sparse) {
    FFLITE_ASSIGN_OR_RETURN(moe_ff, c.Dim("moe_intermediate_size"));
    if (variant.shared_expert) {
      FFLITE_ASSIGN_OR_RETURN(shared_ff, c.Dim("shared_expert_intermediate_size"));
    }
    FFLITE_ASSIGN_OR_RETURN(top_k, c.Count("num_experts_per_tok", 1, experts,
                                           std::min<int64_t>(variant.default_top_k, experts)));
  }
  plan.metadata = {{"source.hidden_act", act_name}};
  const uint32_t d = plan.d_model;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string layer = absl::StrFormat("model.layers.%d", i);
    const std::string mlp = layer + ".mlp";
    const bool is_sparse = sparse(i), shared = variant.shared_expert;
    plan.sublayers.push_back({mlp, [&ctx, layer, mlp, d, d_ff, moe_ff, shared_ff, experts, top_k,
                                    norm_topk, act, eps, is_sparse,
                                    shared]() -> absl::StatusOr<LayerSpec> {
      LayerSpec l;
      l.name = mlp;
      if (!is_sparse) {
        l.kind = LayerKind::kDense;
        FFLITE_ASSIGN_OR_RETURN(l.ffn, GatedFfn(ctx, mlp, GatedNames(), d, d_ff,
                                                "intermediate_size", act, false));
      } else {
        l.kind = LayerKind::kMoe;
        l.moe.top_k = top_k;
        l.moe.scoring = Scoring::SOFTMAX;
        l.moe.normalize_top_k = norm_topk;
        FFLITE_ASSIGN_OR_RETURN(l.moe.router, Tensor(ctx, mlp + ".gate.weight", {experts, d},
                                                     "[num_experts, hidden_size]"));
        for (uint32_t e = 0; e < experts; ++e) {
          FFLITE_ASSIGN_OR_RETURN(
              FfnSpec f, GatedFfn(ctx, absl::StrFormat("%s.experts.%d", mlp, e), GatedNames(), d,
                                  moe_ff, "moe_intermediate_size", act, false));
          l.moe.experts.push_back(std::move(f));
        }
        if (shared) {
          // shared_expert_output = sigmoid(shared_expert_gate(x)) * shared_expert(x)
          FFLITE_ASSIGN_OR_RETURN(FfnSpec f,
                                  GatedFfn(ctx, mlp + ".shared_expert", GatedNames(), d, shared_ff,
                                           "shared_expert_intermediate_size", act, false));
          l.moe.shared_experts.push_back(std::move(f));
          FFLITE_ASSIGN_OR_RETURN(l.moe.shared_expert_gate,
                                  Tensor(ctx, mlp + ".shared_expert_gate.weight", {1, d},
                                         "[1, hidden_size]"));
        }
      }
      FFLITE_RETURN_IF_ERROR(PostAttentionPreNorm(ctx, layer, d, eps, /*unit_offset=*/false, &l));
      return l;
    }});
  }
  return plan;
}

}  // namespace

absl::StatusOr<ArchPlan> ConvertQwen2Moe(const ArchContext& ctx) {
  return ConvertQwenMoe(ctx, {60, 4, /*shared_expert=*/true});
}

absl::StatusOr<ArchPlan> ConvertQwen3Moe(const ArchContext& ctx) {
  return ConvertQwenMoe(ctx, {128, 8, /*shared_expert=*/false});
}

}  // namespace converter
}  // namespace fflite
