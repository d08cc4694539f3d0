// The forms an FFN's weights take in the CPU backend: packed for the engines that multiply many
// tokens (PackedFfn), and the file's own bytes for the direct and quantised engines (FileFfn), with
// their sizes (what an expert budget counts) and the handling of the file's pages.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_FFN_FORMS_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_FFN_FORMS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "backends/cpu/engines.h"
#include "format/model.h"
#include "kernels/kernels.h"

namespace fflite {

// The kernels' id of a (validated) activation.
ActKind ActKindOf(Activation activation);
// The activation kernel of `kernels` for f's activation.
inline F32ActivationFn ActivationOf(const Kernels& kernels, const FfnView& f) {
  return kernels.Activation(ActKindOf(f.activation));
}

// Every tensor of an FFN (absent ones included: !present()).
std::array<const TensorView*, 6> FfnTensors(const FfnView& f);

// The FFN's bytes in the file (what its file form keeps resident).
uint64_t FileBytes(const FfnView& f);

// One FFN (a dense layer's, a routed expert's or a shared expert's) as packed operators. A
// quantised matrix (I8/I4) is not packed: the quantised engine reads it from the file (its
// PackedMatrix stays empty, and its bias is kept here as f32).
struct PackedFfn {
  const FfnView* view = nullptr;
  PackedMatrix up, gate, down;  // gate: only when gated (each empty when quantised)
  bool gated = false;
  F32ActivationFn activation = nullptr;  // nullptr: fused into `up` (non-gated ReLU clamp)
  size_t d_ff = 0;                       // d_ff_padded: the padding is exact (zeros)
  // f32 biases of the quantised matrices when the file stores them in f16/bf16 (else empty).
  std::vector<float> up_bias, gate_bias, down_bias;

  // Bytes held (packed matrices, f32 biases).
  uint64_t bytes() const {
    return up.bytes() + gate.bytes() + down.bytes() +
           (up_bias.size() + gate_bias.size() + down_bias.size()) * sizeof(float);
  }
};

// Packs f's float matrices for `choice` on ctx's threads (a plain ReLU FFN gets its activation
// fused into up's clamp). Errors: the engines', naming `name`.
absl::Status PackFfn(const FfnView& f, const Kernels& kernels, const PackChoice& choice,
                     const EngineContext& ctx, const std::string& name, PackedFfn* p);

// Bytes of packed weights one FFN takes with `choice` (what the budget counts): quantised
// matrices at their file size (read in place).
uint64_t PackedFfnBytes(const FfnView& f, const PackChoice& choice);

// The packed operators own copies of the weights: hands the file's pages back (see the .cc for
// why this is safe while other sessions read them). `keep_quantized`: leaves the pages of
// quantised matrices, which are read in place.
void ReleaseFfnPages(const Model& model, const FfnView& f, bool keep_quantized = false);
// Maps the FFN's file pages in at once (before the direct kernel reads all of them).
void PopulateFfnPages(const Model& model, const FfnView& f);

// A bias for the direct kernel: absent, the file's f32 values, or an f32 copy of f16/bf16 ones.
const float* DirectBias(const TensorView& b, const std::vector<float>& converted);

// An FFN as the direct kernel and the quantised engine run it: on the file's weights, with f32
// copies of the biases the file stores in f16/bf16 (else empty: the file's own are used).
struct FileFfn {
  const FfnView* view = nullptr;
  std::vector<float> up_bias, gate_bias, down_bias;

  void Init(const FfnView& f);
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_FFN_FORMS_H_
