// The cuda backend: dense and MoE layers on an NVIDIA GPU. Weights are uploaded once at session
// creation (f16/bf16 as stored, f32 as f32, quantised matrices dequantised to f32, or i8/i4 kept
// quantised with FFLITE_CUDA_QUANT=packed: cuda_quant.h), the matrix
// products with many tokens run on cuBLAS (f16/bf16 on tensor cores with the activations rounded
// to the weights' type, f32 accumulation), few tokens and routers on fflite's own f32-activation
// kernel, and norms, activations, residuals and routing (route::Route, the CPU backends' code) in
// small kernels; the layer's and the MoE's steps are the runners' (layer/, moe/), as on every
// backend. One stream and one cuBLAS handle per session; every buffer is allocated at creation.
// Built only with FFLITE_CUDA (cmake/FfliteCuda.cmake); this header needs no CUDA header.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace fflite {

// Whether device 0 can run the backend: a driver that the CUDA runtime accepts, a device, and a
// compute capability this build has kernels for (8.0 or newer). `why` says what is missing.
bool CudaBackendAvailable(std::string* why);
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const Model& model,
                                                           const BackendConfig& config);

// Whether I8/I4 matrices stay quantised on the device, from the environment: FFLITE_CUDA_QUANT
// unset or "f32": dequantised to f32 on upload (the default); "packed": kept quantised
// (cuda_quant.h; not yet run on a GPU: scripts/gpu_check.sh checks it); anything else is an error
// naming it.
absl::Status CudaKeepsQuantised(bool* keep);

// Whether cuBLAS (opened on first use, not linked) and every entry point the backend calls were
// found; `why` says what is missing. Needs no GPU.
bool CublasLoads(std::string* why);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_BACKEND_H_
