// What the tools that run models through the public C API share: deleters of its handles (and of
// C files) for std::unique_ptr, a failed call as a Status, and the model loaded both ways.
#ifndef FFLITE_RUNTIME_TOOLS_C_API_HANDLES_H_
#define FFLITE_RUNTIME_TOOLS_C_API_HANDLES_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "fflite/fflite.h"
#include "format/model.h"

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

// A model file loaded through the C API (for sessions) and through the internal loader (for what
// the C API does not expose: weights, norms). That maps the file twice; the kernel shares the
// pages, so the cost is a second validation. Errors: "model: <the loader's message, which names
// the file>".
struct ToolModel {
  std::unique_ptr<fflite_model, ModelFree> api;
  std::unique_ptr<Model> internal;
};
inline absl::StatusOr<ToolModel> LoadToolModel(const std::string& path) {
  ToolModel m;
  fflite_model* raw = nullptr;
  const fflite_status st = fflite_model_load_file(path.c_str(), &raw);
  m.api.reset(raw);
  if (st != FFLITE_STATUS_OK) return CError("model", st);
  absl::StatusOr<std::unique_ptr<Model>> internal = Model::LoadFile(path);
  if (!internal.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("model: %s", internal.status().message()));
  }
  m.internal = std::move(*internal);
  return m;
}

}  // namespace tools
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_C_API_HANDLES_H_
