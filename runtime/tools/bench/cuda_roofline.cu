// fflite-bench's device roofline (cuda_roofline.h): a read kernel of its own, cuBLAS through the
// cuda backend's loader (backends/cuda/cuda_api.h), and the CUDA runtime's copies.
#include "bench/cuda_roofline.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "base/status_macros.h"

namespace fflite {
namespace {

constexpr int kWarp = 32;
constexpr int kReadThreads = 256;

// *sum += every float of in (a read of every byte); float4 loads past L1, a warp's sum per atomic.
__global__ void ReadAllKernel(const float4* __restrict__ in, size_t count4, float* sum) {
  float s = 0.0f;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count4;
       i += size_t{gridDim.x} * blockDim.x) {
    const float4 v = __ldg(in + i);
    s += v.x + v.y + v.z + v.w;
  }
  for (int o = kWarp / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % kWarp == 0) atomicAdd(sum, s);
}

cudaError_t ReadAll(const float* in, size_t count, float* sum) {
  int device = 0, sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  ReadAllKernel<<<static_cast<unsigned>(sms) * 8, kReadThreads>>>(
      reinterpret_cast<const float4*>(in), count / 4, sum);
  return cudaGetLastError();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

absl::StatusOr<void*> CudaAlloc(size_t bytes) {
  void* p = nullptr;
  FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kCudaDevice));
  FFLITE_CUDA_CHECK("cudaMalloc", cudaMalloc(&p, bytes));
  return p;
}

void CudaFree(void* p) { cudaFree(p); }

absl::Status CudaCopy(void* to, const void* from, size_t bytes, bool to_device) {
  return CudaStatus("cudaMemcpy", cudaMemcpy(to, from, bytes, to_device ? cudaMemcpyHostToDevice
                                                                         : cudaMemcpyDeviceToHost));
}

absl::StatusOr<CudaRoofline> MeasureCudaRoofline() {
  if (!ProbeCudaDevice().ok) return absl::FailedPreconditionError(ProbeCudaDevice().why);
  CudaRoofline r;
  r.device = ProbeCudaDevice().device;
  FFLITE_CUDA_CHECK("cudaSetDevice", cudaSetDevice(kCudaDevice));
  cudaEvent_t start, stop;
  FFLITE_CUDA_CHECK("cudaEventCreate", cudaEventCreate(&start));
  FFLITE_CUDA_CHECK("cudaEventCreate", cudaEventCreate(&stop));
  auto time_ms = [&](const std::function<absl::Status()>& f, int reps) -> absl::StatusOr<double> {
    FFLITE_RETURN_IF_ERROR(f());  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      FFLITE_CUDA_CHECK("cudaEventRecord", cudaEventRecord(start, nullptr));
      FFLITE_RETURN_IF_ERROR(f());
      FFLITE_CUDA_CHECK("cudaEventRecord", cudaEventRecord(stop, nullptr));
      FFLITE_CUDA_CHECK("cudaEventSynchronize", cudaEventSynchronize(stop));
      float t = 0.0f;
      FFLITE_CUDA_CHECK("cudaEventElapsedTime", cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    return Median(ms);
  };

  // Read bandwidth: 1 GiB summed.
  constexpr size_t kReadBytes = size_t{1} << 30;
  FFLITE_ASSIGN_OR_RETURN(void* buf, CudaAlloc(kReadBytes + 256));
  std::unique_ptr<void, void (*)(void*)> buf_owner(buf, CudaFree);
  float* sum = reinterpret_cast<float*>(static_cast<uint8_t*>(buf) + kReadBytes);
  FFLITE_CUDA_CHECK("cudaMemset", cudaMemset(buf, 0, kReadBytes));
  FFLITE_ASSIGN_OR_RETURN(
      double read_ms, time_ms([&] {
        return CudaStatus("read kernel",
                          ReadAll(static_cast<const float*>(buf), kReadBytes / 4, sum));
      }, 9));
  r.read_gbps = static_cast<double>(kReadBytes) / (read_ms * 1e6);

  // cuBLAS bf16 GEMM 8192³ (A, B bf16 in the 1 GiB buffer, C f32 after them).
  constexpr int kN = 8192;
  cublasHandle_t handle = nullptr;
  FFLITE_CUBLAS_CHECK("cublasCreate", Cublas().create(&handle));
  std::unique_ptr<cublasContext, decltype(&cublasDestroy_v2)> handle_owner(handle,
                                                                            Cublas().destroy);
  uint8_t* base = static_cast<uint8_t*>(buf);
  const size_t half_bytes = size_t{kN} * kN * 2;
  void *a = base, *b = base + half_bytes, *c = base + 2 * half_bytes;  // 128+128+256 MiB
  const float one = 1.0f, zero = 0.0f;
  FFLITE_ASSIGN_OR_RETURN(
      double gemm_ms, time_ms([&] {
        return CublasStatus("cublasGemmEx",
                            Cublas().gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, kN, kN, kN, &one,
                                             a, CUDA_R_16BF, kN, b, CUDA_R_16BF, kN, &zero, c,
                                             CUDA_R_32F, kN, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
      }, 5));
  r.bf16_gemm_tflops = 2.0 * kN * kN * static_cast<double>(kN) / (gemm_ms * 1e9);

  // Host -> device from pageable memory, 64 MiB.
  std::vector<uint8_t> host(size_t{64} << 20, 1);
  std::vector<double> secs;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    FFLITE_RETURN_IF_ERROR(CudaCopy(buf, host.data(), host.size(), true));
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.h2d_gbps = static_cast<double>(host.size()) / Median(secs) / 1e9;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return r;
}

}  // namespace fflite
