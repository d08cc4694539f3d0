// MoE on the CPU backend against the reference: the expert budget (down to a single expert and
// below; identical bits whatever the budget), 1 and 3 threads, the direct and packed paths and the
// bytes each reads, experts alone, rows shared among threads, every bf16 gemm kernel on packed
// experts, the mapped pages a budget bounds. The routing variants, shapes and corner cases run on
// every backend (backend_conformance_test.cc), and so do routing statistics through the C API,
// sessions sharing a model, converted checkpoints and quantised conformance
// (backend_suites_test.cc).
//
// Near-ties. xnnpack computes the router product in f32 and routes on those logits (in double);
// the reference computes the logits in double. Two experts whose scores differ by less than the
// f32 rounding of the product (~1e-6 relative) may therefore be picked differently. The models
// here are seeded random ones whose top-k gaps are far larger than that (the router weights are
// scaled so that logits are O(1)); a test that needs exact ties builds them exactly (identical
// router rows or an all-zero router give bit-identical logits in both backends). If a new seed
// ever produces a near-tie, build the router so that the top-k gap is clear rather than widening
// the tolerance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_format.h"
#include "backends/cpu/cpu_backend.h"
#include "testing/backends.h"
#include "kernels/gemm.h"
#include "gtest/gtest.h"
#include "session/session.h"
#include "testing/model_builder.h"
#include "testing/moe_variants.h"
#include "testing/testers.h"
#include "testing/tolerances.h"

namespace fflite {
namespace {

using testing::FfnParams;
using testing::MoeParams;
using testing::MoeTester;
using testing::OneExpert;
using testing::Rng;

bool UnderQemu() { return std::getenv("FFLITE_UNDER_QEMU") != nullptr; }

using testing::ParamsFor;
using testing::Variant;

// The sweep over routing variants, shapes and routing corner cases runs on every backend:
// backend_conformance_test.cc.

// --- Expert budget: identical results whatever the budget, and the budget is kept. ---

// A model in a buffer reads its experts in place; a file-backed one streams them into the pool's
// slots (moe/expert_pool.h): both against the unbudgeted session, bit for bit.
TEST(CpuMoeBudgetTest, SameBitsWhateverTheBudgetAndBudgetKept) {
  const uint32_t d = 24, ff = 40;
  Rng rng(31);
  const ModelSpec spec = testing::BudgetModel(rng, d, ff);
  const uint64_t one = OneExpert(d, ff, true);
  const size_t sizes[] = {1, 1, 3, 1, 17, 1, 2, 1, 64, 1, 1, 5};
  for (const bool file : {false, true}) {
    SCOPED_TRACE(file ? "file-backed" : "in a buffer");
    auto built =
        file ? testing::BuildModelFile(spec, "budget_bits.fflite") : testing::BuildModel(spec);
    ASSERT_TRUE(built.ok()) << built.status();
    for (int threads : {1, 3}) {
      BackendConfig config;
      config.num_threads = threads;
      config.max_tokens = 64;
      auto unlimited = CreateCpuBackend(*built->model, config);
      ASSERT_TRUE(unlimited.ok()) << unlimited.status();
      // Routed experts are prepared on first use, budget or not: none is packed at creation.
      EXPECT_EQ((*unlimited)->Stats().resident_expert_bytes, 0u);
      for (uint64_t budget : {uint64_t{1}, one, 3 * one, 5 * one}) {
        config.expert_budget_bytes = budget;
        auto limited = CreateCpuBackend(*built->model, config);
        ASSERT_TRUE(limited.ok()) << limited.status();
        EXPECT_EQ((*limited)->Stats().resident_expert_bytes, 0u) << "packed on first use";
        // A file's experts stream into slots (at least one, else as many as the budget holds).
        const BackendStats created = (*limited)->Stats();
        if (file) {
          ASSERT_GT(created.expert_slots, 0u);
          uint64_t experts = 0;
          for (const LayerView& l : built->model->layers()) experts += l.moe.num_experts;
          const uint64_t fit = std::max<uint64_t>(1, budget / created.expert_slot_bytes);
          EXPECT_EQ(created.expert_slots, std::min(experts, fit));
        } else {
          EXPECT_EQ(created.expert_slots, 0u);
        }
        // A budget below one expert's largest form keeps just the form last used.
        const uint64_t largest = std::max(one, created.expert_slot_bytes);
        Rng inputs(41);
        for (size_t call = 0; call < sizeof(sizes) / sizeof(sizes[0]); ++call) {
          const size_t n = sizes[call];
          const std::vector<float> x = inputs.Vec(n * d, 2.0f);
          for (size_t layer = 0; layer < 3; ++layer) {
            std::vector<float> want(n * d), got(n * d);
            ASSERT_TRUE((*unlimited)->Run(layer, x.data(), n, want.data()).ok());
            ASSERT_TRUE((*limited)->Run(layer, x.data(), n, got.data()).ok());
            ASSERT_EQ(want, got) << "budget " << budget << ", call " << call << ", layer " << layer
                                 << ", threads " << threads;
            const uint64_t resident = (*limited)->Stats().resident_expert_bytes;
            EXPECT_LE(resident, std::max(budget, largest)) << "budget " << budget;
          }
        }
        const BackendStats stats = (*limited)->Stats();
        EXPECT_GT(stats.expert_misses, 0u);
        if (file) {
          EXPECT_GT(stats.expert_reads, 0u);
          EXPECT_GE(stats.expert_read_buffered_bytes + stats.expert_read_direct_bytes,
                    stats.expert_reads * (one / 4)) << "each read holds an expert's matrices";
        } else {
          EXPECT_EQ(stats.expert_reads, 0u);
        }
        // The routing statistics do not depend on the budget either.
        for (size_t layer : {size_t{0}, size_t{2}}) {
          const auto a = (*unlimited)->expert_counts()->layer(layer);
          const auto b = (*limited)->expert_counts()->layer(layer);
          EXPECT_EQ(std::vector<uint64_t>(a.begin(), a.end()),
                    std::vector<uint64_t>(b.begin(), b.end()));
        }
        (*unlimited)->expert_counts()->Reset();
      }
    }
  }
}

// Small slices and chunks: experts split into several operators, an expert's batch into several
// passes, a call into several routing chunks (token_chunk 5: routing chunks of 20).
TEST(CpuMoeBudgetTest, SlicedAndChunkedExperts) {
  const uint32_t d = 37, ff = 150;
  Rng rng(51);
  auto built = testing::BuildModel(testing::BudgetModel(rng, d, ff));
  ASSERT_TRUE(built.ok()) << built.status();
  const size_t tokens = 47;
  const std::vector<float> x = rng.Vec(tokens * d, 2.0f);
  CpuBackendOptions options;
  options.slice_bytes = 1;
  options.token_chunk = 5;
  for (uint64_t budget : {uint64_t{0}, OneExpert(d, ff, true)}) {
    BackendConfig config;
    config.max_tokens = tokens;
    config.expert_budget_bytes = budget;
    auto backend = CreateCpuBackendWithOptions(*built->model, config, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    for (size_t layer = 0; layer < 3; ++layer) {
      auto want = testing::RunLayer(*built->model, "reference", layer, x, tokens);
      ASSERT_TRUE(want.ok());
      std::vector<float> got(tokens * d);
      ASSERT_TRUE((*backend)->Run(layer, x.data(), tokens, got.data()).ok());
      testing::ExpectOutputsNear(*want, got, tokens, d, testing::kF32RelTol,
                                 absl::StrFormat("layer %d, budget %d", layer, budget));
    }
  }
}

// Results do not depend on the thread count (XNNPACK never splits the reduction).
TEST(CpuMoeThreadsTest, SameBitsForOneAndThreeThreads) {
  Rng rng(61);
  auto built = testing::BuildModel(testing::BudgetModel(rng, 48, 100));
  ASSERT_TRUE(built.ok()) << built.status();
  for (size_t tokens : {1, 7, 130}) {
    const std::vector<float> x = Rng(62).Vec(tokens * 48, 2.0f);
    for (size_t layer : {size_t{0}, size_t{2}}) {
      auto one = testing::RunLayer(*built->model, "xnnpack", layer, x, tokens, 1);
      auto three = testing::RunLayer(*built->model, "xnnpack", layer, x, tokens, 3);
      ASSERT_TRUE(one.ok() && three.ok());
      EXPECT_EQ(*one, *three) << "tokens " << tokens << ", layer " << layer;
    }
  }
}

// --- A larger layer (several 2 MiB slices per expert matrix, 130 tokens): natively only. ---
TEST(CpuMoeLargerTest, MixtralLikePrefillAndDecode) {
  if (UnderQemu()) GTEST_SKIP() << "too slow under qemu (the reference takes minutes there)";
  MoeParams p;
  for (size_t tokens : {size_t{1}, size_t{130}}) {
    MoeTester()
        .d_model(512)
        .d_ff(1408)
        .tokens(tokens)
        .threads(tokens == 1 ? 1 : 2)
        .moe(p)
        .expert_budget(tokens == 1 ? 0 : 3 * OneExpert(512, 1408, true))
        .norm(NormKind::RMS_NORM, NormPlacement::PRE)
        .residual(true)
        .Test("xnnpack");
  }
}

// --- The direct kernel (experts with few tokens) and the packed operators, each on its own. ---

// A model of one MoE layer with experts of p.expert's shape; with a pre-RMSNorm and residual when
// `norm`.
ModelSpec OneMoeLayer(const MoeParams& p, bool norm, Rng& rng) {
  ModelSpec spec;
  spec.d_model = p.expert.d_model;
  LayerSpec layer;
  layer.kind = LayerKind::kMoe;
  layer.moe = testing::RandomMoe(p, rng);
  if (norm) {
    layer.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, spec.d_model, rng);
    layer.residual = true;
  }
  spec.layers.push_back(std::move(layer));
  return spec;
}

// direct_max_tokens 0 (always packed), 3 (mixed within a call) and 128 (always direct) for f32, f16
// and bf16 weights (the direct kernel converts in registers; biases are converted at creation),
// with biases and plain GELU experts, with a gated shared expert, 1 and 3 threads, with and without
// a budget: every setting against the reference.
TEST(CpuMoeDirectTest, DirectAndPackedPathsMatchReference) {
  const uint32_t d = 29, ff = 67;
  for (Variant variant : {Variant::kMixtral, Variant::kQwen2Moe, Variant::kRouterBias}) {
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      Rng rng(71 + static_cast<uint32_t>(variant) * 3 + static_cast<uint32_t>(dtype));
      const bool plain = variant == Variant::kRouterBias;
      MoeParams p = ParamsFor(variant);
      p.expert.d_model = d;
      p.expert.d_ff = ff;
      p.expert.gated = !plain;
      p.expert.bias = plain;
      p.expert.activation = plain ? Activation::GELU_ERF : Activation::SILU;
      WriteOptions write;
      write.dtype = dtype;
      auto built = testing::BuildModel(OneMoeLayer(p, /*norm=*/true, rng), write);
      ASSERT_TRUE(built.ok()) << built.status();
      for (size_t tokens : {size_t{1}, size_t{2}, size_t{5}, size_t{40}}) {
        const std::vector<float> x = rng.Vec(tokens * d, 2.0f);
        auto want = testing::RunLayer(*built->model, "reference", 0, x, tokens);
        ASSERT_TRUE(want.ok()) << want.status();
        for (size_t direct : {size_t{0}, size_t{3}, size_t{128}}) {
          CpuBackendOptions options;
          options.direct_max_tokens = direct;
          BackendConfig config;
          config.max_tokens = 64;
          config.num_threads = tokens % 2 == 0 ? 3 : 1;
          config.expert_budget_bytes = tokens == 5 ? 1 : 0;
          auto backend = CreateCpuBackendWithOptions(*built->model, config, options);
          ASSERT_TRUE(backend.ok()) << backend.status();
          std::vector<float> got(tokens * d);
          ASSERT_TRUE((*backend)->Run(0, x.data(), tokens, got.data()).ok());
          testing::ExpectOutputsNear(
              *want, got, tokens, d, testing::FloatRelTol(dtype),
              absl::StrFormat("%s, %s, %d tokens, direct_max_tokens %d", VariantName(variant),
                              DTypeName(dtype), tokens, direct));
        }
      }
    }
  }
}

// Experts alone (CpuBackendOptions::experts_alone): with many packed or quantised experts per
// thread in a call, each runs whole on one thread. 16 experts, top-4 (with a gated shared expert),
// f32, bf16, i8 and i4 weights, 2 and 3 threads: the same bits as every expert's products shared
// among the threads and as one thread, with neuron edits on two experts and under a budget that
// holds them all, and within the dtype's tolerance of the reference. token_chunk 20: experts
// given more than 20 tokens in a call take the shared path in the same call. The counts show
// which path ran, so the test cannot pass without it.
TEST(CpuMoeThreadsTest, ExpertsAloneGiveTheSameBits) {
  const uint32_t d = 40, ff = 72;
  for (DType dtype : {DType::F32, DType::BF16, DType::I8, DType::I4}) {
    Rng rng(97 + static_cast<uint32_t>(dtype));
    MoeParams p = ParamsFor(Variant::kQwen2Moe);
    p.num_experts = 16;
    p.top_k = 4;
    p.expert.d_model = d;
    p.expert.d_ff = ff;
    const bool quantised = dtype == DType::I8 || dtype == DType::I4;
    WriteOptions write;
    write.dtype = quantised ? DType::F32 : dtype;
    if (quantised) {
      // The experts' matrices (and the shared expert's) quantised, I4 block-rotated.
      write.matrix_dtype = [dtype](const std::string&, DType) { return dtype; };
      write.quantize.rotate = dtype == DType::I4;
    }
    // Quantised: int8 activations from a few tokens on; bf16 weights on a CPU whose gemm engine
    // multiplies them in bf16 (AVX-512 BF16 on AMD, Arm's BF16): activations rounded to bf16
    // (tolerances.h).
    CpuBackendOptions gemm_engine;
    gemm_engine.packed_engine = CpuBackendOptions::PackedEngine::kGemm;
    const double tol = quantised ? testing::kInt8ActRelTol
                       : dtype == DType::BF16 && CpuBf16Arithmetic(gemm_engine)
                           ? testing::kBf16ActRelTol
                           : testing::FloatRelTol(dtype);
    auto built = testing::BuildModel(OneMoeLayer(p, /*norm=*/true, rng), write);
    ASSERT_TRUE(built.ok()) << built.status();
    const Model& model = *built->model;
    const size_t ff_padded = model.layers()[0].moe.experts[0].d_ff_padded;
    for (size_t tokens : {size_t{24}, size_t{64}}) {
      const std::vector<float> x = rng.Vec(tokens * d, 2.0f);
      // Neuron edits on experts 3 and 10 (a neuron off, the others scaled), in every backend.
      const auto edit = [&](Backend& b) {
        b.neuron_scales().Init(model);
        for (int e : {3, 10}) {
          std::vector<float> s(ff_padded, 1.0f);
          for (size_t i = 0; i < ff; ++i) s[i] = i == 5 ? 0.0f : 0.5f + 0.01f * i;
          b.neuron_scales().Set(0, e, s);
        }
      };
      BackendConfig config;
      config.max_tokens = 64;
      auto reference = FindBackend("reference")->create(model, config);
      ASSERT_TRUE(reference.ok()) << reference.status();
      edit(**reference);
      std::vector<float> want(tokens * d);
      ASSERT_TRUE((*reference)->Run(0, x.data(), tokens, want.data()).ok());
      struct Setting {
        int threads;
        bool alone;
        size_t chunk;
        uint64_t budget;
      };
      const uint64_t all = p.num_experts * OneExpert(d, ff, true);
      // The first output of each chunk size (one thread): quantised batches of more tokens may
      // take the int8 kernels, so chunks of 20 and of 128 give different bits there.
      std::map<size_t, std::vector<float>> first;
      for (const Setting& c : {Setting{1, true, 128, 0}, Setting{2, false, 128, 0},
                               Setting{2, true, 128, 0}, Setting{3, true, 128, 0},
                               Setting{1, true, 20, 0}, Setting{2, true, 20, 0},
                               Setting{2, true, 128, 2 * all}}) {
        SCOPED_TRACE(absl::StrFormat("%s, %d tokens, %d threads, alone %d, chunk %d, budget %d",
                                     DTypeName(dtype), tokens, c.threads, c.alone, c.chunk,
                                     c.budget));
        CpuBackendOptions options;
        options.packed_engine = CpuBackendOptions::PackedEngine::kGemm;
        options.experts_alone = c.alone;
        options.token_chunk = c.chunk;
        BackendConfig xc = config;
        xc.num_threads = c.threads;
        xc.expert_budget_bytes = c.budget;
        auto backend = CreateCpuBackendWithOptions(model, xc, options);
        ASSERT_TRUE(backend.ok()) << backend.status();
        edit(**backend);
        std::vector<float> got(tokens * d);
        ASSERT_TRUE((*backend)->Run(0, x.data(), tokens, got.data()).ok());
        testing::ExpectOutputsNear(want, got, tokens, d, tol, "against the reference");
        if (first.count(c.chunk) == 0) {
          first[c.chunk] = got;
        } else {
          EXPECT_EQ(first[c.chunk], got) << "not the same bits as one thread";
        }
        const BackendStats count = (*backend)->Stats();
        EXPECT_GT(count.routed_batches, 0u);
        // 2 threads need 8 experts of 5-20 tokens (or 5-128; quantised: 1-20 or 1-128): 24
        // tokens give 96 routed pairs over 16 experts, 64 give 256; 3 threads need 12, which 24
        // tokens need not give.
        const bool enough = c.threads == 2 || tokens == 64;
        if (c.threads > 1 && c.alone && enough) {
          EXPECT_GT(count.routed_batches_together, 0u);
          if (c.chunk == 20 && tokens == 64) {
            EXPECT_LT(count.routed_batches_together, count.routed_batches);
          }
        } else if (c.threads == 1 || !c.alone) {
          EXPECT_EQ(count.routed_batches_together, 0u);
        }
      }
    }
  }
}

// The bytes routed experts read (fflite-bench bounds routed prefill with them): each batch counts
// the form it ran on, summed here from the tensors' shapes. One token: its top_k experts on the
// direct path, the file bytes of each; 20 tokens with every expert packed (direct_max_tokens 0;
// one batch each): the packed bytes of each expert that got a token, in each engine's layout
// (XNNPACK: rows padded to 16, a bias row; the gemm engine's scalar kernel: rows padded to its
// panels, f32 or 16-bit slots, f32 biases). bf16 weights, whose forms differ in size.
TEST(CpuMoeDirectTest, RoutedBytesCountTheFormEachBatchRanOn) {
  const uint32_t d = 29, ff = 67;
  Rng rng(5);
  MoeParams p = ParamsFor(Variant::kMixtral);
  p.expert.d_model = d;
  p.expert.d_ff = ff;
  WriteOptions write;
  write.dtype = DType::BF16;
  auto built = testing::BuildModel(OneMoeLayer(p, /*norm=*/true, rng), write);
  ASSERT_TRUE(built.ok()) << built.status();
  const FfnView& expert = built->model->layers()[0].moe.experts[0];
  uint64_t file = 0;
  for (const TensorView* t : {&expert.up, &expert.gate, &expert.down, &expert.up_bias,
                              &expert.gate_bias, &expert.down_bias}) {
    if (t->present()) file += t->size;
  }
  ASSERT_GT(file, 0u);
  const GemmKernel* scalar = AvailableGemmKernels(FloatType::kF32).front();
  ASSERT_STREQ(scalar->isa, "scalar");
  const auto round_up = [](uint64_t v, uint64_t m) { return (v + m - 1) / m * m; };
  // Bytes of the expert's three matrices packed as `per_matrix(out, in)` gives.
  const auto packed = [&](auto per_matrix) {
    uint64_t bytes = 0;
    for (const TensorView* t : {&expert.up, &expert.gate, &expert.down}) {
      bytes += per_matrix(static_cast<uint64_t>(t->shape[0]), static_cast<uint64_t>(t->shape[1]));
    }
    return bytes;
  };
  struct Form {
    const char* name;
    CpuBackendOptions::PackedEngine engine;
    bool half_panels;
    uint64_t bytes;
  };
  const Form forms[] = {
      {"xnnpack", CpuBackendOptions::PackedEngine::kXnnpack, false,
       packed([&](uint64_t out, uint64_t in) { return round_up(out, 16) * (in + 1) * 4; })},
      {"gemm f32 panels", CpuBackendOptions::PackedEngine::kGemm, false,
       packed([&](uint64_t out, uint64_t in) {
         return round_up(out, scalar->nr) * in * 4 + out * 4;
       })},
      {"gemm 16-bit panels", CpuBackendOptions::PackedEngine::kGemm, true,
       packed([&](uint64_t out, uint64_t in) {
         return round_up(out, scalar->nr) * in * 2 + out * 4;
       })},
  };
  for (size_t tokens : {size_t{1}, size_t{20}}) {
    for (const Form& form : forms) {
      SCOPED_TRACE(::testing::Message() << tokens << " tokens, " << form.name);
      CpuBackendOptions options;
      options.packed_engine = form.engine;
      options.gemm_f32 = scalar;
      options.bf16_arithmetic = false;
      options.half_panels = form.half_panels;
      if (tokens > 1) options.direct_max_tokens = 0;
      BackendConfig config;
      config.max_tokens = 64;
      auto backend = CreateCpuBackendWithOptions(*built->model, config, options);
      ASSERT_TRUE(backend.ok()) << backend.status();
      EXPECT_EQ((*backend)->Stats().routed_expert_bytes, 0u);
      const std::vector<float> x = rng.Vec(tokens * d, 2.0f);
      std::vector<float> y(tokens * d);
      ASSERT_TRUE((*backend)->Run(0, x.data(), tokens, y.data()).ok());
      const auto counts = (*backend)->expert_counts()->layer(0);
      const uint64_t active = static_cast<uint64_t>(
          std::count_if(counts.begin(), counts.end(), [](uint64_t c) { return c != 0; }));
      if (tokens == 1) {
        EXPECT_EQ(active, p.top_k);
        EXPECT_EQ((*backend)->Stats().routed_expert_bytes, p.top_k * file);
      } else {
        EXPECT_GT(active, p.top_k);
        EXPECT_EQ((*backend)->Stats().routed_expert_bytes, active * form.bytes);
      }
    }
  }
}

// Packed bf16 experts multiplied in bf16 by every bf16 gemm kernel this CPU runs and by the AMX
// kernel's software model (32-token tiles: an expert's batch is a partial tile, of up to 16 tokens
// or more): routed and shared experts, 1 and 3 threads, against the reference with bf16
// activations' tolerance (tolerances.h).
TEST(CpuMoeGemmTest, EveryBf16KernelOnPackedExperts) {
  std::vector<const GemmKernel*> kernels = AvailableGemmKernels(FloatType::kBF16);
  kernels.push_back(&GemmAmxModelKernel());
  Rng rng(91);
  MoeParams p = ParamsFor(Variant::kQwen2Moe);
  p.expert.d_model = 45;
  p.expert.d_ff = 70;
  WriteOptions write;
  write.dtype = DType::BF16;
  auto built = testing::BuildModel(OneMoeLayer(p, /*norm=*/true, rng), write);
  ASSERT_TRUE(built.ok()) << built.status();
  for (size_t tokens : {size_t{7}, size_t{50}}) {
    const std::vector<float> x = rng.Vec(tokens * p.expert.d_model, 2.0f);
    auto want = testing::RunLayer(*built->model, "reference", 0, x, tokens);
    ASSERT_TRUE(want.ok()) << want.status();
    for (const GemmKernel* kernel : kernels) {
      for (int threads : {1, 3}) {
        CpuBackendOptions options;
        options.packed_engine = CpuBackendOptions::PackedEngine::kGemm;
        options.gemm_bf16 = kernel;
        options.bf16_arithmetic = true;
        options.direct_max_tokens = 0;
        BackendConfig config;
        config.max_tokens = 64;
        config.num_threads = threads;
        auto backend = CreateCpuBackendWithOptions(*built->model, config, options);
        ASSERT_TRUE(backend.ok()) << backend.status();
        std::vector<float> got(tokens * p.expert.d_model);
        ASSERT_TRUE((*backend)->Run(0, x.data(), tokens, got.data()).ok());
        testing::ExpectOutputsNear(*want, got, tokens, p.expert.d_model, testing::kBf16ActRelTol,
                                   absl::StrFormat("%s, %d tokens, %d threads", kernel->isa,
                                                   tokens, threads));
      }
    }
  }
}

// The direct kernel shares an expert's rows among threads (matrices of at least 1M multiply-adds):
// results are bit-identical for 1 and 3 threads, and match the reference.
TEST(CpuMoeDirectTest, RowsSharedAmongThreadsGiveTheSameBits) {
  const uint32_t d = 256, ff = 1024;
  Rng rng(81);
  MoeParams p;
  p.num_experts = 2;
  p.top_k = 1;
  p.normalize_top_k = false;
  p.expert.d_model = d;
  p.expert.d_ff = ff;
  auto built = testing::BuildModel(OneMoeLayer(p, /*norm=*/false, rng));
  ASSERT_TRUE(built.ok()) << built.status();
  const size_t tokens = 16;  // ~8 per expert: 8 x 1024 x 256 = 2M multiply-adds per matrix
  const std::vector<float> x = rng.Vec(tokens * d, 2.0f);
  CpuBackendOptions options;
  options.direct_max_tokens = tokens;
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 3}) {
    BackendConfig config;
    config.max_tokens = tokens;
    config.num_threads = threads;
    auto backend = CreateCpuBackendWithOptions(*built->model, config, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    outs.emplace_back(tokens * d);
    ASSERT_TRUE((*backend)->Run(0, x.data(), tokens, outs.back().data()).ok());
  }
  EXPECT_EQ(outs[0], outs[1]);
  auto want = testing::RunLayer(*built->model, "reference", 0, x, tokens);
  ASSERT_TRUE(want.ok()) << want.status();
  testing::ExpectOutputsNear(*want, outs[0], tokens, d, testing::kF32RelTol, "1 thread");
}

// A file-backed model under a budget: decode on varied tokens reads experts into the pool's slots
// with explicit reads, never through the mapping, so none of the experts' pages is mapped in (only
// the file's metadata and the router's); without a budget the pages read stay mapped. Results are
// identical either way.
TEST(CpuMoeDirectTest, BudgetBoundsTheMappedPagesOfAFileModel) {
  const uint32_t d = 64, ff = 1024;
  Rng rng(91);
  MoeParams p;
  p.expert.d_model = d;
  p.expert.d_ff = ff;
  const ModelSpec spec = OneMoeLayer(p, /*norm=*/false, rng);
  const std::string path = ::testing::TempDir() + "/xnnpack_moe_budget.fflite";
  ASSERT_TRUE(WriteModelFile(spec, WriteOptions(), path).ok());
  auto limited_model = Model::LoadFile(path);
  auto free_model = Model::LoadFile(path);  // its own mapping: a budget drops pages of its model's
  std::remove(path.c_str());
  ASSERT_TRUE(limited_model.ok() && free_model.ok());
  const FfnView& e0 = (*limited_model)->layers()[0].moe.experts[0];
  const uint64_t mapped_one = e0.up.size + e0.gate.size + e0.down.size;  // 768 KiB
  BackendConfig config;
  config.max_tokens = 4;
  config.expert_budget_bytes = 2 * mapped_one;
  auto limited = CreateCpuBackend(**limited_model, config);
  config.expert_budget_bytes = 0;
  auto unlimited = CreateCpuBackend(**free_model, config);
  ASSERT_TRUE(limited.ok() && unlimited.ok());
  const void* limited_map = (*limited_model)->layers()[0].moe.router.data;
  const void* free_map = (*free_model)->layers()[0].moe.router.data;
  // Slack: the metadata before the data section and the router's pages (the data section's
  // first 64 KiB), and the page each expert shares with its neighbour.
  const int64_t slack = static_cast<int64_t>((*limited_model)->file_size() -
                                             (*limited_model)->data_size()) +
                        65536 + 8 * 4096;
  Rng inputs(92);
  for (int call = 0; call < 24; ++call) {
    const std::vector<float> x = inputs.Vec(d, 3.0f);
    std::vector<float> want(d), got(d);
    ASSERT_TRUE((*unlimited)->Run(0, x.data(), 1, want.data()).ok());
    ASSERT_TRUE((*limited)->Run(0, x.data(), 1, got.data()).ok());
    ASSERT_EQ(want, got) << "call " << call;
    EXPECT_LE((*limited)->Stats().resident_expert_bytes, 2 * mapped_one) << "call " << call;
    // qemu-user does not pass madvise through, nor show the guest's mappings in smaps.
    if (!UnderQemu()) {
      const int64_t rss = testing::MappingRssBytes(limited_map);
      ASSERT_GE(rss, 0) << "the model's mapping is not in /proc/self/smaps";
      EXPECT_LE(rss, slack) << "call " << call;
    }
  }
  // Without a budget the pages read stay mapped: more experts than the budget's two were used.
  const std::vector<uint64_t> counts((*limited)->expert_counts()->layer(0).begin(),
                                     (*limited)->expert_counts()->layer(0).end());
  size_t used = 0;
  for (uint64_t c : counts) used += c != 0 ? 1 : 0;
  ASSERT_GT(used, 2u) << "the inputs should route to more than two experts";
  // Each read held one expert (its three matrices, in one run: the writer puts them together).
  const BackendStats stats = (*limited)->Stats();
  EXPECT_GE(stats.expert_reads, used);
  EXPECT_GE(stats.expert_read_buffered_bytes + stats.expert_read_direct_bytes,
            stats.expert_reads * mapped_one);
  if (!UnderQemu()) {
    EXPECT_GE(testing::MappingRssBytes(free_map),
              static_cast<int64_t>(used * mapped_one) - 65536);
  }
}

// A file truncated after loading: the read of an expert past its new end fails that call with
// Unavailable (FFLITE_STATUS_IO_ERROR) naming the expert and the offset, not SIGBUS; the calls
// before it and after the file is restored give the unbudgeted bits (the session stays usable).
TEST(CpuMoeStreamTest, TruncatedFileFailsTheCallThatReadsPastItsEnd) {
  const uint32_t d = 32, ff = 256;
  Rng rng(95);
  MoeParams p;
  p.expert.d_model = d;
  p.expert.d_ff = ff;
  const ModelSpec spec = OneMoeLayer(p, /*norm=*/false, rng);
  const std::string path = ::testing::TempDir() + "/moe_truncated.fflite";
  ASSERT_TRUE(WriteModelFile(spec, WriteOptions(), path).ok());
  std::vector<char> original;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[65536];
    for (size_t r; (r = std::fread(buf, 1, sizeof(buf), f)) > 0;) {
      original.insert(original.end(), buf, buf + r);
    }
    std::fclose(f);
  }
  auto in_memory = testing::BuildModel(spec);
  auto model = Model::LoadFile(path);
  ASSERT_TRUE(in_memory.ok() && model.ok());
  const MoeView& moe = (*model)->layers()[0].moe;
  const size_t last = moe.num_experts - 1;
  uint64_t cut = (*model)->file_size();
  for (const TensorView* t : {&moe.experts[last].up, &moe.experts[last].gate,
                              &moe.experts[last].down}) {
    cut = std::min(cut, (*model)->FileOffset(*t));
  }
  // Everything read through the mapping (the router, the other experts' files are read) lies
  // before the cut: only the last expert's read can fail.
  ASSERT_LE((*model)->FileOffset(moe.router) + moe.router.size, cut);
  ASSERT_TRUE(moe.shared_experts.empty());
  BackendConfig config;
  config.max_tokens = 2;
  auto unlimited = CreateCpuBackend(*in_memory->model, config);
  config.expert_budget_bytes = 1;  // one slot: every expert used is read again
  auto limited = CreateCpuBackend(**model, config);
  ASSERT_TRUE(unlimited.ok() && limited.ok());
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(cut)), 0);
  Rng inputs(96);
  std::vector<float> failed;
  for (int call = 0; call < 200 && failed.empty(); ++call) {
    const std::vector<float> x = inputs.Vec(d, 3.0f);
    std::vector<float> want(d), got(d);
    ASSERT_TRUE((*unlimited)->Run(0, x.data(), 1, want.data()).ok());
    const absl::Status st = (*limited)->Run(0, x.data(), 1, got.data());
    if (st.ok()) {
      ASSERT_EQ(want, got) << "call " << call;
      continue;
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find(absl::StrFormat("layers[0].moe.experts[%d]", last)),
              std::string::npos) << st;
    EXPECT_NE(st.message().find("file offset"), std::string::npos) << st;
    failed = x;
  }
  ASSERT_FALSE(failed.empty()) << "no call routed to the last expert";
  // The same file again (written in place: the same inode): the session reads it as before.
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(original.data(), 1, original.size(), f), original.size());
  std::fclose(f);
  for (int call = 0; call < 8; ++call) {
    const std::vector<float> x = call == 0 ? failed : inputs.Vec(d, 3.0f);
    std::vector<float> want(d), got(d);
    ASSERT_TRUE((*unlimited)->Run(0, x.data(), 1, want.data()).ok());
    const absl::Status st = (*limited)->Run(0, x.data(), 1, got.data());
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(want, got) << "call " << call;
  }
  std::remove(path.c_str());
}

// Streamed experts read ahead: each call's experts on the reader thread while the first ones
// compute, and at decode the next MoE layer's likely experts (its router on this layer's output).
// Four MoE layers (i8, i4 and f32 experts: the quantised engine, the direct kernel and, at 40
// tokens, the packed form), each layer's output fed to the next, decode and prefill calls, 1 and 2
// threads: the bits of the unbudgeted session, and the guesses at the next layer are used (here
// each layer's input is the previous one's output, so they are right but for the budget).
TEST(CpuMoeStreamTest, ReadAheadKeepsTheBitsAndIsUsed) {
  const uint32_t d = 64, ff = 128;
  Rng rng(97);
  ModelSpec spec;
  spec.d_model = d;
  for (int l = 0; l < 4; ++l) {
    MoeParams p = ParamsFor(Variant::kMixtral);
    p.expert.d_model = d;
    p.expert.d_ff = ff;
    LayerSpec layer;
    layer.kind = LayerKind::kMoe;
    layer.moe = testing::RandomMoe(p, rng);
    layer.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, d, rng);
    layer.residual = true;
    spec.layers.push_back(std::move(layer));
  }
  for (const std::optional<DType> dtype : {std::optional<DType>(DType::I8),
                                           std::optional<DType>(DType::I4),
                                           std::optional<DType>()}) {
    SCOPED_TRACE(dtype.has_value() ? DTypeName(*dtype) : "f32");
    WriteOptions write;
    if (dtype.has_value()) {
      write.matrix_dtype = [q = *dtype](const std::string&, DType) { return q; };
    }
    auto in_memory = testing::BuildModel(spec, write);
    auto file = testing::BuildModelFile(spec, "read_ahead.fflite", write);
    ASSERT_TRUE(in_memory.ok()) << in_memory.status();
    ASSERT_TRUE(file.ok()) << file.status();
    const FfnView& e0 = file->model->layers()[0].moe.experts[0];
    const uint64_t one = e0.up.size + e0.gate.size + e0.down.size;
    for (int threads : {1, 2}) {
      BackendConfig config;
      config.num_threads = threads;
      config.max_tokens = 40;
      auto unlimited = CreateCpuBackend(*in_memory->model, config);
      // Room for a call's two experts and a guess's two, and a few more.
      config.expert_budget_bytes = 7 * (one + 8192);
      auto limited = CreateCpuBackend(*file->model, config);
      ASSERT_TRUE(unlimited.ok() && limited.ok());
      Rng inputs(98);
      for (int step = 0; step < 30; ++step) {
        const size_t n = step % 10 == 9 ? 40 : (step % 5 == 4 ? 3 : 1);
        std::vector<float> a = inputs.Vec(n * d, 2.0f), b = a, ya(n * d), yb(n * d);
        for (size_t l = 0; l < 4; ++l) {
          ASSERT_TRUE((*unlimited)->Run(l, a.data(), n, ya.data()).ok());
          const absl::Status st = (*limited)->Run(l, b.data(), n, yb.data());
          ASSERT_TRUE(st.ok()) << st;
          ASSERT_EQ(ya, yb) << "step " << step << ", layer " << l << ", threads " << threads;
          a.swap(ya);
          b.swap(yb);
        }
      }
      const BackendStats s = (*limited)->Stats();
      EXPECT_GT(s.expert_slots, 4u);
      EXPECT_GT(s.expert_prefetches_used, 0u);
      EXPECT_LE(s.expert_prefetches_used + s.expert_prefetches_wasted, s.expert_reads);
      EXPECT_LE(s.resident_expert_bytes, config.expert_budget_bytes);
    }
  }
}

}  // namespace
}  // namespace fflite
