// The cuda backend: dense and MoE layers on an NVIDIA GPU. Weights are uploaded once at session
// creation (f16/bf16 as stored, f32 as f32, quantised matrices dequantised to f32), the matrix
// products with many tokens run on cuBLAS (f16/bf16 on tensor cores with the activations rounded
// to the weights' type, f32 accumulation), few tokens and routers on fflite's own f32-activation
// kernel, and norms, activations, residuals and routing (route::Route, the CPU backends' code) in
// small kernels. One stream and one cuBLAS handle per session; every buffer is allocated at
// creation. Built only with FFLITE_CUDA (cmake/FfliteCuda.cmake); this header needs no CUDA header.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <cstddef>
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

// Whether cuBLAS (opened on first use, not linked) and every entry point the backend calls were
// found; `why` says what is missing. Needs no GPU.
bool CublasLoads(std::string* why);

// For fflite-bench: the device's limits, measured now on device 0.
struct CudaRoofline {
  std::string device;            // as Backend::device() names it
  double read_gbps = 0.0;        // device memory read bandwidth, GB/s (a 1 GiB buffer, median)
  double bf16_gemm_tflops = 0.0; // cuBLAS bf16 GEMM, 8192³, f32 accumulation (median)
  double h2d_gbps = 0.0;         // host -> device copy of 64 MiB from pageable memory
};
absl::StatusOr<CudaRoofline> MeasureCudaRoofline();

// Device buffers for the bench's device-pointer runs (device 0). Errors name the CUDA call.
absl::StatusOr<void*> CudaAlloc(size_t bytes);
void CudaFree(void* p);
absl::Status CudaCopy(void* to, const void* from, size_t bytes, bool to_device);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_BACKEND_H_
