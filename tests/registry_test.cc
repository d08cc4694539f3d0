// The kernel registry's choice for CPUs described by their features: which kernel of each family a
// known kind of CPU gets (a table in the wrong order, a level with the wrong requirements or a
// vendor preference the wrong way round picks another and fails here), what every list holds,
// and the policies that pick between kernels. Features are given, not probed: every kind of CPU
// is checked on every machine (the levels' own checks, the AMX tiles', are not run for them).
#include "kernels/registry.h"

#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"

namespace fflite {
namespace {

using F = CpuFeature;

// The chosen kernels' names, family by family: kernels, qgemv, qgemm, gemm f32, gemm bf16.
std::vector<std::string> Chosen(const CpuFeatures& cpu) {
  const KernelLists l = ListKernels(cpu, /*run_checks=*/false);
  return {l.best_kernels->isa, l.best_qgemv->isa, l.best_qgemm->isa, l.best_gemm_f32->isa,
          l.best_gemm_bf16->isa};
}

TEST(RegistryTest, EveryListStartsWithTheScalarTwinsAndHoldsTheChosen) {
  for (const CpuFeatures& cpu : {CpuFeatures(), GetCpuFeatures()}) {
    const KernelLists l = ListKernels(cpu, /*run_checks=*/false);
    ASSERT_FALSE(l.kernels.empty() || l.qgemv.empty() || l.qgemm.empty() || l.gemm_f32.empty() ||
                 l.gemm_bf16.empty());
    EXPECT_EQ(l.kernels.front(), &ScalarKernels());
    EXPECT_EQ(l.qgemv.front()->qgemv, &QGemvScalar);
    EXPECT_EQ(l.qgemm.front()->qgemm, &QGemmScalar);
    EXPECT_EQ(l.gemm_f32.front()->microkernel, &GemmMicrokernelScalar);
    EXPECT_EQ(l.gemm_bf16.front()->microkernel, &GemmMicrokernelScalarBf16);
    auto listed = [](const auto& list, const auto* best) {
      for (const auto* k : list) {
        if (k == best) return true;
      }
      return false;
    };
    EXPECT_TRUE(listed(l.kernels, l.best_kernels));
    EXPECT_TRUE(listed(l.qgemv, l.best_qgemv));
    EXPECT_TRUE(listed(l.qgemm, l.best_qgemm));
    EXPECT_TRUE(listed(l.gemm_f32, l.best_gemm_f32));
    EXPECT_TRUE(listed(l.gemm_bf16, l.best_gemm_bf16));
    for (const GemmKernel* g : l.gemm_f32) EXPECT_EQ(g->dtype, FloatType::kF32) << g->isa;
    for (const GemmKernel* g : l.gemm_bf16) EXPECT_EQ(g->dtype, FloatType::kBF16) << g->isa;
    for (const QGemmKernel* q : l.qgemm) {
      EXPECT_TRUE(q->quantize_activations != nullptr && q->rotate_blocks != nullptr) << q->isa;
    }
  }
}

// (On aarch64 NEON is the baseline: a featureless CPU gets it, Arm64CpusGetTheirKernels.)
#if !defined(__aarch64__)
TEST(RegistryTest, AFeaturelessCpuGetsTheScalarTwins) {
  EXPECT_EQ(Chosen(CpuFeatures()), (std::vector<std::string>{"scalar", "scalar", "scalar",
                                                              "scalar", "scalar-bf16"}));
}
#endif

// This machine's lists are the table's for its probed features, its levels' checks run.
TEST(RegistryTest, ThisCpuGetsWhatItsFeaturesGive) {
  const KernelLists want = ListKernels(GetCpuFeatures(), /*run_checks=*/true);
  const KernelLists& got = ThisCpuKernels();
  EXPECT_EQ(got.kernels, want.kernels);
  EXPECT_EQ(got.qgemm, want.qgemm);
  EXPECT_EQ(got.gemm_bf16, want.gemm_bf16);
  EXPECT_EQ(&BestKernels(), want.best_kernels);
  EXPECT_EQ(&BestQGemvKernel(), want.best_qgemv);
  EXPECT_EQ(&BestQGemmKernel(), want.best_qgemm);
  EXPECT_EQ(&BestGemmKernel(FloatType::kF32), want.best_gemm_f32);
  EXPECT_EQ(&BestGemmKernel(FloatType::kBF16), want.best_gemm_bf16);
}

#if defined(__x86_64__)
const std::initializer_list<CpuFeature> kHaswell = {F::kSse2, F::kSse41, F::kAvx, F::kFma3,
                                                    F::kF16c, F::kAvx2};

TEST(RegistryTest, X86CpusGetTheirKernels) {
  // Haswell, Zen 2/3: AVX2 everywhere.
  EXPECT_EQ(Chosen(CpuFeatures::Of(kHaswell, CpuVendor::kIntel)),
            (std::vector<std::string>{"avx2", "avx2", "avx2", "avx2", "scalar-bf16"}));
  // An AVX-VNNI client core (Alder Lake): its 256-bit dot products for int8 activations.
  CpuFeatures alder = CpuFeatures::Of(kHaswell, CpuVendor::kIntel);
  alder.Set(F::kAvxVnni);
  EXPECT_EQ(Chosen(alder)[2], "avxvnni");
  // Skylake-SP: AVX-512 without VNNI: AVX2's int8 product, 4-row blocks for one token.
  CpuFeatures skx = CpuFeatures::Of(kHaswell, CpuVendor::kIntel);
  for (F f : {F::kAvx512f, F::kAvx512bw, F::kAvx512dq, F::kAvx512vl}) skx.Set(f);
  EXPECT_EQ(Chosen(skx),
            (std::vector<std::string>{"avx512", "avx512", "avx2", "avx512", "scalar-bf16"}));
  // Ice Lake: VNNI.
  CpuFeatures icx = skx;
  icx.Set(F::kAvx512vnni);
  EXPECT_EQ(Chosen(icx)[2], "avx512vnni");
  // Sapphire Rapids: AVX-512 BF16 and AMX: the tiles for bf16 weights, still 4-row blocks.
  CpuFeatures spr = icx;
  spr.Set(F::kAvx512bf16);
  spr.Set(F::kAmxBf16);
  EXPECT_EQ(Chosen(spr), (std::vector<std::string>{"avx512", "avx512", "avx512vnni", "avx512",
                                                   "amx-bf16"}));
  // Zen 4 / Zen 5: the same instructions without AMX, one token's gemv in 8-row streams.
  CpuFeatures zen = icx;
  zen.vendor = CpuVendor::kAmd;
  zen.Set(F::kAvx512bf16);
  EXPECT_EQ(Chosen(zen), (std::vector<std::string>{"avx512-streams", "avx512", "avx512vnni",
                                                   "avx512", "avx512bf16"}));
  // Both AVX-512 sets are listed everywhere, so that the tests run both.
  for (const CpuFeatures& cpu : {spr, zen}) {
    std::vector<std::string> names;
    for (const Kernels* k : ListKernels(cpu, false).kernels) names.push_back(k->isa);
    EXPECT_EQ(names, (std::vector<std::string>{"scalar", "avx2", "avx512", "avx512-streams"}));
  }
  // AVX-512 needs the OS's AVX2 state, F16C and FMA: without them nothing past scalar.
  EXPECT_EQ(Chosen(CpuFeatures::Of({F::kAvx512f, F::kAvx512bw, F::kAvx512vl})),
            Chosen(CpuFeatures()));
}

TEST(RegistryTest, X86Policies) {
  const KernelLists l = ListKernels(CpuFeatures::Of(kHaswell), false);
  EXPECT_TRUE(GemmBeatsXnnpack(*l.best_gemm_f32));
  EXPECT_FALSE(GemmBeatsXnnpack(*l.gemm_f32.front())) << "the scalar twin";
  // The int8 path from where it was measured faster, per pair of kernels (quant_kernels.h).
  CpuFeatures icx = CpuFeatures::Of(kHaswell);
  for (F f : {F::kAvx512f, F::kAvx512bw, F::kAvx512vl, F::kAvx512vnni}) icx.Set(f);
  const KernelLists v = ListKernels(icx, false);
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ8, *v.best_qgemv, *v.best_qgemm), 2u);
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ4, *v.best_qgemv, *v.best_qgemm), 2u);
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ8, *l.best_qgemv, *l.best_qgemm), 2u);
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ4, *l.best_qgemv, *l.best_qgemm), 1u);
  // Skylake-SP's pair (qgemv avx512, qgemm avx2) is slower at every count up to 4.
  CpuFeatures skx = CpuFeatures::Of(kHaswell);
  for (F f : {F::kAvx512f, F::kAvx512bw, F::kAvx512vl}) skx.Set(f);
  const KernelLists s = ListKernels(skx, false);
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ4, *s.best_qgemv, *s.best_qgemm), 8u);
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ8, *l.qgemv.front(), *l.qgemm.front()), 8u);
  // The packed types, whose float path decodes bit planes or level indices: int8 from one token on
  // the VNNI and AVX2 pairs; the wide forms as Q8.
  for (QuantType t : {QuantType::kQ6KP, QuantType::kQ5KP, QuantType::kIQ4X, QuantType::kIQ4N,
                      QuantType::kMXF4, QuantType::kQ3KP, QuantType::kQ2KP}) {
    EXPECT_EQ(DefaultQuantGemmMinTokens(t, *v.best_qgemv, *v.best_qgemm), 1u);
    EXPECT_EQ(DefaultQuantGemmMinTokens(t, *l.best_qgemv, *l.best_qgemm), 1u);
    EXPECT_EQ(DefaultQuantGemmMinTokens(t, *s.best_qgemv, *s.best_qgemm), 8u);
    EXPECT_EQ(DefaultQuantGemmMinTokens(t, *l.qgemv.front(), *l.qgemm.front()), 8u);
  }
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ6K, *v.best_qgemv, *v.best_qgemm), 2u);
  EXPECT_EQ(DefaultQuantGemmMinTokens(QuantType::kQ5K, *l.best_qgemv, *l.best_qgemm), 2u);
}
#endif

#if defined(__aarch64__)
TEST(RegistryTest, Arm64CpusGetTheirKernels) {
  // Cortex-A53 (Raspberry Pi 3): plain NEON (part of ARMv8-A: listed even without a probe).
  EXPECT_EQ(Chosen(CpuFeatures()),
            (std::vector<std::string>{"neon", "neon", "neon", "neon", "scalar-bf16"}));
  // Cortex-A76 (Raspberry Pi 5): the dot product.
  const CpuFeatures a76 = CpuFeatures::Of({F::kNeon, F::kFp16Arith, F::kDotProd});
  EXPECT_EQ(Chosen(a76)[2], "neondot");
  // ARMv8.6 cores: i8mm and BF16. The smmla kernel is listed, but sdot chosen (the model gives
  // the pair tile no gain over it); smmla only where there is no sdot.
  const CpuFeatures v86 = CpuFeatures::Of({F::kNeon, F::kDotProd, F::kI8mm, F::kArmBf16});
  EXPECT_EQ(Chosen(v86),
            (std::vector<std::string>{"neon", "neon", "neondot", "neon", "neon-bf16"}));
  const KernelLists lv86 = ListKernels(v86, false);
  ASSERT_FALSE(lv86.qgemm.empty());
  EXPECT_STREQ(lv86.qgemm.back()->isa, "neoni8mm");
  EXPECT_EQ(Chosen(CpuFeatures::Of({F::kNeon, F::kI8mm}))[2], "neoni8mm");
  EXPECT_FALSE(GemmBeatsXnnpack(*ListKernels(v86, false).best_gemm_f32));
  // Int8 activations from one token with every NEON pair (the performance model: the float path
  // is bound by the vector pipes), float activations with the scalar twins.
  for (const CpuFeatures& cpu : {CpuFeatures(), a76, v86}) {
    const KernelLists l = ListKernels(cpu, false);
    for (QuantType t : {QuantType::kQ8, QuantType::kQ4, QuantType::kQ4K, QuantType::kQ6K,
                        QuantType::kQ5K}) {
      EXPECT_EQ(DefaultQuantGemmMinTokens(t, *l.best_qgemv, *l.best_qgemm), 1u);
      EXPECT_EQ(DefaultQuantGemmMinTokens(t, *l.qgemv.front(), *l.qgemm.front()), 8u);
    }
  }
}
#elif defined(__arm__)
TEST(RegistryTest, Armv7CpusGetTheirKernels) {
  // Debian's armhf baseline is VFPv3 without NEON: the NEON kernels only where reported.
  EXPECT_EQ(Chosen(CpuFeatures::Of({F::kVfpv3})), Chosen(CpuFeatures()));
  const CpuFeatures a7 = CpuFeatures::Of({F::kVfpv3, F::kNeon, F::kNeonFma});
  EXPECT_EQ(Chosen(a7),
            (std::vector<std::string>{"neon", "neon", "neon", "scalar", "scalar-bf16"}));
}
#endif

// The ahead forms run by default unless a core reports less than 1 MiB of L2 (or no L2 at all:
// a VM that hides the cache leaves).
TEST(RegistryTest, AheadPrefetchByDefaultFollowsTheL2) {
  CpuFeatures cpu;
  EXPECT_TRUE(GemmAheadByDefault(cpu)) << "no L2 reported";
  cpu.l2_bytes = 512 << 10;
  EXPECT_FALSE(GemmAheadByDefault(cpu));
  cpu.l2_bytes = 1 << 20;
  EXPECT_TRUE(GemmAheadByDefault(cpu));
  cpu.l2_bytes = 2 << 20;
  EXPECT_TRUE(GemmAheadByDefault(cpu));
  EXPECT_EQ(GemmAheadByDefault(), GemmAheadByDefault(GetCpuFeatures()));
}

}  // namespace
}  // namespace fflite
