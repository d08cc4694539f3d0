// ValueNorms (format/value_norms.h): ‖vᵢ‖ of every neuron's value vector (column i of down), read
// from the stored weights in each dtype and layout, against the norms of the f32 values the
// model was written from. Tolerances: tolerances.h (kValueNorm*), argued from each dtype's
// rounding of the stored weights.
#include "format/value_norms.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using ::testing::HasSubstr;
using testing::Rng;
using testing::StatusIs;

constexpr uint32_t kDModel = 21;  // odd: rows of down
constexpr uint32_t kDff = 37;     // odd, padded to 64: padding columns must not count

struct Case {
  const char* name;
  DType dtype;
  bool rotate;  // quantised: the block-rotated layout
  bool value_rows = false;  // float: down stored transposed (Layout::VALUE_ROWS)
};

// down [d_model, d_ff] with column i scaled by (0.25 + 2·i/d_ff), so that the norms spread over
// a factor of ~9 and a wrong column is far outside every tolerance; column 5 is all zero.
std::vector<float> SpreadDown(Rng& rng) {
  std::vector<float> down = rng.Vec(size_t{kDModel} * kDff, 0.3f);
  for (uint32_t r = 0; r < kDModel; ++r) {
    for (uint32_t i = 0; i < kDff; ++i) {
      down[r * kDff + i] *= i == 5 ? 0.0f : 0.25f + 2.0f * static_cast<float>(i) / kDff;
    }
  }
  return down;
}

TEST(ValueNormsTest, MatchTheNormsOfTheSourceWeights) {
  const Case cases[] = {{"f32", DType::F32, false},  {"f16", DType::F16, false},
                        {"bf16", DType::BF16, false}, {"i8", DType::I8, false},
                        {"i8_rotated", DType::I8, true}, {"i4", DType::I4, false},
                        {"f32_value_rows", DType::F32, false, true},
                        {"bf16_value_rows", DType::BF16, false, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Rng rng(11);
    ModelSpec spec;
    spec.d_model = kDModel;
    LayerSpec layer;
    layer.ffn = testing::RandomFfn({kDModel, kDff, Activation::SILU, true, false}, rng);
    const std::vector<float> down = SpreadDown(rng);
    layer.ffn.down = TensorFromF32({kDModel, kDff}, down);
    spec.layers.push_back(layer);

    WriteOptions options;
    const DType dtype = c.dtype;
    options.matrix_dtype = [dtype](const std::string&, DType) { return dtype; };
    options.quantize.rotate = c.rotate;
    if (c.value_rows) {
      options.down_value_rows = [](const std::string&, const FfnSpec&) { return true; };
    }
    double max_abs_error = -1.0;  // of down, as the quantiser reports it
    options.quantized = [&max_abs_error](const std::string& path, DType,
                                         const QuantStats& stats) {
      if (absl::EndsWith(path, ".down")) max_abs_error = stats.max_abs_error;
    };
    auto model = testing::BuildModel(spec, options);
    ASSERT_TRUE(model.ok()) << model.status();
    const FfnView& f = model->model->layers()[0].ffn;
    ASSERT_EQ(f.down.dtype, c.dtype);
    ASSERT_GT(f.d_ff_padded, f.d_ff);
    if (c.rotate) {
      ASSERT_EQ(f.down.layout, Layout::PANEL16_K4_HADAMARD32);
    }
    ASSERT_EQ(f.down.value_rows(), c.value_rows);

    std::vector<double> norms;
    ASSERT_THAT(ValueNorms(f, &norms), testing::IsOk());
    ASSERT_EQ(norms.size(), kDff);

    // The bound of tolerances.h for this dtype, on top of the norm itself.
    double rel = 0.0, abs = 0.0;
    switch (c.dtype) {
      case DType::F32: rel = testing::kValueNormF32RelTol; break;
      case DType::F16:
        rel = testing::kValueNormF16RelTol;
        abs = std::sqrt(double{kDModel}) * testing::kValueNormF16SubnormalAbs;
        break;
      case DType::BF16: rel = testing::kValueNormBf16RelTol; break;
      default:
        // Not vacuous: the reported error is a small fraction of the weights' scale (0.3 · 2.25).
        ASSERT_GE(max_abs_error, 0.0) << "the writer did not report down's quantisation";
        ASSERT_LT(max_abs_error, c.dtype == DType::I8 ? 0.01 : 0.1);
        abs = std::sqrt(double{kDModel}) * max_abs_error;
        break;
    }
    for (uint32_t i = 0; i < kDff; ++i) {
      double sum = 0.0;
      for (uint32_t r = 0; r < kDModel; ++r) {
        const double v = down[r * kDff + i];
        sum += v * v;
      }
      const double want = std::sqrt(sum);
      EXPECT_NEAR(norms[i], want, rel * want + abs) << "neuron " << i;
    }
    // A zero column stays exactly zero, except in the rotated layout, where each block's
    // quantisation error is spread over its 32 columns (within the bound above).
    if (!c.rotate) {
      EXPECT_EQ(norms[5], 0.0);
    }
  }
}

// A routed expert's FFN is read the same way as a dense one (each expert its own down).
TEST(ValueNormsTest, RoutedExperts) {
  Rng rng(12);
  testing::MoeParams p;
  p.num_experts = 3;
  p.top_k = 1;
  p.expert = {kDModel, kDff, Activation::SILU, true, false};
  ModelSpec spec;
  spec.d_model = kDModel;
  LayerSpec layer;
  layer.kind = LayerKind::kMoe;
  layer.moe = testing::RandomMoe(p, rng);
  std::vector<std::vector<float>> downs;
  for (FfnSpec& e : layer.moe.experts) {
    downs.push_back(SpreadDown(rng));
    e.down = TensorFromF32({kDModel, kDff}, downs.back());
  }
  spec.layers.push_back(layer);
  auto model = testing::BuildModel(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  for (size_t e = 0; e < downs.size(); ++e) {
    std::vector<double> norms;
    ASSERT_THAT(ValueNorms(model->model->layers()[0].moe.experts[e], &norms), testing::IsOk());
    ASSERT_EQ(norms.size(), kDff);
    for (uint32_t i = 0; i < kDff; ++i) {
      double sum = 0.0;
      for (uint32_t r = 0; r < kDModel; ++r) {
        const double v = downs[e][r * kDff + i];
        sum += v * v;
      }
      EXPECT_NEAR(norms[i], std::sqrt(sum), testing::kValueNormF32RelTol * std::sqrt(sum))
          << "expert " << e << ", neuron " << i;
    }
  }
}

TEST(ValueNormsTest, BadArguments) {
  Rng rng(13);
  ModelSpec spec;
  spec.d_model = kDModel;
  LayerSpec layer;
  layer.ffn = testing::RandomFfn({kDModel, kDff, Activation::RELU, false, false}, rng);
  spec.layers.push_back(layer);
  auto model = testing::BuildModel(spec);
  ASSERT_TRUE(model.ok()) << model.status();
  const FfnView& f = model->model->layers()[0].ffn;
  EXPECT_THAT(ValueNorms(f, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("norms is null")));
  FfnView no_down = f;
  no_down.down = TensorView();
  std::vector<double> norms;
  EXPECT_THAT(ValueNorms(no_down, &norms),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no down matrix")));
  FfnView bad_layout = f;
  bad_layout.down.layout = Layout::PANEL16_K4;  // not a layout of f32
  EXPECT_THAT(ValueNorms(bad_layout, &norms),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout panel16_k4")));
}

}  // namespace
}  // namespace fflite
