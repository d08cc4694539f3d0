// The work of one call (work.h).
#include "bench/work.h"

#include "backends/cpu/cpu_backend.h"

namespace fflite {
namespace bench {

Work CountWork(const Model& model) {
  Work w;
  // Bytes read: quantised matrices as stored (data + scales, read from the file), float ones at
  // `bytes_per_weight` (4 as packed, or the file's element size for the direct kernel).
  auto ffn = [](const FfnView& f, double bytes_per_weight, Work* out, double times) {
    const double matrix = static_cast<double>(f.d_model) * f.d_ff_padded;
    const double params = matrix * (f.gated ? 3 : 2);
    for (const TensorView* t : {&f.up, &f.gate, &f.down}) {
      if (!t->present()) continue;
      out->weight_bytes +=
          times * (t->quantized() ? static_cast<double>(t->size) : matrix * bytes_per_weight);
      out->quantized |= t->quantized();
      out->has_i8 |= t->dtype == DType::I8;
      out->has_i4 |= t->dtype == DType::I4;
    }
    out->flops_per_token += times * 2.0 * params;
  };
  auto f32_ffn = [](const FfnView& f) {
    return 4.0 * f.d_model * f.d_ff_padded * (f.gated ? 3 : 2);
  };
  for (const LayerView& l : model.layers()) {
    w.non_expert_bytes += 4.0 * model.d_model() * (l.norm.present ? 2 : 0);
    if (l.kind == LayerKind::kDense) {
      // Dense f16/bf16 layers decode on the file's rows (the direct kernel); f32 ones packed.
      bool half = true;
      for (const TensorView* t : {&l.ffn.up, &l.ffn.gate, &l.ffn.down}) {
        if (t->present() && !t->quantized() && t->dtype == DType::F32) half = false;
      }
      ffn(l.ffn, half ? 2.0 : 4.0, &w, 1.0);
      w.reads_file |= half || l.ffn.down.value_rows();
      if (l.ffn.gated && l.ffn.activation == Activation::RELU && !l.ffn.up.quantized()) {
        w.reglu_up_bytes += (half || l.ffn.down.value_rows() ? DTypeSize(l.ffn.up.dtype) : 4.0) *
                            l.ffn.d_model * l.ffn.d_ff_padded;
      }
      if (l.ffn.down.value_rows()) {
        w.value_rows_bytes += static_cast<double>(DTypeSize(l.ffn.down.dtype)) *
                              l.ffn.d_model * l.ffn.d_ff_padded;
      }
      w.non_expert_bytes += f32_ffn(l.ffn);
    } else {
      w.moe = true;
      for (const FfnView& e : l.moe.experts) w.expert_bytes += CpuPackedFfnBytes(e);
      w.non_expert_bytes += 4.0 * (l.moe.router.numel() + l.moe.shared_expert_gate.numel());
      for (const FfnView& s : l.moe.shared_experts) w.non_expert_bytes += f32_ffn(s);
      w.weight_bytes += 4.0 * l.moe.router.numel();
      w.flops_per_token += 2.0 * l.moe.router.numel();
      const double before = w.flops_per_token;
      ffn(l.moe.experts[0], static_cast<double>(DTypeSize(l.moe.experts[0].up.dtype)), &w,
          l.moe.top_k);
      w.routed_flops_per_token += w.flops_per_token - before;
      for (const FfnView& s : l.moe.shared_experts) ffn(s, 4.0, &w, 1.0);
    }
  }
  return w;
}

}  // namespace bench
}  // namespace fflite
