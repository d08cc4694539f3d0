// fflite-imatrix's library: the importance vectors of a dense layer with and without its norm and
// of an MoE layer's routed experts against sums worked out here, the file it writes read back by
// the converter's safetensors reader, and its refusals.
#include "imatrix.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "converter/safetensors.h"
#include "fflite/fflite.h"
#include "format/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/checkpoint_writer.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"

namespace fflite {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kD = 32, kFf = 40, kTokens = 300;  // > the tool's 256-token chunks

class ImatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir();
    inputs_ = root_ + "/inputs";
    std::filesystem::create_directories(inputs_);
    Rng rng(3);
    ModelSpec spec;
    spec.d_model = kD;
    FfnParams fp;
    fp.d_model = kD;
    fp.d_ff = kFf;
    // 0: dense, no norm; 1: dense after an RMSNorm of weight 2; 2: MoE, 4 experts, top-2.
    LayerSpec dense;
    dense.name = "dense";
    dense.ffn = RandomFfn(fp, rng);
    ffn0_ = dense.ffn;
    spec.layers.push_back(dense);
    LayerSpec normed = dense;
    normed.name = "normed";
    NormSpec norm;
    norm.eps = 1e-6f;
    norm.weight = TensorFromF32({kD}, std::vector<float>(kD, 2.0f));
    normed.norm = norm;
    spec.layers.push_back(normed);
    LayerSpec moe;
    moe.name = "moe";
    moe.kind = LayerKind::kMoe;
    MoeParams mp;
    mp.num_experts = 4;
    mp.top_k = 2;
    mp.expert = fp;
    moe.moe = RandomMoe(mp, rng);
    spec.layers.push_back(moe);
    model_ = root_ + "/model.fflite";
    ASSERT_OK(WriteModelFile(spec, WriteOptions(), model_));
    for (int l = 0; l < 3; ++l) tokens_[l] = rng.Vec(kTokens * kD, 1.5f);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void WriteTokens(int layer, const std::vector<float>& x) {
    std::FILE* f = std::fopen((inputs_ + "/layer" + std::to_string(layer) + ".f32").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(x.data(), 4, x.size(), f), x.size());
    ASSERT_EQ(std::fclose(f), 0);
  }

  std::string root_, inputs_, model_;
  FfnSpec ffn0_;
  std::vector<float> tokens_[3];
};

// The f32 values of a TensorFromF32 source.
std::vector<float> Values(const TensorSource& t) {
  std::vector<float> v(t.shape[0] * (t.shape.size() > 1 ? t.shape[1] : 1));
  EXPECT_OK(t.fill(reinterpret_cast<uint8_t*>(v.data()), v.size() * 4));
  return v;
}

TEST_F(ImatrixTest, DenseLayersWithAndWithoutNorm) {
  WriteTokens(0, tokens_[0]);
  WriteTokens(1, tokens_[1]);
  imatrix::ImportanceRun run;
  ASSERT_OK_AND_ASSIGN(auto v, imatrix::ComputeImportance(model_, inputs_, 2, &run));
  EXPECT_EQ(run.layers, 2u);
  EXPECT_EQ(run.tokens, 2u * kTokens);
  ASSERT_EQ(v.size(), 4u);  // input and hidden of layers 0 and 1; layer 2 had no tokens
  // Layer 0: the tokens' mean squares; the hidden layer's from silu(gate·x)·(up·x) in double.
  const std::vector<float> up = Values(ffn0_.up), gate = Values(ffn0_.gate);
  std::vector<double> in(kD, 0.0), hidden(kFf, 0.0), in1(kD, 0.0);
  for (uint32_t t = 0; t < kTokens; ++t) {
    const float* x = &tokens_[0][t * kD];
    for (uint32_t j = 0; j < kD; ++j) in[j] += double{x[j]} * x[j] / kTokens;
    for (uint32_t i = 0; i < kFf; ++i) {
      double a = 0, b = 0;
      for (uint32_t j = 0; j < kD; ++j) {
        a += double{gate[i * kD + j]} * x[j];
        b += double{up[i * kD + j]} * x[j];
      }
      const double h = a / (1 + std::exp(-a)) * b;
      hidden[i] += h * h / kTokens;
    }
    // Layer 1: RMSNorm of weight 2: 4·x²/(mean(x²) + eps).
    const float* x1 = &tokens_[1][t * kD];
    double ms = 0;
    for (uint32_t j = 0; j < kD; ++j) ms += double{x1[j]} * x1[j] / kD;
    for (uint32_t j = 0; j < kD; ++j) in1[j] += 4.0 * x1[j] * x1[j] / (ms + 1e-6) / kTokens;
  }
  const std::vector<float>& got_in = v["layers[0].input"];
  const std::vector<float>& got_hidden = v["layers[0].ffn.hidden"];
  const std::vector<float>& got_in1 = v["layers[1].input"];
  ASSERT_EQ(got_in.size(), kD);
  ASSERT_EQ(got_hidden.size(), kFf);
  ASSERT_EQ(got_in1.size(), kD);
  // Sums of 300 squares in double, stored as f32: 1e-6. The hidden layer runs on the CPU
  // backend's float kernels: 1e-4 relative.
  for (uint32_t j = 0; j < kD; ++j) EXPECT_NEAR(got_in[j], in[j], 1e-6 * in[j]) << j;
  for (uint32_t j = 0; j < kD; ++j) EXPECT_NEAR(got_in1[j], in1[j], 1e-5 * in1[j]) << j;
  for (uint32_t i = 0; i < kFf; ++i) EXPECT_NEAR(got_hidden[i], hidden[i], 1e-4 * hidden[i]) << i;
  EXPECT_EQ(v.count("layers[1].ffn.hidden"), 1u);
}

TEST_F(ImatrixTest, MoeExpertsWeighByTheirRoutingWeightSquared) {
  WriteTokens(2, tokens_[2]);
  ASSERT_OK_AND_ASSIGN(auto v, imatrix::ComputeImportance(model_, inputs_, 1, nullptr));
  // The same tokens through a session with a capture of its own: each routed expert's mean of
  // weight²·h² over the tokens that chose it.
  fflite_model* model = nullptr;
  ASSERT_EQ(fflite_model_load_file(model_.c_str(), &model), FFLITE_STATUS_OK);
  fflite_session_options o;
  fflite_session_options_init(&o);
  o.max_tokens = kTokens;
  o.backend = FFLITE_BACKEND_REFERENCE;
  fflite_session* s = nullptr;
  ASSERT_EQ(fflite_session_create(model, &o, &s), FFLITE_STATUS_OK);
  std::vector<float> h(kTokens * 2 * kFf), w(kTokens * 2), y(kTokens * kD);
  std::vector<int32_t> e(kTokens * 2);
  ASSERT_EQ(fflite_session_set_capture(s, 2, h.data(), h.size(), e.data(), w.data(), e.size()),
            FFLITE_STATUS_OK);
  ASSERT_EQ(fflite_session_run(s, 2, tokens_[2].data(), kTokens, y.data()), FFLITE_STATUS_OK);
  fflite_session_free(s);
  fflite_model_free(model);
  std::vector<std::vector<double>> want(4, std::vector<double>(kFf, 0.0));
  std::vector<double> count(4, 0.0);
  for (uint32_t t = 0; t < kTokens; ++t) {
    for (uint32_t k = 0; k < 2; ++k) {
      const int32_t x = e[t * 2 + k];
      const double ww = double{w[t * 2 + k]} * w[t * 2 + k];
      for (uint32_t i = 0; i < kFf; ++i) {
        want[x][i] += ww * h[(t * 2 + k) * kFf + i] * h[(t * 2 + k) * kFf + i];
      }
      count[x] += 1;
    }
  }
  size_t experts_seen = 0;
  for (int x = 0; x < 4; ++x) {
    const std::string name = "layers[2].moe.experts[" + std::to_string(x) + "].hidden";
    ASSERT_EQ(v.count(name), count[x] > 0 ? 1u : 0u) << name;
    if (count[x] == 0) continue;
    ++experts_seen;
    for (uint32_t i = 0; i < kFf; ++i) {
      // The tool's session runs the CPU backend, this one the reference: 1e-3 relative.
      const double m = want[x][i] / count[x];
      EXPECT_NEAR(v[name][i], m, 1e-3 * m + 1e-9) << name << " " << i;
    }
  }
  EXPECT_GE(experts_seen, 2u);
  EXPECT_EQ(v.count("layers[2].input"), 1u);
}

TEST_F(ImatrixTest, WrittenFileReadsBackAndBadInputsAreRefusedByName) {
  WriteTokens(0, tokens_[0]);
  ASSERT_OK_AND_ASSIGN(auto v, imatrix::ComputeImportance(model_, inputs_, 1, nullptr));
  const std::string out = root_ + "/imatrix.safetensors";
  ASSERT_OK(imatrix::WriteImportance(out, v));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  ASSERT_OK_AND_ASSIGN(auto st, converter::SafetensorsFile::Open(out));
  ASSERT_EQ(st->tensors().size(), v.size());
  for (const auto& [name, values] : v) {
    const converter::SafetensorsTensor* t = st->Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, "F32");
    EXPECT_EQ(t->shape, std::vector<uint64_t>{values.size()});
    EXPECT_EQ(std::memcmp(st->Data(*t), values.data(), values.size() * 4), 0) << name;
  }
  // A file that is not whole tokens, a NaN, no file at all, a bad folder for the output.
  std::vector<float> part(tokens_[0].begin(), tokens_[0].begin() + kD + 3);
  WriteTokens(0, part);
  EXPECT_THAT(imatrix::ComputeImportance(model_, inputs_, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer0.f32: 140 bytes is not a positive multiple of 4 * d_model "
                                 "= 128 bytes")));
  std::vector<float> nan = tokens_[0];
  nan[kD + 5] = std::nanf("");
  WriteTokens(0, nan);
  EXPECT_THAT(imatrix::ComputeImportance(model_, inputs_, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layer0.f32: token 1, element 5 is not finite")));
  std::filesystem::remove(inputs_ + "/layer0.f32");
  EXPECT_THAT(imatrix::ComputeImportance(model_, inputs_, 1, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no layer<i>.f32 file for any of the model's 3 layers")));
  EXPECT_THAT(imatrix::ComputeImportance(model_, inputs_, 0, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--threads 0")));
  EXPECT_THAT(imatrix::WriteImportance(root_ + "/no/such/dir/x.safetensors", v),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot create")));
}

}  // namespace
}  // namespace testing
}  // namespace fflite
