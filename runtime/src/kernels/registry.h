// One table of instruction-set levels gives every kernel family: each level names what it requires
// of the CPU (base/cpu_features.h) and the kernels it brings, one per family. For a CPU, a family's
// kernels are those of every level it has, in table order (scalar first: the tests run them all),
// and the one chosen is the last of them whose level prefers itself there (ListKernels). The
// policies that pick between kernels test the CPU's features and the kernels themselves, never
// their names. AvailableKernels, BestGemmKernel and the like (kernels.h, gemm.h,
// quant_kernels.h) read this CPU's lists.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_REGISTRY_H_
#define FFLITE_RUNTIME_SRC_KERNELS_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"

namespace fflite {

struct IsaLevel {
  const char* name;
  uint64_t requires;  // CpuFeature bits, every one needed
  // A further check of this machine (the AMX tiles: the OS's grant and a product through them),
  // or nullptr.
  bool (*usable)();
  // Whether this level's kernels are chosen over the earlier levels' where it is listed (the AMD
  // preference of one token's streams), or nullptr: always.
  bool (*preferred)(const CpuFeatures& cpu);
  const Kernels* kernels;       // element-wise, norms, the few-token float product, value rows
  const QGemvKernel* qgemv;     // quantised weights, float activations
  const QGemmKernel* qgemm;     // quantised weights, int8 activations
  const GemmKernel* gemm_f32;   // packed float weights, f32 arithmetic
  const GemmKernel* gemm_bf16;  // packed bf16 weights, bf16 arithmetic
};

// Every level this build has, in order.
const std::vector<IsaLevel>& IsaLevels();

// Each family's kernels for a CPU with `cpu`, and the one chosen. run_checks: run the levels'
// `usable` checks (false where `cpu` is not this machine's: a test's feature set; such levels are
// then listed on their features alone).
struct KernelLists {
  std::vector<const Kernels*> kernels;
  std::vector<const QGemvKernel*> qgemv;
  std::vector<const QGemmKernel*> qgemm;
  std::vector<const GemmKernel*> gemm_f32, gemm_bf16;
  const Kernels* best_kernels = nullptr;
  const QGemvKernel* best_qgemv = nullptr;
  const QGemmKernel* best_qgemm = nullptr;
  const GemmKernel* best_gemm_f32 = nullptr;
  const GemmKernel* best_gemm_bf16 = nullptr;
};
KernelLists ListKernels(const CpuFeatures& cpu, bool run_checks);

// This CPU's lists (GetCpuFeatures(), checks run), made on the first call.
const KernelLists& ThisCpuKernels();

// Whether the gemm engine with `kernel` (an F32 kernel) is measured faster than XNNPACK's
// operators on this CPU's kind: the AVX2 and AVX-512 kernels (gemm_engine.cc). The NEON kernel
// is not, until measured on ARM hardware.
bool GemmBeatsXnnpack(const GemmKernel& kernel);

// GemmAheadByDefault (gemm.h) for a CPU with `cpu`: unless it reports less than 1 MiB of L2.
bool GemmAheadByDefault(const CpuFeatures& cpu);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_REGISTRY_H_
