// The CUDA runtime and cuBLAS as fflite uses them (cuda_api.h).
#include "backends/cuda/cuda_api.h"

#include <dlfcn.h>

#include <type_traits>

#include "absl/strings/str_format.h"

namespace fflite {

absl::Status CudaStatus(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clear a non-sticky error so that later calls do not report it again
  if (e == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: out of device memory", what));
  }
  return absl::InternalError(
      absl::StrFormat("%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e)));
}

const CublasApi& Cublas() {
  static const CublasApi api = [] {
    CublasApi a;
    // The soname, then the toolkit's library folder this fflite was built against.
    void* lib = dlopen(FFLITE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen(FFLITE_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      a.error = absl::StrFormat("cuBLAS (%s) cannot be loaded: %s", FFLITE_CUBLAS_SONAME,
                                e != nullptr ? e : "dlopen failed");
      return a;
    }
    bool ok = true;
    auto find = [&](const char* name, auto* fn) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr && ok) {
        ok = false;
        a.error = absl::StrFormat("cuBLAS (%s) has no %s", FFLITE_CUBLAS_SONAME, name);
      }
    };
    find("cublasCreate_v2", &a.create);
    find("cublasDestroy_v2", &a.destroy);
    find("cublasSetStream_v2", &a.set_stream);
    find("cublasSetWorkspace_v2", &a.set_workspace);
    find("cublasGemmEx", &a.gemm_ex);
    find("cublasGetStatusName", &a.status_name);
    return a;  // the library stays open for the process's life
  }();
  return api;
}

absl::Status CublasStatus(const char* what, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (s == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: out of device memory", what));
  }
  return absl::InternalError(absl::StrFormat("%s: %s", what, Cublas().status_name(s)));
}

// Asked once per process: the answer does not change while it runs.
const CudaProbe& ProbeCudaDevice() {
  static const CudaProbe probe = [] {
    CudaProbe p;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    cudaGetLastError();
    if (e == cudaErrorInsufficientDriver) {
      p.why = absl::StrFormat(
          "no NVIDIA driver, or one older than this fflite's CUDA runtime %d.%d needs "
          "(cudaErrorInsufficientDriver)",
          CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
      return p;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
      p.why = "no CUDA device (cudaErrorNoDevice; check CUDA_VISIBLE_DEVICES)";
      return p;
    }
    if (e != cudaSuccess) {
      p.why = absl::StrFormat("cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e),
                              cudaGetErrorString(e));
      return p;
    }
    cudaDeviceProp prop;
    const cudaError_t pe = cudaGetDeviceProperties(&prop, kCudaDevice);
    if (pe != cudaSuccess) {
      cudaGetLastError();
      p.why = absl::StrFormat("cudaGetDeviceProperties: %s", cudaGetErrorString(pe));
      return p;
    }
    p.device = absl::StrFormat("%s (sm_%d%d, %.1f GiB, device %d)", prop.name, prop.major,
                               prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30),
                               kCudaDevice);
    if (prop.major < 8) {
      p.why = absl::StrFormat(
          "device %d, %s, has compute capability %d.%d; this fflite has kernels for 8.0 and newer",
          kCudaDevice, prop.name, prop.major, prop.minor);
      return p;
    }
    if (!Cublas().error.empty()) {
      p.why = Cublas().error;
      return p;
    }
    p.ok = true;
    return p;
  }();
  return probe;
}

}  // namespace fflite
