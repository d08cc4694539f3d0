// The cuda backend's weights on the device: every layer's tensors placed in one allocation at
// session creation (f32/f16/bf16 as stored, quantised matrices dequantised to f32 or, where asked,
// I8/I4 kept quantised in cuda_quant.h's layout; norms' weights with their unit offset), and the
// tables of the fused MoE decode. Needs the CUDA headers.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_WEIGHTS_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_quant.h"
#include "format/model.h"

namespace fflite {

using cuda::WType;

struct DevMatrix {
  const void* data = nullptr;  // quantised types: the codes
  const uint16_t* scales = nullptr;  // quantised types: a scale record per row (cuda_quant.h)
  WType type = WType::kF32;
  uint32_t rows = 0, cols = 0;
  bool quantised() const { return cuda::IsQuantised(type); }
};

struct DevFfn {
  DevMatrix up, gate, down;
  const float* up_bias = nullptr;  // null when absent
  const float* gate_bias = nullptr;
  const float* down_bias = nullptr;
  uint8_t activation = 0;
  bool gated = false;
  uint32_t ff = 0;  // d_ff_padded
  float* scale = nullptr;  // neuron edits [ff] in device memory (owned by the backend) or null
};

struct DevNorm {
  bool present = false, layer_norm = false, pre = false;
  float eps = 0.0f;
  const float* weight = nullptr;  // unit offset applied
  const float* bias = nullptr;
};

struct DevLayer {
  bool moe = false;
  bool residual = false;
  DevNorm norm;
  DevNorm output_norm;  // a sandwich's, on the body's output before the residual
  DevFfn ffn;  // dense
  // MoE
  DevMatrix router;
  const float* router_bias = nullptr;
  route::Params route{};  // score_correction_bias in device memory
  std::vector<DevFfn> experts, shared;
  DevMatrix shared_gate;  // rows 0 when absent
  // A few tokens run every chosen expert in one launch per step (cuda::ExpertsHidden) where the
  // experts allow it (FusedDecodeTypes): their table, routed experts then shared ones.
  bool fused = false;
  WType fused_hidden_type = WType::kF32;  // up and gate
  WType fused_down_type = WType::kF32;
  cuda::ExpertPtrs* table = nullptr;  // device memory
  uint32_t max_ff = 0;                // of the experts in the table
  size_t counts_at = 0;               // where fused: its first counter in the device counters
};

// The offset of `bytes` placed after *total (256-byte aligned, as cuBLAS and 16-byte loads like),
// and *total advanced past them: the layout of one allocation holding several buffers.
uint64_t PlaceAfter(uint64_t* total, uint64_t bytes);

// Bytes of one element of a float matrix type (kF32, kF16, kBF16).
size_t TypeBytes(WType t);

// Whether the fused decode kernels can run a MoE layer's experts, and their weight types: one
// type for every routed and shared expert's up and gate, one for their down (a GGUF Q4_K_M file
// holds Q4_K up/gate and Q6_K down experts), one activation, rows of 16-byte multiples at 16-byte
// aligned addresses (the kernels' loads; quantised: columns a multiple of the values in 16 bytes of
// codes), and top_k within CombineExperts' limit.
bool FusedDecodeTypes(const DevLayer& l, uint32_t d, WType* hidden, WType* down);

// An expert's entry in a fused layer's table.
cuda::ExpertPtrs ExpertEntry(const DevFfn& f);

// Places tensors in one device allocation. Run twice: first with no base to size it, then with the
// allocation to copy (conversions happen only then).
class Arena {
 public:
  explicit Arena(uint8_t* base) : base_(base) {}
  uint64_t size() const { return size_; }
  const absl::Status& status() const { return status_; }

  const void* PlaceRaw(const void* src, uint64_t bytes);
  // `count` floats produced by fill(out) on the host.
  const float* PlaceFloats(uint64_t count, const std::function<void(float*)>& fill);
  // A quantised matrix t (cuda::KeepsQuantisedOnDevice) in cuda_quant.h's layout: its codes, then
  // its scales.
  void PlaceQuant(const TensorView& t, cuda::QKind kind, const void** codes,
                  const uint16_t** scales);

 private:
  uint8_t* Reserve(uint64_t bytes);
  uint8_t* base_;
  uint64_t size_ = 0;
  absl::Status status_;
  std::vector<float> staging_;
  std::vector<uint8_t> codes_staging_;
  std::vector<uint16_t> scales_staging_;
};

// Every layer of `model` placed by `arena` (the sizing pass or the copying one). keep_quantised:
// I8/I4 matrices stay quantised (cuda_quant.h) where the kernels take them (not a shared
// expert's gate, which CombineExperts reads as floats); otherwise every quantised matrix is
// dequantised to f32.
std::vector<DevLayer> PlaceModel(Arena* a, const Model& model, bool keep_quantised);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_WEIGHTS_H_
