// The one explicit table of backends (no static self-registration: the order is visible here).
#include "backends/backend.h"
#include "backends/reference/reference_backend.h"
#include "backends/cpu/cpu_backend.h"
#ifdef FFLITE_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace fflite {

absl::Span<const BackendEntry> Backends() {
  static const BackendEntry kBackends[] = {
      // First: auto takes the GPU wherever one runs and the model fits (session.cc).
#ifdef FFLITE_HAVE_CUDA
      {"cuda", CudaBackendAvailable, CreateCudaBackend, /*auto_choice=*/true},
#endif
      // The CPU backend keeps the name it was first released under (FFLITE_BACKEND_XNNPACK).
      {"xnnpack", CpuBackendAvailable, CreateCpuBackend, /*auto_choice=*/true},
      {"reference", ReferenceBackendAvailable, CreateReferenceBackend, /*auto_choice=*/true},
  };
  return kBackends;
}

absl::Status Backend::RunDevice(size_t /*layer*/, const float* /*input*/, size_t /*n_tokens*/,
                                float* /*output*/, void* /*stream*/) {
  return absl::UnimplementedError(
      "it runs on host memory: use fflite_session_run (device pointers need the cuda backend)");
}

BackendStats Backend::Stats() const {
  BackendStats s;
  s.routed_seconds = runner_.moe().routed_seconds();
  return s;
}

void Backend::InitRunner(const Model& model, size_t max_pass_tokens, bool time_routed_experts) {
  counts_.Init(model);
  runner_.Init(model, max_pass_tokens, &neuron_scales_, &neuron_capture_, &counts_);
  runner_.moe().set_time_routed(time_routed_experts);
}

const BackendEntry* FindBackend(const std::string& name) {
  for (const BackendEntry& entry : Backends()) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateAutoBackend(absl::Span<const BackendEntry> entries,
                                                           const Model& model,
                                                           const BackendConfig& config,
                                                           const BackendEntry** chosen) {
  absl::Status last = absl::FailedPreconditionError("no backend can run on this machine");
  for (const BackendEntry& e : entries) {
    if (!e.auto_choice) continue;
    std::string why;
    if (!e.available(&why)) continue;
    absl::StatusOr<std::unique_ptr<Backend>> backend = e.create(model, config);
    if (backend.ok()) {
      *chosen = &e;
      return backend;
    }
    last = backend.status();
  }
  return last;
}

}  // namespace fflite
