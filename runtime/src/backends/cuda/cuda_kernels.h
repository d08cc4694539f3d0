// The cuda backend's small kernels, declared for its host code (cuda_backend.cc). Every launcher
// queues work on `stream` and returns the launch's error (cudaGetLastError); none allocates.
// Matrices are row-major; "rows of a [n, d] buffer" means n rows of d floats.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_KERNELS_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/cuda_quant.h"
#include "moe/route_token.h"

namespace fflite {
namespace cuda {

// How a weight matrix is stored on the device: f32/f16/bf16 as stored (quantised matrices
// dequantised to f32 on upload), or kQ8 .. kQ2K: quantised matrices kept quantised in
// cuda_quant.h's layout of that kind (codes and scale records; FFLITE_CUDA_QUANT=packed), read by
// GemvQuant, DequantRows and the MoE decode kernels.
enum class WType : uint8_t { kF32, kF16, kBF16, kQ8, kQ4, kQ4K, kQ6K, kQ5K, kQ2K };

// Whether `type` is kept quantised, and its layout's kind (and back).
constexpr bool IsQuantised(WType type) { return type >= WType::kQ8; }
constexpr QKind KindOf(WType type) {
  return static_cast<QKind>(static_cast<uint8_t>(type) - static_cast<uint8_t>(WType::kQ8));
}
constexpr WType TypeOf(QKind kind) {
  return static_cast<WType>(static_cast<uint8_t>(kind) + static_cast<uint8_t>(WType::kQ8));
}
static_assert(KindOf(WType::kQ4K) == QKind::kQ4K && KindOf(WType::kQ6K) == QKind::kQ6K &&
                  KindOf(WType::kQ5K) == QKind::kQ5K && KindOf(WType::kQ2K) == QKind::kQ2K &&
                  TypeOf(QKind::kQ8) == WType::kQ8 && TypeOf(QKind::kQ4) == WType::kQ4,
              "WType's quantised values follow QKind's order");

// y[t, r] = Σ_c w[r, c] · x[t, c] for t < n, r < rows, in f32 with f32 activations (no rounding
// of x): the decode path and the router. x: [n, cols] with row stride ldx; y: [n, rows] with row
// stride ldy. Each weight row is read once per group of up to 8 tokens.
cudaError_t Gemv(WType type, const void* w, uint32_t rows, uint32_t cols, const float* x,
                 size_t ldx, size_t n, float* y, size_t ldy, cudaStream_t stream);

// Gemv of a quantised matrix (IsQuantised; cuda_quant.h's layout: codes, a scale record per row):
// y[t, r] = Σ_j weight(r, j) · x[t, j], each lane's 16 or 32 values summed in f32 and then
// scaled by their scale (per block, or half-block: kQ6K, kQ2K), less their min times their Σx
// where there is one (kQ4K, kQ5K, kQ2K). Another type: cudaErrorInvalidValue.
cudaError_t GemvQuant(WType type, const void* codes, const uint16_t* scales, uint32_t rows,
                      uint32_t cols, const float* x, size_t ldx, size_t n, float* y, size_t ldy,
                      cudaStream_t stream);

// out[i, j] = weight (first_row + i, j) of a quantised matrix as f32 (as the file's
// dequantisation: WeightAt), i < count, j < cols: the rows a prefill product takes in turn.
cudaError_t DequantRows(WType type, const void* codes, const uint16_t* scales, uint32_t first_row,
                        uint32_t count, uint32_t cols, float* out, cudaStream_t stream);

// out[i] = in[i] rounded to nearest even as f16 (type kF16) or bf16 (kBF16), i < count.
cudaError_t ConvertF32(WType type, const float* in, size_t count, void* out, cudaStream_t stream);

// The activation (schema's Activation values) in f32, in place on up [n, ff]:
//   plain: up = s · act(up + up_bias)
//   gated: up = s · act(gate + gate_bias) · (up + up_bias)
// Biases may be null; s: the neuron edits [ff], or 1 where `scale` is null.
cudaError_t Activate(uint8_t activation, bool gated, float* up, const float* gate,
                     const float* up_bias, const float* gate_bias, const float* scale, size_t n,
                     uint32_t ff, cudaStream_t stream);

// LayerNorm (layer_norm) or RMSNorm of each row of in [n, d] into out, statistics in double:
//   (x - mean) / sqrt(var + eps) · weight + bias        x / sqrt(mean(x²) + eps) · weight
// `weight` already holds the unit offset where the model has one; bias may be null.
cudaError_t Norm(bool layer_norm, const float* in, size_t n, uint32_t d, const float* weight,
                 const float* bias, float eps, float* out, cudaStream_t stream);

// y[t, i] += b[i] over [n, d].
cudaError_t AddBias(float* y, const float* b, size_t n, uint32_t d, cudaStream_t stream);

// out = f [+ x] over [n, d] (x may be null).
cudaError_t Residual(const float* f, const float* x, size_t n, uint32_t d, float* out,
                     cudaStream_t stream);

// out[j, :] = in[tokens[j], :] for j < count, rows of d.
cudaError_t Gather(const float* in, const uint32_t* tokens, size_t count, uint32_t d, float* out,
                   cudaStream_t stream);

// acc[tokens[j], :] += weights[j] · f[j, :] for j < count (distinct tokens).
cudaError_t ScatterAdd(const float* f, const uint32_t* tokens, const float* weights, size_t count,
                       uint32_t d, float* acc, cudaStream_t stream);

// acc[t, :] += s · f[t, :] over [n, d], s = sigmoid(gate_logit[t]) or 1 if gate_logit is null.
cudaError_t AddGated(const float* f, const float* gate_logit, size_t n, uint32_t d, float* acc,
                     cudaStream_t stream);

// One expert's weights for the MoE decode kernels below (device pointers; biases and scale may
// be null). Every up and gate matrix of a table has the type ExpertsHidden is given, every down
// matrix the type ExpertsDown is given, and their rows are 16-byte aligned (cols a multiple of
// 16 bytes of the type; quantised: of the values in 16 bytes of codes, 16 or 32, with each
// matrix's scale records, cuda_quant.h).
struct ExpertPtrs {
  const void* up;
  const void* gate;  // null when not gated
  const void* down;
  const float* up_bias;
  const float* gate_bias;
  const float* down_bias;
  const float* scale;  // neuron edits [ff]
  uint32_t ff;         // d_ff_padded: up/gate rows, down cols
  uint32_t reserved;
  const uint16_t* up_scales;  // quantised types only, else null
  const uint16_t* gate_scales;
  const uint16_t* down_scales;
};

// The MoE layer of a few tokens in three launches, no host round trip. Slots: n · k routed ones
// (slot t·k + i: token t's i-th choice, experts[t·k + i] of `table`) then n · shared ones (slot
// n·k + t·shared + j: token t's shared expert j, table entry num_experts + j).
// ExpertsHidden: h[slot, :ff] = the expert's hidden activations of its token's x (as Activate).
// ExpertsDown:   o[slot, :d]  = down · h[slot] (+ down_bias).
// CombineExperts: out[t, :] = Σ_i (float) weights[t·k + i] · o[t·k + i] in ascending expert order,
//   then + s · o[shared slot j] for each j, as the grouped path adds them, then + residual[t, :]
//   where residual is not null; s = sigmoid(gate_w · x[t]) (the dot in f32, the sigmoid in
//   double as AddGated) where gate_w (a [d] row of gate_type) is not null, else 1;
//   counts[experts[t·k + i]] += 1 where counts is not null.
cudaError_t ExpertsHidden(WType type, const ExpertPtrs* table, const uint32_t* experts, size_t n,
                          uint32_t k, uint32_t shared, uint32_t num_experts, const float* x,
                          uint32_t d, uint8_t activation, bool gated, uint32_t max_ff, float* h,
                          size_t ldh, cudaStream_t stream);
cudaError_t ExpertsDown(WType type, const ExpertPtrs* table, const uint32_t* experts, size_t n,
                        uint32_t k, uint32_t shared, uint32_t num_experts, const float* h,
                        size_t ldh, uint32_t d, float* o, cudaStream_t stream);
cudaError_t CombineExperts(const uint32_t* experts, const double* weights, size_t n, uint32_t k,
                           uint32_t shared, const void* gate_w, WType gate_type, const float* x,
                           const float* o, uint32_t d, const float* residual, float* out,
                           unsigned long long* counts, cudaStream_t stream);
// Largest top_k CombineExperts takes.
inline constexpr uint32_t kCombineMaxK = 32;

// Bytes of device scratch Route needs per token for `params`.
size_t RouteScratchBytes(const route::Params& params);

// Routes each token of logits [n, num_experts] with route::Route (the CPU backends' code):
// experts, weights: [n, top_k]. params.score_correction_bias must point to device memory.
// scratch: n · RouteScratchBytes(params) bytes, 8-byte aligned.
cudaError_t Route(const route::Params& params, const float* logits, size_t n, void* scratch,
                  uint32_t* experts, double* weights, cudaStream_t stream);

}  // namespace cuda
}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_KERNELS_H_
