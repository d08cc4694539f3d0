// Sessions: option and argument checks, and one model shared by several sessions on several
// threads giving the same results as one session.
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "session/session.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"

namespace fflite {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

ModelSpec TwoLayerSpec() {
  testing::Rng rng(3);
  ModelSpec spec;
  spec.d_model = 12;
  testing::FfnParams fp;
  fp.d_model = 12;
  fp.d_ff = 20;
  LayerSpec dense;
  dense.ffn = testing::RandomFfn(fp, rng);
  spec.layers.push_back(std::move(dense));
  testing::MoeParams mp;
  mp.expert = fp;
  mp.num_experts = 5;
  mp.top_k = 2;
  LayerSpec moe;
  moe.kind = LayerKind::kMoe;
  moe.moe = testing::RandomMoe(mp, rng);
  spec.layers.push_back(std::move(moe));
  return spec;
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto built = testing::BuildModel(TwoLayerSpec());
    ASSERT_TRUE(built.ok()) << built.status();
    model_ = std::move(*built);
    SessionOptions options;
    options.max_tokens = 4;
    auto session = Session::Create(*model_.model, options);
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = std::move(*session);
  }
  testing::LoadedModel model_;
  std::unique_ptr<Session> session_;
};

TEST_F(SessionTest, BadOptions) {
  SessionOptions o;
  o.num_threads = 0;
  EXPECT_THAT(Session::Create(*model_.model, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_threads: 0")));
  o = SessionOptions();
  o.max_tokens = 0;
  EXPECT_THAT(Session::Create(*model_.model, o).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_tokens: 0")));
  o = SessionOptions();
  o.backend = "tpu";
  EXPECT_THAT(Session::Create(*model_.model, o).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("backend 'tpu' is not built into this fflite")));
}

TEST_F(SessionTest, BadRunArguments) {
  std::vector<float> in(12 * 5, 0.5f), out(12 * 5);
  EXPECT_THAT(session_->Run(2, in.data(), 1, out.data()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("layer 2 is out of range: the "
                                                                "model has 2 layers")));
  EXPECT_THAT(session_->Run(0, in.data(), 0, out.data()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("n_tokens 0 must be in [1, "
                                                                "max_tokens = 4]")));
  EXPECT_THAT(session_->Run(0, in.data(), 5, out.data()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("n_tokens 5")));
  EXPECT_THAT(session_->Run(0, in.data(), ~size_t{0} >> 2, out.data()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("n_tokens")));
  EXPECT_THAT(session_->Run(0, nullptr, 1, out.data()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input is null")));
  EXPECT_THAT(session_->Run(0, in.data(), 1, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output is null")));
  EXPECT_THAT(session_->Run(0, in.data(), 2, in.data() + 12),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  EXPECT_OK(session_->Run(0, in.data(), 2, in.data() + 24));  // adjacent is fine
}

// One model, one session per thread, each running every layer many times: every result equals
// the single-session result bit for bit.
TEST_F(SessionTest, ModelSharedAcrossThreads) {
  const size_t tokens = 4, d = 12;
  const std::vector<float> input = testing::Rng(9).Vec(tokens * d, 2.0f);
  std::vector<std::vector<float>> want(2, std::vector<float>(tokens * d));
  for (size_t layer = 0; layer < 2; ++layer) {
    ASSERT_OK(session_->Run(layer, input.data(), tokens, want[layer].data()));
  }
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0), errors(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      SessionOptions options;
      options.max_tokens = tokens;
      auto session = Session::Create(*model_.model, options);
      if (!session.ok()) {
        ++errors[t];
        return;
      }
      std::vector<float> out(tokens * d);
      for (int iter = 0; iter < 50; ++iter) {
        const size_t layer = static_cast<size_t>(iter + t) % 2;
        if (!(*session)->Run(layer, input.data(), tokens, out.data()).ok()) ++errors[t];
        if (out != want[layer]) ++mismatches[t];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], 0) << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

}  // namespace
}  // namespace fflite
