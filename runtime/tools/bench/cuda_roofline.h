// fflite-bench --backend cuda: the device's limits measured in the same run (read bandwidth,
// cuBLAS bf16 GEMM, host-to-device copies), and device buffers for device-pointer runs. Built with
// the cuda backend only.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_CUDA_ROOFLINE_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_CUDA_ROOFLINE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace fflite {

struct CudaRoofline {
  std::string device;            // as a cuda session names it (fflite_session_device_name)
  double read_gbps = 0.0;        // device memory read bandwidth, GB/s (a 1 GiB buffer, median)
  double bf16_gemm_tflops = 0.0; // cuBLAS bf16 GEMM, 8192³, f32 accumulation (median)
  double h2d_gbps = 0.0;         // host -> device copy of 64 MiB from pageable memory
};
// Measured now on the device cuda sessions run on. FailedPrecondition where none can run.
absl::StatusOr<CudaRoofline> MeasureCudaRoofline();

// Device buffers for the bench's device-pointer runs. Errors name the CUDA call.
absl::StatusOr<void*> CudaAlloc(size_t bytes);
void CudaFree(void* p);
absl::Status CudaCopy(void* to, const void* from, size_t bytes, bool to_device);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_CUDA_ROOFLINE_H_
