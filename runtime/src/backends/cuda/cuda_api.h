// The CUDA runtime and cuBLAS as the cuda backend (and fflite-bench's device roofline) use them:
// statuses from their errors, cuBLAS opened on first use rather than linked, and the probe of
// device 0. Needs the CUDA toolkit's headers; built with FFLITE_CUDA only.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_API_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_API_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "base/status_macros.h"

namespace fflite {

// The device every cuda session runs on.
inline constexpr int kCudaDevice = 0;

// OK, or the CUDA error named with `what` (ResourceExhausted for out of memory, else Internal);
// a non-sticky error is cleared so that later calls do not report it again.
absl::Status CudaStatus(const char* what, cudaError_t e);

// cuBLAS, opened on first use rather than linked: linking it costs every process that loads
// libfflite ~0.4 s at start-up (measured: an empty program linked to libcublas.so.13 starts in
// 0.37 s instead of 0.005 s), GPU or not, and a machine without the CUDA libraries could not load
// libfflite at all.
struct CublasApi {
  std::string error;  // why it could not be opened; empty when every entry point was found
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // cublasGemmEx (C++ sees overloads, so the type is spelled out)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
};
// Opened once per process; the library stays open.
const CublasApi& Cublas();

// OK, or the cuBLAS error named with `what`.
absl::Status CublasStatus(const char* what, cublasStatus_t s);

#define FFLITE_CUDA_CHECK(what, expr) FFLITE_RETURN_IF_ERROR(::fflite::CudaStatus(what, (expr)))
#define FFLITE_CUBLAS_CHECK(what, expr) \
  FFLITE_RETURN_IF_ERROR(::fflite::CublasStatus(what, (expr)))

// Whether device 0 can run the cuda backend, asked once per process.
struct CudaProbe {
  bool ok = false;
  std::string why;     // what is missing, when not ok
  std::string device;  // e.g. "NVIDIA H200 (sm_90, 139.8 GiB, device 0)"
};
const CudaProbe& ProbeCudaDevice();

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CUDA_CUDA_API_H_
