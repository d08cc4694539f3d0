// The reference backend: plain scalar C++ accumulating in double, written to be read. It is the
// oracle every other backend is tested against, not a fast path.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace fflite {

bool ReferenceBackendAvailable(std::string* why);
absl::StatusOr<std::unique_ptr<Backend>> CreateReferenceBackend(const Model& model,
                                                                const BackendConfig& config);

// The activations in double, as the reference computes them (exposed for tests and for other
// backends' scalar paths to compare against).
// For SWIGLU_OAI: the gate part, c·σ(1.702·c) with c = min(x, 7).
double ReferenceActivation(Activation activation, double x);
// A GLU's product of act(gate) and the up value: act(gate)·up, except SWIGLU_OAI's
// act(gate)·(clamp(up, -7, 7) + 1).
double ReferenceGlu(Activation activation, double gate, double up);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_
