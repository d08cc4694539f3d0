// What each layer runs in the CPU backend, planned once at session creation: the norm's f32
// weights, a dense layer's forms and path, an MoE layer's router (with the shared-expert gate as
// one more row), shared experts and the slots of its routed experts; and the sizes the scratch
// is made for.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_PLANS_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_PLANS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "backends/cpu/engines.h"
#include "backends/cpu/expert_store.h"
#include "backends/cpu/ffn_forms.h"
#include "base/aligned_buffer.h"
#include "format/model.h"
#include "kernels/kernels.h"
#include "moe/routing.h"

namespace fflite {

struct NormPlan {
  NormKind kind = NormKind::INVALID;  // INVALID: no norm
  bool pre = false;
  float eps = 0.0f;
  AlignedBuffer<float> weight;  // [d_model], f32, unit offset added
  AlignedBuffer<float> bias;    // [d_model] or empty

  bool present() const { return kind != NormKind::INVALID; }
  // out[d] = the norm of in[d] by `kernels`.
  void Apply(const Kernels& kernels, size_t d, const float* in, float* out) const;
};

// What an MoE layer runs besides its routed experts (which live in the ExpertStore).
struct MoePlan {
  RoutingParams routing;
  uint32_t num_experts = 0, top_k = 0;
  // logits[n, router_out] = h · [router; shared_gate]ᵀ + [router_bias; 0]: the shared-expert gate
  // (Qwen2-MoE) rides along as one more output row of the router's operator.
  PackedMatrix router;
  size_t router_out = 0;  // num_experts, + 1 with a shared-expert gate
  bool shared_gate = false;
  size_t first_slot = 0;  // the layer's experts are the store's slots [first_slot, + num_experts)
  std::vector<PackedFfn> shared;
};

// What one layer runs.
struct LayerPlan {
  bool moe = false;
  // Dense layers, prepared on first use (of a layer, only MoE routers and shared experts are
  // packed at session creation):
  //  - f16/bf16 float matrices (`direct_small`): calls of at most the direct limit run the
  //    direct kernel on the file's rows, which reads half the bytes of packed f32; larger calls
  //    pack the float matrices the first time. The path depends only on the call's token count.
  //  - f32: packed on the first call of any size (the same bytes either way: one form in memory,
  //    the file's pages released after packing).
  //  - every matrix quantised: the quantised engine on the file, never packed (`packed` from
  //    the start: PackFfn only converts the biases).
  //  - a VALUE_ROWS down matrix: few-token calls read only the rows of the neurons that fire,
  //    which the packed form cannot do (`direct_small` whatever the dtype).
  // The packed form: the model's shared one (Model::shared_forms: made once for every session,
  // where every float matrix runs on the gemm engine, whose panels are read-only) or the
  // session's own (XNNPACK's operators keep per-call state; an all-quantised layer's biases).
  PackedFfn own_ffn;
  std::shared_ptr<const PackedFfn> shared_ffn;
  const PackedFfn& ffn() const { return shared_ffn != nullptr ? *shared_ffn : own_ffn; }
  bool packed = false;
  bool direct_small = false;
  // Whether the scales of the layer's quantised matrices were found finite (Model::CheckScales,
  // on a dense layer's first call); true from the start where there are none to check. (An MoE
  // layer's shared experts are checked at session creation, its routed experts by the store.)
  bool scales_checked = true;
  FileFfn file;
  MoePlan moe_plan;
  NormPlan norm;
  NormPlan output_norm;  // a sandwich's norm of the body's output (before the residual)
  bool residual = false;
};

// The largest sizes over the model's layers, which the scratch is made for.
struct ModelSizes {
  size_t max_ff = 0;          // d_ff_padded of any FFN
  size_t max_expert_ff = 0;   // of any routed expert
  size_t max_experts = 0, max_k = 0, max_groups = 1, max_router_out = 0;
  bool any_moe = false;
  bool any_quantized = false;         // some FFN has a quantised matrix
  bool any_quantized_expert = false;  // some routed expert is quantised whole
  bool any_direct_dense = false;      // some dense layer runs few-token calls on the file
};

// Plans every layer of `model`: norms copied, routers and shared experts packed now with `choice`
// on ctx's threads (their file pages then released, as are the norms'; quantised shared experts'
// scales checked), routed experts added to `store`, dense layers left to pack (and their scales
// to check) on first use. Errors: ResourceExhausted (memory, too many experts), Internal (XNNPACK
// refused an operator), DataLoss (a shared expert's scale is not finite), naming the layer.
absl::Status PlanLayers(const Model& model, const Kernels& kernels, const PackChoice& choice,
                        const EngineContext& ctx, ExpertStore* store,
                        std::vector<LayerPlan>* plans, ModelSizes* sizes);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_PLANS_H_
