// What an engine that embeds fflite relies on: runs in place give the bits of runs into a
// separate buffer (every backend, every layer shape: norms before, after and around the body,
// the residual, MoE); with float activations, quantised weights give each token the same bits
// whatever else is in its call, and stay within the float path's tolerance of the reference;
// Session::Prepare packs what the first calls would and changes no bit.
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cpu/cpu_backend.h"
#include "format/writer.h"
#include "gtest/gtest.h"
#include "session/session.h"
#include "testing/backends.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::FfnParams;
using testing::Rng;

// Five layers over d_model `d`: pre-norm with the residual, post-norm (BERT), sandwich (Gemma),
// none at all, and an MoE layer with a shared expert behind its gate and a pre-norm.
ModelSpec Layers(uint32_t d, uint32_t ff, Rng& rng) {
  ModelSpec spec;
  spec.d_model = d;
  FfnParams p;
  p.d_model = d;
  p.d_ff = ff;
  p.bias = true;
  auto dense = [&](std::optional<NormSpec> norm, bool residual) {
    LayerSpec l;
    l.ffn = testing::RandomFfn(p, rng);
    l.norm = std::move(norm);
    l.residual = residual;
    return l;
  };
  spec.layers.push_back(
      dense(testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng), true));
  spec.layers.push_back(
      dense(testing::RandomNorm(NormKind::LAYER_NORM, NormPlacement::POST, d, rng), true));
  LayerSpec sandwich =
      dense(testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::SANDWICH, d, rng), true);
  sandwich.output_norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::SANDWICH, d, rng);
  spec.layers.push_back(std::move(sandwich));
  spec.layers.push_back(dense(std::nullopt, false));
  testing::MoeParams mp;
  mp.expert = p;
  mp.expert.bias = false;
  mp.num_experts = 6;
  mp.top_k = 2;
  mp.num_shared = 1;
  mp.shared_gate = true;
  LayerSpec moe;
  moe.kind = LayerKind::kMoe;
  moe.moe = testing::RandomMoe(mp, rng);
  moe.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng);
  moe.residual = true;
  spec.layers.push_back(std::move(moe));
  return spec;
}

WriteOptions Matrices(DType dtype) {
  WriteOptions write;
  write.dtype = DType::F32;
  if (dtype != DType::F32) {
    write.matrix_dtype = [dtype](const std::string&, DType) { return dtype; };
  }
  return write;
}

std::unique_ptr<Session> NewSession(const Model& model, const std::string& backend,
                                    size_t max_tokens, int threads, bool float_activations) {
  SessionOptions o;
  o.backend = backend;
  o.max_tokens = max_tokens;
  o.num_threads = threads;
  o.float_activations = float_activations;
  auto s = Session::Create(model, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// output == input: the bits of a run into a separate buffer, for 1 and 40 tokens (the CPU
// backend in passes of 16 tokens: three passes, the last partial), 1 and 3 threads, f32, i8 and
// q4_k weights; the reference (one token per pass) on 1 and 5 tokens.
TEST(EmbeddingTest, InPlaceRunsGiveTheBitsOfSeparateBuffers) {
  CpuBackendOptions chunks;
  chunks.token_chunk = 16;
  for (const std::string& backend : testing::EveryBackend()) {
    std::string why;
    if (!FindBackend(backend)->available(&why)) continue;
    const bool reference = backend == "reference";
    for (DType dtype : {DType::F32, DType::I8, DType::Q4_K}) {
      Rng rng(11);
      const uint32_t d = dtype == DType::Q4_K ? 256 : 48;
      auto built = testing::BuildModel(Layers(d, 72, rng), Matrices(dtype));
      ASSERT_TRUE(built.ok()) << built.status();
      const Model& model = *built->model;
      for (int threads : {1, 3}) {
        if (reference && threads > 1) continue;
        SessionOptions o;
        o.backend = backend;
        o.max_tokens = 40;
        o.num_threads = threads;
        o.cpu_options = &chunks;
        auto session = Session::Create(model, o);
        ASSERT_TRUE(session.ok()) << session.status();
        for (size_t tokens : {size_t{1}, reference ? size_t{5} : size_t{40}}) {
          const std::vector<float> x = Rng(tokens).Vec(tokens * d, 2.0f);
          for (size_t layer = 0; layer < model.layers().size(); ++layer) {
            SCOPED_TRACE(absl::StrFormat("%s, %s, %d threads, %d tokens, layer %d", backend,
                                         DTypeName(dtype), threads, tokens, layer));
            std::vector<float> apart(tokens * d), in_place = x;
            ASSERT_OK((*session)->Run(layer, x.data(), tokens, apart.data()));
            ASSERT_OK((*session)->Run(layer, in_place.data(), tokens, in_place.data()));
            EXPECT_EQ(0, std::memcmp(apart.data(), in_place.data(), apart.size() * 4));
          }
        }
      }
    }
  }
}

// With float activations, a token's output has the same bits alone, in a window of 5, and in a
// call of 40 tokens (where the default takes the int8 kernels: from 2 or 8 tokens by CPU), on 1
// and 3 threads, for a dense and an MoE layer; and the 40-token call is within the float path's
// tolerance of the reference.
TEST(EmbeddingTest, FloatActivationsAreBatchInvariantOnQuantisedWeights) {
  const size_t n = 40;
  for (const std::string& backend : testing::BackendsUnderTest()) {
    std::string why;
    if (!FindBackend(backend)->available(&why)) continue;
    for (DType dtype : {DType::I8, DType::I4, DType::Q4_K, DType::Q6_K_PACKED}) {
      Rng rng(5);
      const uint32_t d = 256;
      ModelSpec spec = Layers(d, 96, rng);
      spec.layers.erase(spec.layers.begin() + 1, spec.layers.begin() + 4);  // pre-norm + MoE
      auto built = testing::BuildModel(spec, Matrices(dtype));
      ASSERT_TRUE(built.ok()) << built.status();
      const Model& model = *built->model;
      auto reference = NewSession(model, "reference", n, 1, false);
      ASSERT_NE(reference, nullptr);
      const std::vector<float> x = Rng(3).Vec(n * d, 2.0f);
      for (int threads : {1, 3}) {
        auto session = NewSession(model, backend, n, threads, true);
        ASSERT_NE(session, nullptr);
        for (size_t layer = 0; layer < model.layers().size(); ++layer) {
          SCOPED_TRACE(absl::StrFormat("%s, %s, %d threads, layer %d", backend, DTypeName(dtype),
                                       threads, layer));
          std::vector<float> all(n * d), want(n * d), one(d), five(5 * d);
          ASSERT_OK(session->Run(layer, x.data(), n, all.data()));
          if (threads == 1) {
            ASSERT_OK(reference->Run(layer, x.data(), n, want.data()));
            testing::ExpectOutputsNear(want, all, n, d, testing::kF32RelTol, "float activations");
          }
          for (size_t t : {size_t{0}, size_t{39}}) {
            ASSERT_OK(session->Run(layer, x.data() + t * d, 1, one.data()));
            EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * d, d * 4)) << "token " << t;
          }
          ASSERT_OK(session->Run(layer, x.data() + 17 * d, 5, five.data()));
          EXPECT_EQ(0, std::memcmp(five.data(), all.data() + 17 * d, 5 * d * 4));
        }
      }
    }
  }
}

// Prepare: packs the dense layers now (the memory it reports grows, and no later run packs
// more), twice is once, and the results keep their bits.
TEST(EmbeddingTest, PrepareMakesWhatTheFirstRunsWouldAndKeepsTheBits) {
  Rng rng(7);
  const uint32_t d = 48;
  auto built = testing::BuildModel(Layers(d, 72, rng), Matrices(DType::F32));
  ASSERT_TRUE(built.ok()) << built.status();
  const Model& model = *built->model;
  const size_t n = 9;
  const std::vector<float> x = Rng(1).Vec(n * d, 2.0f);
  // Lazy on another model (the same file): prepared forms are shared by a model's sessions.
  Rng rng2(7);
  auto other = testing::BuildModel(Layers(d, 72, rng2), Matrices(DType::F32));
  ASSERT_TRUE(other.ok()) << other.status();
  auto lazy = NewSession(*other->model, "xnnpack", n, 1, false);
  auto eager = NewSession(model, "xnnpack", n, 1, false);
  ASSERT_TRUE(lazy && eager);
  auto held = [&]() { return eager->Memory().prepared_bytes + model.shared_forms().bytes(); };
  EXPECT_GT(eager->Memory().scratch_bytes, n * d * 4);
  const uint64_t before = held();
  ASSERT_OK(eager->Prepare());
  const uint64_t prepared = held();
  ASSERT_OK(eager->Prepare());
  EXPECT_EQ(held(), prepared);
  // Four dense layers of three f32 matrices [72 (padded: at least), 48] each.
  EXPECT_GE(prepared, before + 4 * 3 * 72 * 48 * 4);
  for (size_t layer = 0; layer < model.layers().size(); ++layer) {
    std::vector<float> a(n * d), b(n * d);
    ASSERT_OK(lazy->Run(layer, x.data(), n, a.data()));
    ASSERT_OK(eager->Run(layer, x.data(), n, b.data()));
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "layer " << layer;
  }
  EXPECT_EQ(held(), prepared);
}

// Four sessions of one model (1 and 3 threads, forced kernels or not): where the gemm engine
// packs the dense layers, the model holds one copy, whichever session made it, and every session
// gives the bits of a session alone on a copy of the model.
TEST(EmbeddingTest, SessionsOfAModelShareItsPackedLayers) {
  Rng rng(13);
  const uint32_t d = 48;
  const ModelSpec spec = Layers(d, 72, rng);
  auto built = testing::BuildModel(spec, Matrices(DType::F32));
  auto alone = testing::BuildModel(spec, Matrices(DType::F32));
  ASSERT_TRUE(built.ok() && alone.ok());
  const Model& model = *built->model;
  const size_t n = 20;
  const std::vector<float> x = Rng(2).Vec(n * d, 2.0f);
  std::vector<std::unique_ptr<Session>> sessions;
  for (int threads : {1, 3, 1, 3}) {
    sessions.push_back(NewSession(model, "xnnpack", n, threads, false));
    ASSERT_NE(sessions.back(), nullptr);
  }
  auto single = NewSession(*alone->model, "xnnpack", n, 1, false);
  ASSERT_NE(single, nullptr);
  for (size_t layer = 0; layer < model.layers().size(); ++layer) {
    std::vector<float> want(n * d), got(n * d);
    ASSERT_OK(single->Run(layer, x.data(), n, want.data()));
    for (size_t s = 0; s < sessions.size(); ++s) {
      ASSERT_OK(sessions[s]->Run(layer, x.data(), n, got.data()));
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * 4))
          << "layer " << layer << ", session " << s;
    }
  }
  const uint64_t one_copy = alone->model->shared_forms().bytes() + single->Memory().prepared_bytes;
  uint64_t all = model.shared_forms().bytes();
  for (const auto& s : sessions) all += s->Memory().prepared_bytes;
  // Shared where the gemm engine packs (then the model holds it all once, the sessions only
  // their routers and shared experts), else four copies.
  if (model.shared_forms().bytes() > 0) {
    EXPECT_EQ(model.shared_forms().bytes(), alone->model->shared_forms().bytes());
    EXPECT_LT(all, 2 * one_copy);
  } else {
    EXPECT_EQ(all, 4 * one_copy);
  }
}

// A caller's thread pool: `threads` - 1 workers and the calling thread take indices from a
// shared counter; parallel_for returns when every index ran (a mutex and a condition variable:
// the synchronisation the API asks of it).
class TestPool {
 public:
  explicit TestPool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { Work(); });
  }
  ~TestPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  static void ParallelFor(void* pool, void (*task)(void*, size_t), void* context, size_t n) {
    static_cast<TestPool*>(pool)->Run(task, context, n);
  }
  size_t calls() const { return calls_; }

 private:
  void Run(void (*task)(void*, size_t), void* context, size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls_;
    task_ = task;
    context_ = context;
    n_ = n;
    next_ = 0;
    done_ = 0;
    ++generation_;
    wake_.notify_all();
    Drain(lock);
    finished_.wait(lock, [&] { return done_ == n_; });
  }
  // Takes indices until none is left (mu_ held on entry and exit, released around each task).
  void Drain(std::unique_lock<std::mutex>& lock) {
    while (next_ < n_) {
      const size_t i = next_++;
      lock.unlock();
      task_(context_, i);
      lock.lock();
      if (++done_ == n_) finished_.notify_all();
    }
  }
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t seen = 0;
    while (true) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      Drain(lock);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, finished_;
  bool stop_ = false;
  uint64_t generation_ = 0;
  void (*task_)(void*, size_t) = nullptr;
  void* context_ = nullptr;
  size_t n_ = 0, next_ = 0, done_ = 0, calls_ = 0;
};

// Threads of this process now (Linux: /proc/self/task).
size_t ThreadCount() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.exists();
  return n;
}

// On the caller's pool: the bits of fflite's own pool of as many threads, for dense f32, i8
// and MoE layers (the MoE under an expert budget, streamed from the file: its reads then happen
// when the experts run), the pool used, and no thread started by fflite (counted); fflite's own
// pool with the sleep wait policy gives the same bits too.
TEST(EmbeddingTest, CallersPoolGivesTheBitsOfOwnPoolAndNoThreadOfItsOwn) {
  for (DType dtype : {DType::F32, DType::I8}) {
    Rng rng(17);
    const uint32_t d = 96;
    auto built = testing::BuildModelFile(Layers(d, 700, rng), "caller_pool.fflite",
                                         Matrices(dtype));
    ASSERT_TRUE(built.ok()) << built.status();
    const Model& model = *built->model;
    const size_t n = 40;
    const std::vector<float> x = Rng(4).Vec(n * d, 2.0f);
    TestPool pool(3);
    const size_t before = ThreadCount();
    SessionOptions o;
    o.backend = "xnnpack";
    o.max_tokens = n;
    o.num_threads = 3;
    o.expert_budget_bytes = 2 * CpuPackedFfnBytes(model.layers().back().moe.experts[0]);
    SessionOptions own = o, sleepy = o;
    sleepy.sleep_between_loops = true;
    o.parallel_for = &TestPool::ParallelFor;
    o.parallel_for_context = &pool;
    auto caller = Session::Create(model, o);
    ASSERT_TRUE(caller.ok()) << caller.status();
    for (size_t layer = 0; layer < model.layers().size(); ++layer) {
      for (size_t tokens : {size_t{1}, n}) {
        std::vector<float> y(tokens * d);
        ASSERT_OK((*caller)->Run(layer, x.data(), tokens, y.data()));
      }
    }
    EXPECT_EQ(ThreadCount(), before) << "the session started threads of its own";
    EXPECT_GT(pool.calls(), 0u);
    auto mine = Session::Create(model, own);
    auto slept = Session::Create(model, sleepy);
    ASSERT_TRUE(mine.ok() && slept.ok());
    for (size_t layer = 0; layer < model.layers().size(); ++layer) {
      for (size_t tokens : {size_t{1}, n}) {
        SCOPED_TRACE(absl::StrFormat("%s, layer %d, %d tokens", DTypeName(dtype), layer, tokens));
        std::vector<float> a(tokens * d), b(tokens * d), c(tokens * d);
        ASSERT_OK((*caller)->Run(layer, x.data(), tokens, a.data()));
        ASSERT_OK((*mine)->Run(layer, x.data(), tokens, b.data()));
        ASSERT_OK((*slept)->Run(layer, x.data(), tokens, c.data()));
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
        EXPECT_EQ(0, std::memcmp(c.data(), b.data(), a.size() * 4));
      }
    }
  }
}

}  // namespace
}  // namespace fflite
