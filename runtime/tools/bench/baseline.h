// The --baseline of fflite-bench: plain XNNPACK as one would first write it, one
// fully-connected operator per matrix and scalar C for activations and norms, to compare against.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_BASELINE_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_BASELINE_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "format/model.h"

namespace fflite {
namespace bench {

// A Backend over dense and MoE layers (every expert packed as plain operators at creation). The
// model must outlive it.
absl::StatusOr<std::unique_ptr<Backend>> CreateBaseline(const Model& model,
                                                        const BackendConfig& config);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_BASELINE_H_
