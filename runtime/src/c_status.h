// The mapping from absl::StatusCode to the C API's fflite_status (implemented in c_api.cc).
// Exposed so that tests can check the whole mapping, including codes no public call produces.
#ifndef FFLITE_RUNTIME_SRC_C_STATUS_H_
#define FFLITE_RUNTIME_SRC_C_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "fflite/fflite.h"

namespace fflite {

fflite_status ToCStatus(absl::StatusCode code);

// "INVALID_MODEL: <message>": a status with the name the C API gives its code (fflite_status_name
// of ToCStatus), so that the tools and the library name an error alike.
std::string StatusText(const absl::Status& status);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_C_STATUS_H_
