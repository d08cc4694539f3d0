// Backend-neutral suites over every backend under test (the CPU backend, cuda where a GPU runs it),
// each against the reference: routing statistics through the C API, sessions on several threads
// sharing one model, converted Mixtral / Qwen2-MoE / DeepSeek-V3 checkpoints end to end, and
// quantised weights (I8, I4, plain and rotated). Expert budgets where the backend takes them
// (testing::TakesBudget); a backend that cannot run here is skipped with its reason.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "converter_test_util.h"
#include "fflite/fflite.h"
#include "format/writer.h"
#include "gtest/gtest.h"
#include "kernels/quant_kernels.h"
#include "session/session.h"
#include "testing/backends.h"
#include "testing/model_builder.h"
#include "testing/moe_variants.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::BackendName;
using testing::BackendsUnderTest;
using testing::FfnTester;
using testing::OneExpert;
using testing::Rng;
using testing::TakesBudget;

// The C API's name for a backend of the registry.
fflite_backend CBackend(const std::string& name) {
  if (name == "cuda") return FFLITE_BACKEND_CUDA;
  if (name == "xnnpack") return FFLITE_BACKEND_XNNPACK;
  return FFLITE_BACKEND_REFERENCE;
}

// --- Routing statistics through the C API, against the reference's. ---

class StatsSuiteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StatsSuiteTest, CApiCountsMatchReferenceAndReset) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  Rng rng(71);
  const uint32_t d = 20;
  auto built = testing::BuildModel(testing::BudgetModel(rng, d, 30));
  ASSERT_TRUE(built.ok()) << built.status();
  fflite_model* model = nullptr;
  ASSERT_EQ(fflite_model_load_buffer(built->bytes.data(), built->bytes.size(), &model),
            FFLITE_STATUS_OK);
  fflite_session* sessions[2] = {nullptr, nullptr};
  const fflite_backend backends[2] = {FFLITE_BACKEND_REFERENCE, CBackend(backend)};
  for (int i = 0; i < 2; ++i) {
    fflite_session_options opts;
    fflite_session_options_init(&opts);
    opts.backend = backends[i];
    opts.max_tokens = 50;
    if (i == 1 && TakesBudget(backend)) {
      opts.expert_budget_bytes = static_cast<int64_t>(OneExpert(d, 30, true) * 2);
    }
    ASSERT_EQ(fflite_session_create(model, &opts, &sessions[i]), FFLITE_STATUS_OK)
        << fflite_last_error_message();
  }
  for (size_t n : {size_t{1}, size_t{50}, size_t{7}}) {
    const std::vector<float> x = rng.Vec(n * d, 2.0f);
    std::vector<float> y(n * d);
    for (int32_t layer = 0; layer < 3; ++layer) {
      for (fflite_session* s : sessions) {
        ASSERT_EQ(fflite_session_run(s, layer, x.data(), n, y.data()), FFLITE_STATUS_OK);
      }
    }
  }
  const size_t expected_experts[3] = {8, 0, 12};
  const uint64_t top_k[3] = {2, 0, 4};
  for (int32_t layer = 0; layer < 3; ++layer) {
    std::vector<uint64_t> counts[2];
    for (int i = 0; i < 2; ++i) {
      size_t num = 99;
      // A size query first, then the counts.
      ASSERT_EQ(fflite_session_expert_counts(sessions[i], layer, nullptr, 0, &num),
                FFLITE_STATUS_OK);
      ASSERT_EQ(num, expected_experts[layer]);
      counts[i].assign(num + 1, 12345);
      ASSERT_EQ(fflite_session_expert_counts(sessions[i], layer, counts[i].data(), num + 1, &num),
                FFLITE_STATUS_OK);
      EXPECT_EQ(counts[i][num], 12345u) << "wrote past the expert count";
    }
    EXPECT_EQ(counts[0], counts[1]) << "layer " << layer;
    uint64_t total = 0;
    for (size_t e = 0; e < expected_experts[layer]; ++e) total += counts[1][e];
    EXPECT_EQ(total, 58 * top_k[layer]) << "layer " << layer;
  }
  // Errors.
  size_t num = 0;
  uint64_t few[4];
  EXPECT_EQ(fflite_session_expert_counts(sessions[1], 0, few, 4, &num),
            FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fflite_last_error_message()).find("capacity 4"), std::string::npos);
  EXPECT_EQ(num, 8u);
  EXPECT_EQ(fflite_session_expert_counts(sessions[1], 3, few, 4, &num), FFLITE_STATUS_OUT_OF_RANGE);
  EXPECT_EQ(fflite_session_expert_counts(sessions[1], -1, few, 4, &num),
            FFLITE_STATUS_OUT_OF_RANGE);
  EXPECT_EQ(fflite_session_expert_counts(nullptr, 0, few, 4, &num), FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(fflite_session_expert_counts(sessions[1], 0, few, 4, nullptr),
            FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(fflite_session_reset_expert_counts(nullptr), FFLITE_STATUS_INVALID_ARGUMENT);
  // Reset.
  ASSERT_EQ(fflite_session_reset_expert_counts(sessions[1]), FFLITE_STATUS_OK);
  std::vector<uint64_t> after(12, 7);
  ASSERT_EQ(fflite_session_expert_counts(sessions[1], 2, after.data(), 12, &num), FFLITE_STATUS_OK);
  EXPECT_EQ(after, std::vector<uint64_t>(12, 0));
  // A negative budget is refused.
  fflite_session_options opts;
  fflite_session_options_init(&opts);
  opts.backend = CBackend(backend);
  opts.expert_budget_bytes = -1;
  fflite_session* bad = nullptr;
  EXPECT_EQ(fflite_session_create(model, &opts, &bad), FFLITE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fflite_last_error_message()).find("expert_budget_bytes"),
            std::string::npos);
  for (fflite_session* s : sessions) fflite_session_free(s);
  fflite_model_free(model);
}

INSTANTIATE_TEST_SUITE_P(All, StatsSuiteTest, ::testing::ValuesIn(BackendsUnderTest()),
                         BackendName);

// --- Sessions on several threads share one model (file-backed, so page releases happen), each
// with its own budget where the backend takes one. The TSan suite runs this too. ---

class SharedModelSuiteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedModelSuiteTest, SessionsOnSeveralThreadsShareOneModel) {
  const std::string backend = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  Rng rng(81);
  const uint32_t d = 32, ff = 48;
  const std::string path = absl::StrFormat("%s/shared_model_%s_%d.fflite", ::testing::TempDir(),
                                           backend, static_cast<int>(getpid()));
  ASSERT_TRUE(WriteModelFile(testing::BudgetModel(rng, d, ff), WriteOptions(), path).ok());
  auto model = Model::LoadFile(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const size_t calls = 6, n = 5;
  std::vector<std::vector<float>> inputs, want;
  for (size_t c = 0; c < calls; ++c) {
    inputs.push_back(rng.Vec(n * d, 2.0f));
    auto w = testing::RunLayer(**model, "reference", c % 2 == 0 ? 0 : 2, inputs.back(), n);
    ASSERT_TRUE(w.ok());
    want.push_back(*w);
  }
  std::vector<uint64_t> budgets = {0, 0, 0, 0};
  if (TakesBudget(backend)) budgets = {0, 1, OneExpert(d, ff, true), 4 * OneExpert(d, ff, true)};
  std::vector<std::vector<std::vector<float>>> got(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      SessionOptions options;
      options.backend = backend;
      options.max_tokens = n;
      options.num_threads = i == 3 ? 2 : 1;
      options.expert_budget_bytes = budgets[i];
      auto session = Session::Create(**model, options);
      if (!session.ok()) {
        errors[i] = session.status().ToString();
        return;
      }
      for (size_t rep = 0; rep < 2; ++rep) {
        for (size_t c = 0; c < calls; ++c) {
          std::vector<float> y(n * d);
          absl::Status s = (*session)->Run(c % 2 == 0 ? 0 : 2, inputs[c].data(), n, y.data());
          if (!s.ok()) {
            errors[i] = s.ToString();
            return;
          }
          if (rep == 1) got[i].push_back(std::move(y));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(got[i].size(), calls) << "session " << i << " failed: " << errors[i];
    for (size_t c = 0; c < calls; ++c) {
      testing::ExpectOutputsNear(want[c], got[i][c], n, d, testing::kF32RelTol,
                                 absl::StrFormat("session %d, call %d", i, c));
    }
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(All, SharedModelSuiteTest, ::testing::ValuesIn(BackendsUnderTest()),
                         BackendName);

// --- Converted checkpoints end to end, against the reference. ---

using testing::AddGatedMlp;
using testing::CheckpointWriter;
using json = nlohmann::json;

class CheckpointSuiteTest : public testing::ConverterTest,
                            public ::testing::WithParamInterface<std::string> {
 protected:
  // Every layer, 1 and 9 tokens, without and (where the backend takes one) with a budget of a
  // single expert of `budget_layer`.
  void ExpectMatches(const Model& model, size_t budget_layer) {
    const std::string backend = GetParam();
    std::vector<uint64_t> budgets = {0};
    if (TakesBudget(backend)) {
      budgets.push_back(CpuPackedFfnBytes(model.layers()[budget_layer].moe.experts[0]));
    }
    const size_t d = model.d_model();
    for (size_t tokens : {size_t{1}, size_t{9}}) {
      const std::vector<float> x = Rng(5).Vec(tokens * d, 1.0f);
      for (size_t layer = 0; layer < model.layers().size(); ++layer) {
        auto want = testing::RunLayer(model, "reference", layer, x, tokens);
        ASSERT_TRUE(want.ok()) << want.status();
        for (uint64_t budget : budgets) {
          auto got = testing::RunLayer(model, backend, layer, x, tokens, 1, budget);
          ASSERT_TRUE(got.ok()) << got.status();
          testing::ExpectOutputsNear(*want, *got, tokens, d,
                                     testing::BackendRelTol(backend, DType::F32),
                                     absl::StrFormat("%s, %d tokens, budget %d",
                                                     model.layers()[layer].name, tokens, budget));
        }
      }
    }
  }
};

constexpr uint64_t kD = 24;

TEST_P(CheckpointSuiteTest, Mixtral) {
  SKIP_UNLESS_AVAILABLE(GetParam());
  Rng rng(91);
  CheckpointWriter w;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    w.AddRandom(p + ".block_sparse_moe.gate.weight", {8, kD}, rng, 0.5f);
    for (int e = 0; e < 8; ++e) {
      AddGatedMlp(w, rng, p + ".block_sparse_moe.experts." + std::to_string(e), kD, 40, "w1", "w3",
                  "w2", "BF16");
    }
  }
  const json config = {{"model_type", "mixtral"}, {"hidden_size", kD}, {"intermediate_size", 40},
                       {"num_hidden_layers", 2}, {"num_local_experts", 8},
                       {"num_experts_per_tok", 2}, {"rms_norm_eps", 1e-5}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ExpectMatches(*model, 0);
}

TEST_P(CheckpointSuiteTest, Qwen2Moe) {
  SKIP_UNLESS_AVAILABLE(GetParam());
  Rng rng(92);
  CheckpointWriter w;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    w.AddRandom(p + ".mlp.gate.weight", {12, kD}, rng, 0.5f);
    for (int e = 0; e < 12; ++e) {
      AddGatedMlp(w, rng, p + ".mlp.experts." + std::to_string(e), kD, 20);
    }
    AddGatedMlp(w, rng, p + ".mlp.shared_expert", kD, 44);
    w.AddRandom(p + ".mlp.shared_expert_gate.weight", {1, kD}, rng, 0.5f);
  }
  const json config = {{"model_type", "qwen2_moe"}, {"hidden_size", kD},
                       {"intermediate_size", 64}, {"moe_intermediate_size", 20},
                       {"shared_expert_intermediate_size", 44}, {"num_hidden_layers", 2},
                       {"num_experts", 12}, {"num_experts_per_tok", 4}, {"norm_topk_prob", false},
                       {"decoder_sparse_step", 1}, {"rms_norm_eps", 1e-6}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ExpectMatches(*model, 0);
}

TEST_P(CheckpointSuiteTest, DeepseekV3) {
  SKIP_UNLESS_AVAILABLE(GetParam());
  Rng rng(93);
  CheckpointWriter w;
  w.AddRandom("model.layers.0.post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  AddGatedMlp(w, rng, "model.layers.0.mlp", kD, 50);
  const std::string p = "model.layers.1";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  w.AddRandom(p + ".mlp.gate.weight", {16, kD}, rng, 0.5f);
  w.AddRandom(p + ".mlp.gate.e_score_correction_bias", {16}, rng, 0.1f, "F32", 0.05f);
  for (int e = 0; e < 16; ++e) AddGatedMlp(w, rng, p + ".mlp.experts." + std::to_string(e), kD, 12);
  AddGatedMlp(w, rng, p + ".mlp.shared_experts", kD, 24);
  const json config = {{"model_type", "deepseek_v3"}, {"hidden_size", kD},
                       {"intermediate_size", 50}, {"moe_intermediate_size", 12},
                       {"num_hidden_layers", 2}, {"n_routed_experts", 16},
                       {"n_shared_experts", 2}, {"num_experts_per_tok", 4}, {"n_group", 4},
                       {"topk_group", 2}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
                       {"routed_scaling_factor", 2.5}, {"first_k_dense_replace", 1},
                       {"moe_layer_freq", 1}, {"rms_norm_eps", 1e-6}, {"hidden_act", "silu"},
                       {"scoring_func", "sigmoid"}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->layers()[1].kind, LayerKind::kMoe);
  ExpectMatches(*model, 1);
}

INSTANTIATE_TEST_SUITE_P(All, CheckpointSuiteTest, ::testing::ValuesIn(BackendsUnderTest()),
                         BackendName);

// --- Quantised weights: backend x dtype x rotated x activation x gated x tokens, odd shapes
// (d_model 45: k not a multiple of 32, d_ff 83 padded to 128 rows; down's k = 128 and its 45 rows
// a partial panel). ---

// The CPU backend takes the int8-activation kernels from its default token count on
// (kInt8ActRelTol); below it, and on cuda (which dequantises to f32 on upload), float
// activations (kF32RelTol).
double QuantTolerance(const std::string& backend, DType dtype, size_t tokens) {
  const bool int8 = backend == "xnnpack" &&
                    tokens >= DefaultQuantGemmMinTokens(QuantTypeOf(dtype), BestQGemvKernel(),
                                                        BestQGemmKernel());
  return int8 ? testing::kInt8ActRelTol : testing::kF32RelTol;
}

using SweepParam = std::tuple<std::string, DType, bool, Activation, bool, size_t>;
class QuantSweepTest : public ::testing::TestWithParam<SweepParam> {};

TEST_P(QuantSweepTest, MatchesReference) {
  const auto [backend, dtype, rotate, activation, gated, tokens] = GetParam();
  SKIP_UNLESS_AVAILABLE(backend);
  FfnTester()
      .d_model(45)
      .d_ff(83)
      .activation(activation)
      .gated(gated)
      .bias(!gated)
      .norm(NormKind::RMS_NORM, NormPlacement::PRE)
      .residual(true)
      .dtype(dtype)
      .rotate(rotate)
      .tokens(tokens)
      .tolerance(QuantTolerance(backend, dtype, tokens))
      .Test(backend);
}

// e.g. xnnpack_i4_rotated_SILU_gated_130
std::string SweepName(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto& [backend, dtype, rotate, activation, gated, tokens] = info.param;
  return absl::StrFormat("%s_%s%s_%s%s_%d", backend, DTypeName(dtype), rotate ? "_rotated" : "",
                         ActivationName(activation), gated ? "_gated" : "", tokens);
}

INSTANTIATE_TEST_SUITE_P(
    All, QuantSweepTest,
    ::testing::Combine(::testing::ValuesIn(BackendsUnderTest()),
                       ::testing::Values(DType::I8, DType::I4), ::testing::Bool(),
                       ::testing::Values(Activation::RELU, Activation::GELU_ERF,
                                         Activation::SILU),
                       ::testing::Bool(), ::testing::Values(size_t{1}, size_t{3}, size_t{130})),
    SweepName);

}  // namespace
}  // namespace fflite
