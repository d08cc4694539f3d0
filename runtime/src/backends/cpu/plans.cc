// The CPU backend's plans of each layer (plans.h).
#include "backends/cpu/plans.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "format/writer.h"
#include "layer/layer_runner.h"

namespace fflite {

namespace {

// `norm` of layer `l` (its norm, or its output norm: `what`), pre: whether it feeds the body.
absl::Status PlanNorm(const NormView& norm, bool pre, size_t index, const char* what, size_t d,
                      NormPlan* p) {
  if (!norm.present) return absl::OkStatus();
  const std::string name = absl::StrFormat("layers[%d].%s", index, what);
  p->kind = norm.kind;
  p->pre = pre;
  p->eps = norm.eps;
  if (!p->weight.Allocate(d)) return absl::ResourceExhaustedError(name + ": weight");
  NormWeightAsApplied(norm, p->weight.data());
  std::vector<float> storage;
  if (norm.bias.present()) {
    const float* b = AsF32(norm.bias, &storage);
    if (!p->bias.Allocate(d)) return absl::ResourceExhaustedError(name + ": bias");
    std::memcpy(p->bias.data(), b, d * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status PlanMoe(const Model& model, const LayerView& l, size_t index, size_t d,
                     const Kernels& kernels, const PackChoice& choice, const EngineContext& ctx,
                     ExpertStore* store, MoePlan* mp) {
  const MoeView& m = l.moe;
  const std::string name = absl::StrFormat("layers[%d].moe", index);
  const size_t e = m.num_experts;
  mp->routing = MakeRoutingParams(m);
  mp->num_experts = m.num_experts;
  mp->top_k = m.top_k;
  mp->shared_gate = m.shared_expert_gate.present();
  mp->router_out = e + (mp->shared_gate ? 1 : 0);
  // [router_out, d] f32 weights and [router_out] bias (or none).
  std::vector<float> w(mp->router_out * d), b;
  ConvertElements(m.router.dtype, m.router.data, DType::F32,
                  reinterpret_cast<uint8_t*>(w.data()), e * d);
  if (mp->shared_gate) {
    ConvertElements(m.shared_expert_gate.dtype, m.shared_expert_gate.data, DType::F32,
                    reinterpret_cast<uint8_t*>(w.data() + e * d), d);
  }
  if (m.router_bias.present()) {
    b.assign(mp->router_out, 0.0f);
    ConvertElements(m.router_bias.dtype, m.router_bias.data, DType::F32,
                    reinterpret_cast<uint8_t*>(b.data()), e);
  }
  // One operator (a few KiB to a few hundred KiB), run on the caller's thread.
  FFLITE_RETURN_IF_ERROR(PackMatrixF32(w.data(), b.empty() ? nullptr : b.data(), mp->router_out,
                                       d, -std::numeric_limits<float>::infinity(),
                                       /*slice_bytes=*/0, EngineContext{}, name + ".router",
                                       &mp->router));
  mp->shared.resize(m.shared_experts.size());
  for (size_t s = 0; s < m.shared_experts.size(); ++s) {
    // Every token reads the shared experts: their scales are checked now, with the packing.
    FFLITE_RETURN_IF_ERROR(model.CheckFfnScales(m.shared_experts[s]));
    FFLITE_RETURN_IF_ERROR(PackFfn(m.shared_experts[s], kernels, choice, ctx,
                                   absl::StrFormat("%s.shared_experts[%d]", name, s),
                                   &mp->shared[s]));
  }
  FFLITE_ASSIGN_OR_RETURN(mp->first_slot, store->AddLayer(index, m));
  return absl::OkStatus();
}

}  // namespace

void NormPlan::Apply(const Kernels& kernels, size_t d, const float* in, float* out) const {
  if (kind == NormKind::LAYER_NORM) {
    kernels.layer_norm(d, in, weight.data(), bias.size() != 0 ? bias.data() : nullptr, eps, out);
  } else {
    kernels.rms_norm(d, in, weight.data(), eps, out);
  }
}

absl::Status PlanLayers(const Model& model, const Kernels& kernels, const PackChoice& choice,
                        const EngineContext& ctx, ExpertStore* store,
                        std::vector<LayerPlan>* plans, ModelSizes* sizes) {
  const size_t d = model.d_model();
  ModelSizes& z = *sizes;
  plans->resize(model.layers().size());
  for (size_t i = 0; i < model.layers().size(); ++i) {
    const LayerView& l = model.layers()[i];
    LayerPlan& p = (*plans)[i];
    p.residual = l.residual;
    FFLITE_RETURN_IF_ERROR(PlanNorm(l.norm, StepsOf(l).pre_norm, i, "norm", d, &p.norm));
    FFLITE_RETURN_IF_ERROR(PlanNorm(l.output_norm, false, i, "output_norm", d, &p.output_norm));
    if (l.kind == LayerKind::kMoe) {
      p.moe = true;
      z.any_moe = true;
      FFLITE_RETURN_IF_ERROR(PlanMoe(model, l, i, d, kernels, choice, ctx, store, &p.moe_plan));
      const MoeView& m = l.moe;
      z.max_ff = std::max<size_t>(z.max_ff, m.experts[0].d_ff_padded);
      z.max_expert_ff = std::max<size_t>(z.max_expert_ff, m.experts[0].d_ff_padded);
      for (const FfnView& s : m.shared_experts) {
        z.max_ff = std::max<size_t>(z.max_ff, s.d_ff_padded);
      }
      z.max_experts = std::max<size_t>(z.max_experts, m.num_experts);
      z.max_k = std::max<size_t>(z.max_k, m.top_k);
      z.max_groups = std::max<size_t>(z.max_groups, m.n_group);
      z.max_router_out = std::max(z.max_router_out, p.moe_plan.router_out);
      for (const FfnView& f : m.experts) {
        z.any_quantized |= f.AnyQuantized();
        z.any_quantized_expert |= f.AllQuantized();
      }
      for (const FfnView& f : m.shared_experts) z.any_quantized |= f.AnyQuantized();
      continue;
    }
    const FfnView& f = l.ffn;
    p.file.Init(f);
    p.scales_checked = !f.AnyQuantized();
    if (f.AllQuantized()) {
      // Nothing to pack: PackFfn converts the biases only.
      FFLITE_RETURN_IF_ERROR(
          PackFfn(f, kernels, choice, ctx, absl::StrFormat("layers[%d].ffn", i), &p.own_ffn));
      p.packed = true;
    } else {
      p.direct_small = true;
      for (const TensorView* t : {&f.up, &f.gate, &f.down}) {
        if (t->present() && !t->quantized() && t->dtype == DType::F32) p.direct_small = false;
      }
      // Value rows: few-token calls read only the rows of the neurons that fire, which the
      // packed form cannot do, whatever the dtype.
      p.direct_small |= f.down.value_rows();
      z.any_direct_dense |= p.direct_small;
    }
    z.max_ff = std::max<size_t>(z.max_ff, f.d_ff_padded);
    z.any_quantized |= f.AnyQuantized();
  }
  // Norms, routers and shared experts are copied or packed now: hand their file pages back.
  // (Dense layers' pages are released when they are packed.)
  for (const LayerView& l : model.layers()) {
    model.ReleaseTensorPages(l.norm.weight);
    model.ReleaseTensorPages(l.norm.bias);
    if (l.kind == LayerKind::kDense) continue;
    for (const TensorView* t : {&l.moe.router, &l.moe.router_bias, &l.moe.score_correction_bias,
                                &l.moe.shared_expert_gate}) {
      model.ReleaseTensorPages(*t);
    }
    for (const FfnView& s : l.moe.shared_experts) {
      ReleaseFfnPages(model, s, /*keep_quantized=*/true);
    }
  }
  return absl::OkStatus();
}

}  // namespace fflite
