// FfnTester / MoeTester: random layer -> backend vs reference.
#include "testing/testers.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "backends/cpu/cpu_backend.h"
#include "format/dtype.h"
#include "session/session.h"
#include "testing/backends.h"
#include "testing/tolerances.h"

namespace fflite {
namespace testing {

double FloatRelTol(DType dtype) {
  return dtype == DType::BF16 && CpuBf16Arithmetic(CpuBackendOptions()) ? kBf16ActRelTol
                                                                                : kF32RelTol;
}

double BackendRelTol(const std::string& backend, DType dtype) {
  if (backend == "cuda") {
    return dtype == DType::F16 || dtype == DType::BF16 ? kTensorCoreRelTol : kF32RelTol;
  }
  return FloatRelTol(dtype);
}

bool ExpectOutputsNear(const std::vector<float>& want, const std::vector<float>& got, size_t tokens,
                       size_t d, double rel_tol, const std::string& what) {
  if (want.size() != tokens * d || got.size() != tokens * d) {
    ADD_FAILURE() << what << ": output sizes " << want.size() << " / " << got.size();
    return false;
  }
  for (size_t t = 0; t < tokens; ++t) {
    double sq = 0.0;
    for (size_t i = 0; i < d; ++i) sq += static_cast<double>(want[t * d + i]) * want[t * d + i];
    const double rms = std::sqrt(sq / static_cast<double>(d));
    for (size_t i = 0; i < d; ++i) {
      const double w = want[t * d + i], g = got[t * d + i];
      const double tol = rel_tol * (std::fabs(w) + rms);
      if (!(std::fabs(g - w) <= tol)) {
        ADD_FAILURE() << absl::StrFormat(
            "%s: token %d, feature %d: got %.9g, want %.9g (|diff| %.3g > tol %.3g, row rms %.3g)",
            what, t, i, g, w, std::fabs(g - w), tol, rms);
        return false;
      }
    }
  }
  return true;
}

template <typename Derived>
void LayerTesterBase<Derived>::TestLayer(LayerSpec layer, Rng& rng,
                                         const std::string& backend) const {
  if (norm_kind_.has_value()) {
    layer.norm = RandomNorm(*norm_kind_, norm_placement_, ffn_.d_model, rng);
    // A sandwich: a second norm of the same kind on the body's output.
    if (norm_placement_ == NormPlacement::SANDWICH) {
      layer.output_norm = RandomNorm(*norm_kind_, norm_placement_, ffn_.d_model, rng);
    }
  }
  layer.residual = residual_;
  ModelSpec spec;
  spec.d_model = ffn_.d_model;
  spec.layers.push_back(std::move(layer));
  WriteOptions options;
  const DTypeInfo* info = FindDType(dtype_);
  if (info != nullptr && info->quantized) {  // the matrices quantised, the rest f32
    const DType quantized = dtype_;
    options.dtype = DType::F32;
    options.matrix_dtype = [quantized](const std::string&, DType) { return quantized; };
    options.quantize.rotate = rotate_;
  } else {
    options.dtype = dtype_;
  }
  options.d_ff_alignment = alignment_;
  auto built = BuildModel(spec, options);
  ASSERT_TRUE(built.ok()) << built.status();
  const std::vector<float> input = rng.Vec(tokens_ * ffn_.d_model, 2.0f);
  SessionOptions ref_options;
  ref_options.backend = "reference";
  ref_options.max_tokens = tokens_;
  auto ref = Session::Create(*built->model, ref_options);
  ASSERT_TRUE(ref.ok()) << ref.status();
  SessionOptions session_options;
  session_options.backend = backend;
  session_options.num_threads = threads_;
  session_options.max_tokens = tokens_;
  session_options.expert_budget_bytes = expert_budget_;
  auto session = Session::Create(*built->model, session_options);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> want(tokens_ * ffn_.d_model), got(tokens_ * ffn_.d_model);
  ASSERT_TRUE((*ref)->Run(0, input.data(), tokens_, want.data()).ok());
  const absl::Status st = (*session)->Run(0, input.data(), tokens_, got.data());
  ASSERT_TRUE(st.ok()) << st;
  const std::string what = absl::StrFormat(
      "%s vs reference (d_model %d, d_ff %d, tokens %d, %s, gated %d, bias %d, %s%s, threads %d, "
      "budget %d)",
      backend, ffn_.d_model, ffn_.d_ff, tokens_, ActivationName(ffn_.activation), ffn_.gated,
      ffn_.bias, DTypeName(dtype_), rotate_ ? " rotated" : "", threads_, expert_budget_);
  ExpectOutputsNear(want, got, tokens_, ffn_.d_model,
                    tolerance_ < 0 ? BackendRelTol(backend, dtype_) : tolerance_, what);
  if (built->model->layers()[0].kind == LayerKind::kMoe) {
    auto want_counts = (*ref)->ExpertCounts(0);
    auto got_counts = (*session)->ExpertCounts(0);
    ASSERT_TRUE(want_counts.ok() && got_counts.ok());
    const std::vector<uint64_t> w(want_counts->begin(), want_counts->end());
    const std::vector<uint64_t> g(got_counts->begin(), got_counts->end());
    uint64_t total = 0;
    for (uint64_t c : w) total += c;
    EXPECT_EQ(total, tokens_ * built->model->layers()[0].moe.top_k) << what;
    EXPECT_EQ(g, w) << what << ": routing statistics differ from the reference's";
  }
}

void FfnTester::Test(const std::string& backend) const {
  Rng rng(seed_);
  LayerSpec layer;
  layer.kind = LayerKind::kDense;
  layer.ffn = RandomFfn(ffn_, rng);
  TestLayer(std::move(layer), rng, backend);
}

void MoeTester::Test(const std::string& backend) const {
  Rng rng(seed_);
  MoeParams p = moe_;
  p.expert = ffn_;
  LayerSpec layer;
  layer.kind = LayerKind::kMoe;
  layer.moe = RandomMoe(p, rng);
  if (customize_) customize_(&layer.moe);
  TestLayer(std::move(layer), rng, backend);
}

template class LayerTesterBase<FfnTester>;
template class LayerTesterBase<MoeTester>;

void ExpectCpuMatchesReference(const ModelSpec& spec, const WriteOptions& write, size_t tokens,
                               int threads, const CpuBackendOptions& options, double tolerance,
                               const std::string& what, std::vector<float>* out) {
  auto built = BuildModel(spec, write);
  ASSERT_TRUE(built.ok()) << built.status();
  const std::vector<float> input = Rng(11).Vec(tokens * spec.d_model, 2.0f);
  auto want = RunLayer(*built->model, "reference", 0, input, tokens, 1);
  ASSERT_TRUE(want.ok()) << want.status();
  BackendConfig config;
  config.num_threads = threads;
  config.max_tokens = tokens;
  auto backend = CreateCpuBackendWithOptions(*built->model, config, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<float> got(tokens * spec.d_model);
  ASSERT_TRUE((*backend)->Run(0, input.data(), tokens, got.data()).ok());
  ExpectOutputsNear(*want, got, tokens, spec.d_model, tolerance, what);
  if (out != nullptr) *out = got;
}

int64_t MappingRssBytes(const void* p) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  char line[512];
  bool inside = false;
  int64_t rss = -1;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long lo = 0, hi = 0;  // NOLINT(runtime/int): the format of smaps
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
        std::strchr(line, '-') < std::strchr(line, ' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    long kb = 0;  // NOLINT(runtime/int)
    if (inside && std::sscanf(line, "Rss: %ld kB", &kb) == 1) {
      rss = static_cast<int64_t>(kb) * 1024;
      break;
    }
  }
  std::fclose(f);
  return rss;
}

}  // namespace testing
}  // namespace fflite
