// What the tools that run models through the public C API share: deleters of its handles (and of
// C files) for std::unique_ptr, and a failed call as a Status.
#ifndef FFLITE_RUNTIME_TOOLS_C_API_HANDLES_H_
#define FFLITE_RUNTIME_TOOLS_C_API_HANDLES_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "fflite/fflite.h"

namespace fflite {
namespace tools {

struct ModelFree {
  void operator()(fflite_model* m) const { fflite_model_free(m); }
};
struct SessionFree {
  void operator()(fflite_session* s) const { fflite_session_free(s); }
};
struct FileClose {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// A C API failure as a Status carrying the call's last-error message: "what: message (STATUS)".
inline absl::Status CError(const std::string& what, fflite_status st) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s (%s)", what,
                                                    fflite_last_error_message(),
                                                    fflite_status_name(st)));
}

}  // namespace tools
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_C_API_HANDLES_H_
