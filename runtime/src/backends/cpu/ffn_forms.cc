// The forms of an FFN's weights (ffn_forms.h).
#include "backends/cpu/ffn_forms.h"

#include <limits>
#include <utility>

#include "base/status_macros.h"

namespace fflite {

ActKind ActKindOf(Activation activation) {
  switch (activation) {
    case Activation::GELU_ERF: return ActKind::kGeluErf;
    case Activation::GELU_TANH: return ActKind::kGeluTanh;
    case Activation::SILU: return ActKind::kSilu;
    case Activation::SIGMOID: return ActKind::kSigmoid;
    case Activation::SWIGLU_OAI: return ActKind::kSwigluOai;
    default: return ActKind::kRelu;  // RELU (the loader refuses unknown activations)
  }
}

std::array<const TensorView*, 6> FfnTensors(const FfnView& f) {
  return {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias};
}

uint64_t FileBytes(const FfnView& f) {
  uint64_t bytes = 0;
  for (const TensorView* t : FfnTensors(f)) {
    if (t->present()) bytes += t->size;
  }
  return bytes;
}

absl::Status PackFfn(const FfnView& f, const Kernels& kernels, const PackChoice& choice,
                     const EngineContext& ctx, const std::string& name, PackedFfn* p) {
  p->view = &f;
  p->gated = f.gated;
  p->d_ff = f.d_ff_padded;
  // A plain ReLU FFN needs no activation pass: the up operator clamps at 0.
  const bool fuse_relu = !f.gated && f.activation == Activation::RELU && !f.up.quantized();
  p->activation = fuse_relu ? nullptr : ActivationOf(kernels, f);
  const float inf = std::numeric_limits<float>::infinity();
  auto pack = [&](const TensorView& w, const TensorView& b, float out_min, const char* what,
                  PackedMatrix* m, std::vector<float>* bias) {
    if (w.quantized()) {
      if (b.present() && b.dtype != DType::F32) AsF32(b, bias);
      return absl::OkStatus();
    }
    return PackMatrix(w, b, out_min, choice, ctx, name + what, m);
  };
  FFLITE_RETURN_IF_ERROR(
      pack(f.up, f.up_bias, fuse_relu ? 0.0f : -inf, ".up", &p->up, &p->up_bias));
  if (f.gated) {
    FFLITE_RETURN_IF_ERROR(pack(f.gate, f.gate_bias, -inf, ".gate", &p->gate, &p->gate_bias));
  }
  return pack(f.down, f.down_bias, -inf, ".down", &p->down, &p->down_bias);
}

uint64_t PackedFfnBytes(const FfnView& f, const PackChoice& choice) {
  // A quantised matrix is not packed: the packed form reads it from the file.
  auto bytes = [&](const TensorView& w, uint64_t out, uint64_t in) {
    return w.quantized() ? w.size : PackedMatrixBytes(out, in, w.dtype, choice);
  };
  const uint64_t d = f.d_model, ff = f.d_ff_padded;
  return bytes(f.up, ff, d) + (f.gated ? bytes(f.gate, ff, d) : 0) + bytes(f.down, d, ff);
}

// Another session of the same model may be reading these pages at this moment (packing the same
// expert): that is safe, because the mapping is private and read-only, so MADV_DONTNEED only
// drops page-table entries of clean file pages, and a later touch (in any thread) faults them in
// again from the page cache or the file, with the same contents.
void ReleaseFfnPages(const Model& model, const FfnView& f, bool keep_quantized) {
  for (const TensorView* t : FfnTensors(f)) {
    if (!(keep_quantized && t->quantized())) model.ReleaseTensorPages(*t);
  }
}

void PopulateFfnPages(const Model& model, const FfnView& f) {
  for (const TensorView* t : FfnTensors(f)) model.PopulateTensorPages(*t);
}

const float* DirectBias(const TensorView& b, const std::vector<float>& converted) {
  if (!b.present()) return nullptr;
  if (!converted.empty()) return converted.data();
  return reinterpret_cast<const float*>(b.data);
}

void FileFfn::Init(const FfnView& f) {
  view = &f;
  for (auto [t, converted] : {std::pair{&f.up_bias, &up_bias}, std::pair{&f.gate_bias, &gate_bias},
                              std::pair{&f.down_bias, &down_bias}}) {
    if (t->present() && t->dtype != DType::F32) AsF32(*t, converted);
  }
}

}  // namespace fflite
