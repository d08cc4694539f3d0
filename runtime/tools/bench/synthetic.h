// Built-in synthetic layer shapes for fflite-bench (no checkpoint needed): llama, bert, tiny.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_SYNTHETIC_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_SYNTHETIC_H_

#include <string>

#include "absl/status/statusor.h"
#include "format/writer.h"

namespace fflite {
namespace bench {

// llama: d 4096, d_ff 11008, SwiGLU, no bias, pre-RMSNorm + residual, f32 (541 MB).
// bert:  d 768, d_ff 3072, GELU (erf), biases, post-LayerNorm + residual, f32 (19 MB).
// tiny:  d 64, d_ff 256, SwiGLU, pre-RMSNorm + residual, f32.
// Weights are pseudo-random, uniform in ±1/sqrt(fan_in); produced while the file is written.
// Errors: InvalidArgument for an unknown name.
absl::StatusOr<ModelSpec> SyntheticSpec(const std::string& name);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_SYNTHETIC_H_
