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
double ReferenceActivation(Activation activation, double x);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_REFERENCE_REFERENCE_BACKEND_H_
