// libFuzzer target: the model loader on arbitrary bytes, and for every file it accepts, a session
// on every backend that runs here and one run of every layer.
// Invariants: no crash, no sanitizer report, no leak; memory bounded by a fixed multiple of the
// input size (every size is checked against the input before anything is allocated); time bounded
// (work is proportional to the weights the input holds times max_tokens = 8).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "format/model.h"
#include "session/session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes so that ASan catches any read past the end.
  std::vector<uint8_t> bytes(data, data + size);
  auto model = fflite::Model::LoadBuffer(bytes.data(), bytes.size());
  if (!model.ok()) return 0;
  const fflite::Model& m = **model;
  // 8 tokens: quantised weights take the int8-activation kernels from 8 tokens on, the
  // float-activation ones below.
  constexpr size_t kTokens = 8;
  std::vector<float> input(kTokens * m.d_model()), output(kTokens * m.d_model());
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 7) * 0.5f - 1.5f;
  for (const fflite::BackendEntry& backend : fflite::Backends()) {
    std::string why;
    if (!backend.available(&why)) continue;
    fflite::SessionOptions options;
    options.backend = backend.name;
    options.max_tokens = kTokens;
    auto session = fflite::Session::Create(m, options);
    if (!session.ok()) continue;  // refusing is fine; crashing is not
    for (size_t layer = 0; layer < m.layers().size(); ++layer) {
      (void)(*session)->Run(layer, input.data(), 1 + layer % 2, output.data());
      (void)(*session)->Run(layer, input.data(), kTokens, output.data());
    }
  }
  return 0;
}
