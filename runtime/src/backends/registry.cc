// The one explicit table of backends (no static self-registration: the order is visible here).
#include "backends/backend.h"
#include "backends/reference/reference_backend.h"
#include "backends/xnnpack/xnnpack_backend.h"

namespace fflite {

absl::Span<const BackendEntry> Backends() {
  static const BackendEntry kBackends[] = {
      {"xnnpack", XnnpackBackendAvailable, CreateXnnpackBackend},
      {"reference", ReferenceBackendAvailable, CreateReferenceBackend},
  };
  return kBackends;
}

const BackendEntry* FindBackend(const std::string& name) {
  for (const BackendEntry& entry : Backends()) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

}  // namespace fflite
