// The xnnpack backend: XNNPACK fully-connected operators (on a pthreadpool) for the matrix
// products of dense FFN layers, fflite's own vectorised kernels for activations, GLU and norms.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_XNNPACK_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_XNNPACK_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "kernels/kernels.h"

namespace fflite {

// Tuning knobs, for tests and fflite-bench; the defaults are what the measurements chose (see
// xnnpack_backend.cc).
struct XnnpackBackendOptions {
  // Element-wise and norm kernels; nullptr: BestKernels() for this CPU.
  const Kernels* kernels = nullptr;
  // Packed bytes of weights per XNNPACK operator: each matrix is split by output channels into
  // slices of about this size. 0: one operator per matrix.
  size_t slice_bytes = size_t{2} << 20;
  // The most tokens that pass through the layer at once (bounds the scratch).
  size_t token_chunk = 128;
};

// Whether XNNPACK initialises on this CPU; `why` says why not.
bool XnnpackBackendAvailable(std::string* why);

// Packs every layer's weights (f16/bf16 converted to f32) into XNNPACK operators, releases the
// model's pages of those weights, and sizes the scratch from config.max_tokens. MoE experts are
// packed at creation without a budget (config.expert_budget_bytes == 0), else on first use, the
// least recently used ones dropped to stay within the budget (a budget below one expert keeps
// just the expert in use). The model must outlive the backend. Errors: ResourceExhausted (memory,
// threads), Internal (XNNPACK refused an operator); under a budget Run may give these too, when
// packing an expert fails.
absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackend(const Model& model,
                                                              const BackendConfig& config);
absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackendWithOptions(
    const Model& model, const BackendConfig& config, const XnnpackBackendOptions& options);

// Bytes of packed weights one expert of this shape takes (what the budget counts): every matrix
// padded to 16 output channels, plus a bias per output channel.
uint64_t XnnpackPackedFfnBytes(const FfnView& ffn);

// For tests and fflite-bench: bytes of packed routed experts resident now in an xnnpack backend
// (0 for any other backend).
uint64_t XnnpackResidentExpertBytes(Backend* backend);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_XNNPACK_BACKEND_H_
