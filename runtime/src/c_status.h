// The mapping from absl::StatusCode to the C API's fflite_status (implemented in c_api.cc).
// Exposed so that tests can check the whole mapping, including codes no public call produces.
#ifndef FFLITE_RUNTIME_SRC_C_STATUS_H_
#define FFLITE_RUNTIME_SRC_C_STATUS_H_

#include "absl/status/status.h"
#include "fflite/fflite.h"

namespace fflite {

fflite_status ToCStatus(absl::StatusCode code);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_C_STATUS_H_
