// Tester builders used by every backend's tests:
//   FfnTester().d_model(61).d_ff(173).tokens(7).activation(Activation::GELU_ERF).gated(true)
//       .Test("xnnpack");
// builds a random model with the real writer, runs it through `backend` and through the reference
// backend, and compares with the tolerance from tolerances.h.
#ifndef FFLITE_TESTS_TESTING_TESTERS_H_
#define FFLITE_TESTS_TESTING_TESTERS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "format/model.h"
#include "backends/cpu/cpu_options.h"
#include "format/writer.h"
#include "testing/model_builder.h"

namespace fflite {
namespace testing {

// Compares [tokens, d] outputs row by row: |got - want| <= rel_tol · (|want| + rms(want row)).
// Adds a gtest failure naming the first bad element and returns false on mismatch.
bool ExpectOutputsNear(const std::vector<float>& want, const std::vector<float>& got, size_t tokens,
                       size_t d, double rel_tol, const std::string& what);

// The tolerance for float weights of `dtype` through the CPU backend with its default options
// against the reference: kBf16ActRelTol where it multiplies bf16 weights in bf16 on this CPU,
// else kF32RelTol.
double FloatRelTol(DType dtype);

// The tolerance for `backend` (a registry name) with float weights of `dtype` against the
// reference: FloatRelTol for the CPU backends; for cuda kTensorCoreRelTol where f16/bf16 weights
// meet tensor cores, else kF32RelTol (f32 weights keep f32 arithmetic; quantised ones are
// dequantised to f32 exactly).
double BackendRelTol(const std::string& backend, DType dtype);

// Runs layer 0 of `spec` (written with `write`) through the reference and through the CPU backend
// with `options`, `tokens` tokens on `threads` threads, and compares with `tolerance` (see
// ExpectOutputsNear); *out, where given, receives the CPU backend's output.
void ExpectCpuMatchesReference(const ModelSpec& spec, const WriteOptions& write, size_t tokens,
                               int threads, const CpuBackendOptions& options, double tolerance,
                               const std::string& what, std::vector<float>* out = nullptr);

// Common layer options of both testers.
template <typename Derived>
class LayerTesterBase {
 public:
  Derived& d_model(uint32_t v) { ffn_.d_model = v; return self(); }
  Derived& d_ff(uint32_t v) { ffn_.d_ff = v; return self(); }
  Derived& activation(Activation v) { ffn_.activation = v; return self(); }
  Derived& gated(bool v) { ffn_.gated = v; return self(); }
  Derived& bias(bool v) { ffn_.bias = v; return self(); }
  Derived& tokens(size_t v) { tokens_ = v; return self(); }
  Derived& threads(int v) { threads_ = v; return self(); }
  Derived& norm(NormKind kind, NormPlacement placement) {
    norm_kind_ = kind;
    norm_placement_ = placement;
    return self();
  }
  Derived& residual(bool v) { residual_ = v; return self(); }
  // F32/F16/BF16: every tensor; a quantised dtype (I8, I4, the k-quants): the weight matrices,
  // quantised by the writer (the rest f32; a k-quant matrix whose in_features is not whole
  // super-blocks falls back to I4 or I8, as the writer does), `rotate` choosing the
  // block-rotated layout (I8/I4).
  Derived& dtype(DType v) { dtype_ = v; return self(); }
  Derived& rotate(bool v) { rotate_ = v; return self(); }
  Derived& d_ff_alignment(uint32_t v) { alignment_ = v; return self(); }
  Derived& seed(uint32_t v) { seed_ = v; return self(); }
  Derived& tolerance(double v) { tolerance_ = v; return self(); }  // default: BackendRelTol
  // Session option of the backend under test (the reference ignores it).
  Derived& expert_budget(uint64_t bytes) { expert_budget_ = bytes; return self(); }

 protected:
  Derived& self() { return static_cast<Derived&>(*this); }
  // Wraps `layer` into a one-layer model, runs it through `backend` and the reference, compares.
  void TestLayer(LayerSpec layer, Rng& rng, const std::string& backend) const;

  FfnParams ffn_;
  size_t tokens_ = 3;
  int threads_ = 1;
  std::optional<NormKind> norm_kind_;
  NormPlacement norm_placement_ = NormPlacement::PRE;
  bool residual_ = false;
  DType dtype_ = DType::F32;
  bool rotate_ = false;
  uint32_t alignment_ = 64;
  uint32_t seed_ = 1;
  double tolerance_ = -1.0;  // < 0: BackendRelTol(backend, dtype)
  uint64_t expert_budget_ = 0;
};

class FfnTester : public LayerTesterBase<FfnTester> {
 public:
  void Test(const std::string& backend) const;
};

// For MoE layers Test() also checks the routing statistics: the backend's per-expert token
// counts (Session::ExpertCounts) must equal the reference's.
class MoeTester : public LayerTesterBase<MoeTester> {
 public:
  MoeTester& moe(const MoeParams& p) { moe_ = p; return *this; }
  // Edits the random layer before it is written (tied router rows, a dominant expert, ...).
  MoeTester& customize(std::function<void(MoeSpec*)> f) { customize_ = std::move(f); return *this; }
  void Test(const std::string& backend) const;

 private:
  MoeParams moe_;
  std::function<void(MoeSpec*)> customize_;
};

// Resident bytes of the mapping that holds `p`, from /proc/self/smaps (-1 if not found; qemu-user
// shows no guest mapping there).
int64_t MappingRssBytes(const void* p);

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_TESTING_TESTERS_H_
