// fflite-bench --backend cuda: the layer time with input and output in device memory, the
// host<->device copies apart, against the device's roofline measured in the same run (read
// bandwidth; cuBLAS bf16 GEMM peak). Built with the cuda backend only.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_CUDA_BENCH_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_CUDA_BENCH_H_

#include <cstdint>
#include <vector>

#include "format/model.h"

namespace fflite {

// flops_per_token: of one call (every layer); the bytes a decode call reads are counted as the
// device holds the weights. Prints a table; returns the process exit code.
int RunCudaBench(const Model& model, double flops_per_token, const std::vector<int64_t>& tokens,
                 int warmup, int reps);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_CUDA_BENCH_H_
