// The CPU backend's choice of engines and kernels (cpu_options.h), and the measurements behind
// its defaults.
//
// Few tokens per expert: direct kernel on the file's weights. An expert that gets at most
// `direct_max_tokens` (4 or 40, below) tokens in a call, every expert at decode, does not use its
// packed operators: fflite's own kernel (kernels.gemv) reads the expert's row-major weights
// straight from the model file, f16/bf16 converted in registers. Why:
//  - No packing. XNNPACK 2022 packs at about 1 GB/s here (44 ms for a mixtral-mini expert against
//    2 ms to stream it), so under a budget every miss cost a repack: decode with a quarter of the
//    experts resident was 13.5x slower than without a budget. Read in place, a miss costs one read
//    of the expert's file pages.
//  - Speed at these batch sizes. At decode both stream the weights at the read bandwidth (half the
//    bytes for f16/bf16 files). With a few dozen tokens XNNPACK's GEMM reads each slice's weights
//    from memory without overlapping that with its arithmetic (7 tokens on a mixtral-mini expert:
//    the time of the arithmetic plus the time of the read), while the direct kernel prefetches the
//    next row block as it computes. Measured on one Zen 4 core, routed experts of mixtral-mini
//    (fflite-bench, % of the FMA peak): ~32 tokens per expert, direct 75% and packed 66-70%;
//    ~48 tokens, both 76-79%; ~64 tokens, direct 77% and packed 84%. Hence 40 with XNNPACK.
//    The gemm engine packs at memory speed and computes a batch of ~16 tokens near its peak:
//    on a Zen 5 VM, mixtral-mini at 128 tokens (11-24 per expert), routed experts at 1 / 2
//    threads: threshold 40 (all direct) 39% / 36% of the FMA peak, 24: 72 / 57%, 16: 58 / 59%,
//    8: 65 / 56%, 4: 67 / 56%, 0: 65 / 55% (runs differ by ~5 points). Since f16/bf16 experts
//    are packed 16 bits wide (gemm.h), the packed form reads no more bytes than the file's, and
//    the direct kernel's 5-8-token batches lost: on a Zen 4 VM (AVX2), qwen-moe at 128 tokens
//    (60 experts, ~8 tokens each), routed experts at 1 / 2 threads, 3 rounds alternated: bf16
//    threshold 8: 219-243 / 126-131 ms, 4: 168-185 / 101-102, 0: 174-185 / 97-104; f32 8: 218-331
//    / 98-141, 4: 181-194 / 112-114, 0: 167-180 / 108-112; mixtral-mini at 32 tokens (~8 per
//    expert) bf16 8: 39.5 / 18-23 ms, 4: 26-30 / 14-16, f32 alike. Hence 4 for routed experts
//    with the gemm engine: decode and the smallest batches stay on the file's rows. Dense f16/bf16
//    layers keep 8 (a call of 5-8 tokens reads only the firing value rows; not re-measured).
// Which path an expert takes depends only on its token count, never on residency, so results stay
// identical whatever the budget.
#include "backends/cpu/cpu_options.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "kernels/registry.h"

namespace fflite {

PackChoice ChoosePackEngine(const CpuBackendOptions& options, size_t slice_bytes) {
  PackChoice choice;
  choice.slice_bytes = slice_bytes;
  const GemmKernel& f32 = options.gemm_f32 != nullptr ? *options.gemm_f32
                                                      : BestGemmKernel(FloatType::kF32);
  const GemmKernel& bf16 = options.gemm_bf16 != nullptr ? *options.gemm_bf16
                                                        : BestGemmKernel(FloatType::kBF16);
  bool gemm = options.packed_engine == CpuBackendOptions::PackedEngine::kGemm;
  if (options.packed_engine == CpuBackendOptions::PackedEngine::kAuto) {
    // Where the kernel is measured faster than XNNPACK (x86: AVX2, AVX-512; gemm_engine.cc). On
    // ARM XNNPACK's assembly kernels stay until the NEON microkernel is measured on hardware.
    gemm = GemmBeatsXnnpack(f32);
  }
  if (gemm) choice.gemm_f32 = &f32;
  // bf16 arithmetic: only with a kernel that is faster than f32 arithmetic on this CPU (never
  // the scalar twin, nor vdpbf16ps on Intel CPUs: GemmBf16ArithmeticFaster) unless the caller
  // names it, and only when the caller accepts bf16 activations.
  const bool bf16_fast = options.gemm_bf16 != nullptr || GemmBf16ArithmeticFaster(bf16);
  if (gemm && options.bf16_arithmetic && bf16_fast) choice.gemm_bf16 = &bf16;
  // f16/bf16 weights in 16-bit panels where the f32 kernel has such a twin: the same bits from
  // half the bytes (packed memory, and the reads of a prefill whose experts get few tokens).
  if (gemm && options.half_panels) {
    choice.gemm_f16w = HalfPanelKernel(f32, FloatType::kF16);
    choice.gemm_bf16w = HalfPanelKernel(f32, FloatType::kBF16);
  }
  using GemmAhead = CpuBackendOptions::GemmAhead;
  if (options.gemm_ahead == GemmAhead::kOff ||
      (options.gemm_ahead == GemmAhead::kAuto && !GemmAheadByDefault())) {
    for (const GemmKernel** g :
         {&choice.gemm_f32, &choice.gemm_bf16, &choice.gemm_f16w, &choice.gemm_bf16w}) {
      const GemmKernel* plain = GemmKernelWithoutAhead(*g);
      choice.ahead_off |= plain != *g;
      *g = plain;
    }
  }
  return choice;
}

DirectLimits ChooseDirectLimits(const CpuBackendOptions& options, const PackChoice& choice,
                                size_t chunk) {
  size_t dense = options.direct_max_tokens, expert = dense;
  if (dense == CpuBackendOptions::kDirectTokensAuto) {
    const bool gemm = choice.gemm_f32 != nullptr;
    dense = gemm ? kGemmDirectMaxTokens : kXnnpackDirectMaxTokens;
    expert = gemm ? kGemmExpertDirectMaxTokens : kXnnpackDirectMaxTokens;
  }
  DirectLimits limits;
  limits.dense = std::min(dense, chunk);
  limits.expert = std::min(expert, limits.dense);
  return limits;
}

PackedKernelNames CpuPackedKernelNames(const CpuBackendOptions& options) {
  const PackChoice choice = ChoosePackEngine(options, options.slice_bytes);
  PackedKernelNames names;
  auto name = [](const GemmKernel* g) { return g != nullptr ? g->isa : "xnnpack"; };
  names.f32 = name(choice.gemm_f32);
  names.f16 = name(choice.Gemm(DType::F16));
  names.bf16 = name(choice.Gemm(DType::BF16));
  return names;
}

std::string CpuPackedEngineName(const CpuBackendOptions& options) {
  const PackChoice choice = ChoosePackEngine(options, options.slice_bytes);
  if (choice.gemm_f32 == nullptr) return "xnnpack";
  auto half = [&](DType dtype) {
    const GemmKernel* g = choice.Gemm(dtype);
    return g != choice.gemm_f32 ? g->isa : "f32 panels";
  };
  return absl::StrFormat("gemm %s (f16 weights: %s; bf16 weights: %s)%s", choice.gemm_f32->isa,
                         half(DType::F16), half(DType::BF16),
                         choice.ahead_off ? ", without the ahead prefetch" : "");
}

bool CpuBf16Arithmetic(const CpuBackendOptions& options) {
  return ChoosePackEngine(options, options.slice_bytes).gemm_bf16 != nullptr;
}

}  // namespace fflite
