// Shared pieces of the converter tests: a temporary folder per test, convert-and-load, and the
// plain double-precision building blocks the tests use to compute each architecture's FFN
// independently of the converter and the runtime (HF layouts: nn.Linear [out, in], Conv1D
// [in, out]).
#ifndef FFLITE_TESTS_CONVERTER_TEST_UTIL_H_
#define FFLITE_TESTS_CONVERTER_TEST_UTIL_H_

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "converter/convert.h"
#include "format/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/checkpoint_writer.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace testing {

using Vec = std::vector<double>;

// y = W·x (+ b), W [out, in] row-major: nn.Linear.
inline Vec HfLinear(const std::vector<float>& w, const std::vector<float>* b, const Vec& x) {
  const size_t in = x.size(), out = w.size() / in;
  Vec y(out, 0.0);
  for (size_t o = 0; o < out; ++o) {
    double acc = b ? (*b)[o] : 0.0;
    for (size_t i = 0; i < in; ++i) acc += static_cast<double>(w[o * in + i]) * x[i];
    y[o] = acc;
  }
  return y;
}

// y = x·W (+ b), W [in, out] row-major: transformers' Conv1D (GPT-2).
inline Vec HfConv1D(const std::vector<float>& w, const std::vector<float>* b, const Vec& x) {
  const size_t in = x.size(), out = w.size() / in;
  Vec y(out, 0.0);
  for (size_t o = 0; o < out; ++o) {
    double acc = b ? (*b)[o] : 0.0;
    for (size_t i = 0; i < in; ++i) acc += x[i] * static_cast<double>(w[i * out + o]);
    y[o] = acc;
  }
  return y;
}

// transformers/activations.py, by ACT2FN name.
inline double HfAct(const std::string& name, double x) {
  const double pi = 3.14159265358979323846;
  if (name == "relu") return x > 0 ? x : 0.0;
  if (name == "silu" || name == "swish") return x / (1.0 + std::exp(-x));
  if (name == "gelu") return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * std::pow(x, 3.0))));
  }
  ADD_FAILURE() << "no reference for activation " << name;
  return 0.0;
}

// LlamaRMSNorm / T5LayerNorm: x · rsqrt(mean(x²) + eps) · w; GemmaRMSNorm uses (1 + w).
inline Vec HfRmsNorm(const Vec& x, const std::vector<float>& w, double eps, bool one_plus = false) {
  double ms = 0.0;
  for (double v : x) ms += v * v;
  ms /= static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = x[i] / std::sqrt(ms + eps) * ((one_plus ? 1.0 : 0.0) + w[i]);
  }
  return y;
}

// nn.LayerNorm: (x - mean) / sqrt(var + eps) · w + b, biased variance.
inline Vec HfLayerNorm(const Vec& x, const std::vector<float>& w, const std::vector<float>& b,
                       double eps) {
  double mean = 0.0, var = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
  return y;
}

inline Vec Add(Vec a, const Vec& b, double scale = 1.0) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += scale * b[i];
  return a;
}

// down(act(gate·x) ⊙ up·x) from "<prefix>.<gate>.weight" etc.
inline Vec HfGatedMlp(const CheckpointWriter& w, const std::string& prefix, const std::string& act,
                      const Vec& x, const std::string& gate = "gate_proj",
                      const std::string& up = "up_proj", const std::string& down = "down_proj") {
  Vec g = HfLinear(w.Get(prefix + "." + gate + ".weight"), nullptr, x);
  const Vec u = HfLinear(w.Get(prefix + "." + up + ".weight"), nullptr, x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = HfAct(act, g[i]) * u[i];
  return HfLinear(w.Get(prefix + "." + down + ".weight"), nullptr, g);
}

// Adds a gated MLP's three nn.Linear weights.
inline void AddGatedMlp(CheckpointWriter& w, Rng& rng, const std::string& prefix, uint64_t d,
                        uint64_t ff, const std::string& gate = "gate_proj",
                        const std::string& up = "up_proj", const std::string& down = "down_proj",
                        const std::string& dtype = "") {
  w.AddRandom(prefix + "." + gate + ".weight", {ff, d}, rng, 0.5f, dtype);
  w.AddRandom(prefix + "." + up + ".weight", {ff, d}, rng, 0.5f, dtype);
  w.AddRandom(prefix + "." + down + ".weight", {d, ff}, rng, 0.5f, dtype);
}

class ConverterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir();
    ckpt_ = root_ + "/ckpt";
    out_dir_ = root_ + "/out";
    std::filesystem::create_directories(ckpt_);
    std::filesystem::create_directories(out_dir_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Writes the checkpoint, converts it and loads the result (nullptr after a test failure).
  std::unique_ptr<Model> Convert(const CheckpointWriter& w, const nlohmann::json& config,
                                 converter::ConvertOptions options = {}, int shards = 1,
                                 const std::string& name = "model.fflite") {
    EXPECT_OK(w.Write(ckpt_, config.dump(1), shards));
    const std::string out = out_dir_ + "/" + name;
    auto result = converter::ConvertCheckpoint(ckpt_, out, options);
    EXPECT_OK(result.status());
    if (!result.ok()) return nullptr;
    auto model = Model::LoadFile(out);
    EXPECT_OK(model.status());
    return model.ok() ? std::move(*model) : nullptr;
  }

  // Runs `tokens` random inputs through `layer` and compares each with `ref(x)`.
  void ExpectLayer(const Model& model, size_t layer, const std::function<Vec(const Vec&)>& ref,
                   size_t tokens = 3, uint32_t seed = 99) {
    const size_t d = model.d_model();
    Rng rng(seed);
    const std::vector<float> input = rng.Vec(tokens * d, 1.0f);
    ASSERT_OK_AND_ASSIGN(std::vector<float> out, RunLayer(model, "reference", layer, input, tokens));
    for (size_t t = 0; t < tokens; ++t) {
      const Vec x(input.begin() + static_cast<long>(t * d), input.begin() + static_cast<long>((t + 1) * d));
      const Vec want = ref(x);
      ASSERT_EQ(want.size(), d);
      for (size_t i = 0; i < d; ++i) {
        EXPECT_NEAR(out[t * d + i], want[i], kHandAbsTol + kHandRelTol * std::fabs(want[i]))
            << "layer " << layer << " (" << model.layers()[layer].name << ") token " << t
            << " element " << i;
      }
    }
  }

  std::string root_, ckpt_, out_dir_;
};

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_CONVERTER_TEST_UTIL_H_
