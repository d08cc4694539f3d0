// The CPU backend's scratch: one allocation, made (zero) at session creation for the model's
// largest layer and the options' token counts, its regions named below with their shapes. Run
// allocates nothing; the pages become resident as calls first touch them (AlignedBuffer).
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_SCRATCH_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_SCRATCH_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "backends/cpu/plans.h"
#include "base/aligned_buffer.h"

namespace fflite {

// What the scratch is made for.
struct ScratchShape {
  size_t d = 0;          // d_model
  size_t chunk = 1;      // tokens per pass of a dense layer, and per expert batch
  size_t moe_chunk = 1;  // tokens per pass of an MoE layer
  size_t direct_max = 0; // the direct kernel's most tokens in a dense call
  ModelSizes model;
  size_t gemm_units = 0;  // the gemm engine's packed activations (0: no gemm engine)
  // Experts alone (experts_alone.h), where a call can take that path: its extra threads, and
  // each one's packed activations.
  size_t alone_threads = 0;
  size_t alone_units = 0;
};

struct CpuScratch {
  // The XNNPACK inputs carry kXnnTailBytes of readable slack after them.
  // [rows, d_model] + tail: the pass's (pre-normed) input; rows = max(chunk, moe_chunk) with MoE
  // layers, else chunk.
  float* in = nullptr;
  // [chunk, max d_ff_padded] + tail: up's output, then act ⊙ up (the hidden activations); the
  // file form's [direct rows, DirectStride(d_ff_padded)] share it (direct rows: chunk where a
  // routed expert is quantised whole, else direct_max).
  float* hidden = nullptr;
  float* gate = nullptr;  // the same shape, no tail: gate's output
  float* out = nullptr;   // [rows, d_model]: the body's output (FFN, MoE sum), then + residual
  // [chunk, DirectStride(d_model)] + tail: one expert's tokens gathered (a dense call's for the
  // direct kernel); with MoE layers or dense layers of the direct path.
  float* gathered = nullptr;
  float* expert_out = nullptr;  // [chunk, d_model]: one expert's output (MoE)
  float* logits = nullptr;      // [moe_chunk, max router_out] (MoE)
  uint32_t* gemm = nullptr;     // [gemm_units]: the gemm engine's packed activations
  size_t gemm_units = 0;
  // Experts alone: their outputs by grouping row, [moe_chunk · max top_k, d_model]; tasks 1 ..
  // (the extra threads'), each [chunk, DirectStride(d_model)] tokens then gate and hidden
  // [chunk, DirectStride(max expert d_ff_padded)] (+ tail), and alone_units of packed activations.
  float* routed_out = nullptr;
  float* task_floats = nullptr;
  uint32_t* task_units = nullptr;

  // Places and allocates every region for `shape`. ResourceExhausted names what did not fit.
  absl::Status Allocate(const ScratchShape& shape);
  size_t bytes() const { return arena_.size(); }

 private:
  AlignedBuffer<uint8_t> arena_;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_SCRATCH_H_
