// The registered backends as test parameters, and skipping a backend that cannot run here (cuda
// without a GPU) with the reason in the log.
#ifndef FFLITE_TESTS_TESTING_BACKENDS_H_
#define FFLITE_TESTS_TESTING_BACKENDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace fflite {

// The CPU backend with `options` (what a session with BackendConfig::cpu_options gets).
inline absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackendWithOptions(
    const Model& model, BackendConfig config, const CpuBackendOptions& options) {
  config.cpu_options = &options;
  return CreateCpuBackend(model, config);
}

namespace testing {

// Whether the backend takes an expert budget (the others refuse a nonzero one).
inline bool TakesBudget(const std::string& backend) { return backend == "xnnpack"; }

// Bytes of one packed expert of this shape (the CPU backend budget's unit), d_ff padded to
// `alignment` as the writer pads it.
inline uint64_t OneExpert(uint32_t d_model, uint32_t d_ff, bool gated, uint32_t alignment = 64) {
  FfnView f;
  f.d_model = d_model;
  f.d_ff = d_ff;
  f.d_ff_padded = (d_ff + alignment - 1) / alignment * alignment;
  f.gated = gated;
  return CpuPackedFfnBytes(f);
}

// Every backend in the registry, the reference included.
inline std::vector<std::string> EveryBackend() {
  std::vector<std::string> names;
  for (const BackendEntry& e : Backends()) names.push_back(e.name);
  return names;
}

// Every backend in the registry but the reference (the oracle).
inline std::vector<std::string> BackendsUnderTest() {
  std::vector<std::string> names;
  for (const BackendEntry& e : Backends()) {
    if (std::string(e.name) != "reference") names.push_back(e.name);
  }
  return names;
}

// A test name suffix: the backend's name.
inline std::string BackendName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace testing
}  // namespace fflite

// Skips the calling test when `backend` cannot run here, naming the reason.
#define SKIP_UNLESS_AVAILABLE(backend)                                            \
  do {                                                                            \
    std::string why_;                                                             \
    if (!::fflite::FindBackend(backend)->available(&why_)) {                      \
      GTEST_SKIP() << "backend '" << (backend) << "' cannot run here: " << why_;  \
    }                                                                             \
  } while (0)

#endif  // FFLITE_TESTS_TESTING_BACKENDS_H_
