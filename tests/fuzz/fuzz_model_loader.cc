// libFuzzer target: the model loader on arbitrary bytes, and for every file it accepts, a session
// on every backend that runs here and runs of every layer. The loader reads no weight byte (a
// quantised matrix's scales are checked on its first use, Model::CheckScales), so the runs are
// where mutated weights and scales are met.
// Invariants: no crash, no sanitizer report, no leak; every failure a status; a layer with a NaN
// or Inf scale in a matrix every run reads (a dense layer's, a shared expert's) fails its runs
// with DataLoss naming it, a layer without one never fails with DataLoss, and on the reference
// backend always runs; memory bounded by a fixed multiple of the input size (every size is
// checked against the input before anything is allocated); time bounded (layers of more than
// kMaxLayerBytes of weights are not run; the rest cost their weights times max_tokens = 8).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "backends/backend.h"
#include "format/model.h"
#include "session/session.h"

namespace {

// Layers with more weight bytes than this are loaded but not run (a fuzzer's inputs are KiBs;
// this bounds the seeds and whatever the regressions hold).
constexpr uint64_t kMaxLayerBytes = 4u << 20;

[[noreturn]] void Fail(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "fuzz invariant violated: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::fflush(stderr);
  std::abort();
}

uint64_t FfnBytes(const fflite::FfnView& f) {
  uint64_t bytes = 0;
  for (const fflite::TensorView* t : {&f.up, &f.gate, &f.down}) bytes += t->present() ? t->size : 0;
  return bytes;
}

// What a layer's scales are: whether some matrix that every run reads (a dense FFN's, a shared
// expert's) has a bad one, whether any matrix has, and its weight bytes.
struct LayerScales {
  bool always_bad = false;
  bool any_bad = false;
  uint64_t bytes = 0;
};

LayerScales ScalesOf(const fflite::Model& m, const fflite::LayerView& l) {
  LayerScales s;
  auto see = [&](const fflite::FfnView& f, bool always) {
    const bool bad = !m.CheckFfnScales(f).ok();
    s.always_bad |= bad && always;
    s.any_bad |= bad;
    s.bytes += FfnBytes(f);
  };
  if (l.kind == fflite::LayerKind::kDense) {
    see(l.ffn, true);
  } else {
    for (const fflite::FfnView& f : l.moe.experts) see(f, false);
    for (const fflite::FfnView& f : l.moe.shared_experts) see(f, true);
  }
  return s;
}

// Model::CheckScales' errors: a scale (I8, I4; Q4_K's d or dmin) that is not finite, a Q4_K
// 6-bit code above 63, an MXFP4 E8M0 byte of 1 or 255.
bool IsScaleError(const absl::Status& st) {
  return absl::IsDataLoss(st) && (absl::StrContains(st.message(), "is not finite") ||
                                  absl::StrContains(st.message(), "is above 63") ||
                                  absl::StrContains(st.message(), "is not an E8M0 scale"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes so that ASan catches any read past the end.
  std::vector<uint8_t> bytes(data, data + size);
  auto model = fflite::Model::LoadBuffer(bytes.data(), bytes.size());
  if (!model.ok()) return 0;
  const fflite::Model& m = **model;
  // The scales judged on a second model over the same bytes, so that the sessions' model meets
  // every matrix unchecked (a success is remembered per model).
  auto probe = fflite::Model::LoadBuffer(bytes.data(), bytes.size());
  if (!probe.ok()) Fail("the same bytes loaded once and not twice", probe.status());
  std::vector<LayerScales> scales;
  bool any_bad = false;
  for (const fflite::LayerView& l : (*probe)->layers()) {
    scales.push_back(ScalesOf(**probe, l));
    any_bad |= scales.back().any_bad;
  }
  // 8 tokens: quantised weights take the int8-activation kernels from 8 tokens on, the
  // float-activation ones below.
  constexpr size_t kTokens = 8;
  std::vector<float> input(kTokens * m.d_model()), output(kTokens * m.d_model());
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 7) * 0.5f - 1.5f;
  for (const fflite::BackendEntry& backend : fflite::Backends()) {
    std::string why;
    if (!backend.available(&why)) continue;
    const std::string name = backend.name;
    fflite::SessionOptions options;
    options.backend = name;
    options.max_tokens = kTokens;
    auto session = fflite::Session::Create(m, options);
    if (!session.ok()) {
      // Refusing is fine (a bad shared expert's scale where they are packed at creation, memory);
      // crashing is not, nor blaming the scales of a model whose scales are all finite.
      if (absl::IsDataLoss(session.status()) && !any_bad) {
        Fail(name + " session creation: DataLoss on a model loaded whole", session.status());
      }
      continue;
    }
    for (size_t layer = 0; layer < m.layers().size(); ++layer) {
      const LayerScales& s = scales[layer];
      if (s.bytes > kMaxLayerBytes) continue;
      for (const size_t n : {1 + layer % 2, kTokens}) {
        const absl::Status st = (*session)->Run(layer, input.data(), n, output.data());
        const std::string what = name + " layer " + std::to_string(layer);
        if (s.always_bad && !IsScaleError(st)) Fail(what + " ran with a bad scale", st);
        if (!s.any_bad && absl::IsDataLoss(st)) Fail(what + ": DataLoss with finite scales", st);
        if (!s.any_bad && name == "reference" && !st.ok()) Fail(what + " failed", st);
      }
    }
  }
  return 0;
}
