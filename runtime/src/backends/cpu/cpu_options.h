// The CPU backend's options (registered as "xnnpack": fflite's kernels and XNNPACK's) and the
// engines and kernels they choose on this CPU. Tuning knobs for the tests and fflite-bench; the
// defaults are what the measurements chose (cpu_options.cc). No XNNPACK header: the C API's
// platform info and the tools read the choices from here.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_CPU_OPTIONS_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_CPU_OPTIONS_H_

#include <cstddef>
#include <string>

#include "format/model.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"
#include "moe/residency.h"

namespace fflite {

// When more than this fraction of a value-row matrix's neurons fire in a call, it reads every
// row in order instead of the list of those that fired (CpuBackendOptions).
inline constexpr double kValueRowsDenseFraction = 0.75;

struct CpuBackendOptions {
  // Element-wise and norm kernels; nullptr: BestKernels() for this CPU.
  const Kernels* kernels = nullptr;
  // Packed bytes of weights per XNNPACK operator: each matrix is split by output channels into
  // slices of about this size. 0: one operator per matrix.
  size_t slice_bytes = size_t{2} << 20;
  // The most tokens that pass through the layer at once (bounds the scratch).
  size_t token_chunk = 128;
  // MoE: an expert given at most this many tokens in a call runs fflite's direct kernel on the
  // file's weights instead of its packed form; f16/bf16 dense layers run calls of at most this
  // many tokens the same way (capped at token_chunk). kDirectTokensAuto: with the gemm engine 4
  // for experts and 8 for dense layers, with XNNPACK's operators 40 (measured crossovers; see
  // cpu_options.cc).
  static constexpr size_t kDirectTokensAuto = ~size_t{0};
  size_t direct_max_tokens = kDirectTokensAuto;
  // Packed bytes per operator for routed experts. Their batches are a fraction of the call's
  // tokens; mixtral-mini, 32 tokens per expert, all packed: 1 MiB 68.6-69.4% of the FMA peak,
  // 2 MiB 64.4-67.9%; equal at 128 tokens per expert (81.5-83.7%).
  size_t expert_slice_bytes = size_t{1} << 20;
  // Under an expert budget: which resident expert form is dropped first (moe/residency.h).
  ResidencyPolicy expert_policy = ResidencyPolicy::kFrequency;
  // Quantised (I8/I4) matrices: the float-activation and int8-activation kernels (nullptr: the
  // best for this CPU), and the fewest tokens in a product that take the int8 path (0: never;
  // kQuantGemmTokensAuto: per dtype, from where the pair's int8 kernel is measured faster;
  // DefaultQuantGemmMinTokens in quant_kernels.h). Fewer tokens are bound by the read of the
  // weights, where float activations lose no accuracy.
  const QGemvKernel* qgemv = nullptr;
  const QGemmKernel* qgemm = nullptr;
  size_t quant_gemm_min_tokens = kQuantGemmTokensAuto;
  // Float matrices, packed for many tokens: fflite's gemm engine (kernels/gemm.h) or XNNPACK's
  // operators. kAuto: the gemm engine where it is measured faster (x86 with AVX2 or AVX-512),
  // XNNPACK elsewhere. Routers are always XNNPACK operators (a few rows).
  enum class PackedEngine { kAuto, kXnnpack, kGemm };
  PackedEngine packed_engine = PackedEngine::kAuto;
  // The gemm engine's kernels (nullptr: the best for this CPU) for f32 arithmetic and for bf16
  // weights with bf16 arithmetic.
  const GemmKernel* gemm_f32 = nullptr;
  const GemmKernel* gemm_bf16 = nullptr;
  // bf16 weights with the gemm engine multiply in bf16 where the CPU has a bf16 kernel faster
  // than f32 arithmetic (AMX-BF16; AVX-512 BF16 except on Intel CPUs; Arm's BF16: see
  // GemmBf16ArithmeticFaster): activations are rounded to bf16 (relative error up to 2^-9 each,
  // products and sums in f32), at about twice the f32 rate. false, or no such kernel: f32
  // arithmetic (16-bit panels below, else f32 panels).
  bool bf16_arithmetic = true;
  // f16/bf16 weights with the gemm engine (and without bf16 arithmetic) are packed as they are
  // stored, 16 bits each, where the f32 kernel has a twin that widens them as it loads them
  // (AVX2 and AVX-512: HalfPanelKernel): the same results bit for bit from half the packed
  // bytes. false: converted to f32 panels.
  bool half_panels = true;
  // Whether the gemm engine's AVX-512 and AMX kernels prefetch the next pass's panels while
  // they compute on the current ones (GemmKernel::ahead; measured on an Intel Xeon and an AMD Zen
  // 5, see GemmBlock, and on a Xeon with AMX, see gemm_amx.cc). kAuto: unless the CPU reports
  // less than 1 MiB of L2 per core (GemmAheadByDefault). The results are the same bits either
  // way; kOn and kOff are for measuring it (fflite-bench --gemm_ahead off --baseline --vs
  // gemm_ahead=on).
  enum class GemmAhead { kAuto, kOn, kOff };
  GemmAhead gemm_ahead = GemmAhead::kAuto;
  // MoE with a pool of threads: when a call gives at least kExpertsAlonePerThread experts per
  // thread that run on packed weights with the gemm engine or on quantised ones (each at most
  // token_chunk tokens), each of them runs whole on one thread, the threads taking the experts
  // largest first, instead of every expert's products being shared among the threads
  // (experts_alone.h). The same bits either way; false: always shared.
  bool experts_alone = true;
  // Down matrices stored as value rows (Layout::VALUE_ROWS, ReLU-family FFNs): a few-token call
  // reads only the rows of the neurons that fire for some token, unless more than this fraction
  // fire; then every row in order (the same bits). 0: always every row; 1: always the list.
  // The same limit applies to ReGLU's up rows on the direct path (whatever down's layout): up is
  // computed only for the neurons whose gate fired.
  double value_rows_dense_fraction = kValueRowsDenseFraction;
};

// The default direct_max_tokens per engine (cpu_options.cc says why): dense f16/bf16 layers and
// routed experts with XNNPACK, dense layers and routed experts with the gemm engine.
inline constexpr size_t kGemmDirectMaxTokens = 8;
inline constexpr size_t kGemmExpertDirectMaxTokens = 4;
inline constexpr size_t kXnnpackDirectMaxTokens = 40;
// Experts alone (experts_alone.h): at least this many such experts per thread in a call. With
// fewer, the threads' last experts would end unevenly (a thread waits up to a whole expert).
inline constexpr size_t kExpertsAlonePerThread = 4;

// Which engine packs float matrices: XNNPACK (gemm_f32 == nullptr) or the gemm engine with these
// kernels: f16 weights take gemm_f16w when set (16-bit panels), else gemm_f32; bf16 weights
// take gemm_bf16 when set (bf16 arithmetic), else gemm_bf16w when set, else gemm_f32.
struct PackChoice {
  size_t slice_bytes = 0;  // XNNPACK: packed bytes per operator (see PackMatrixF32)
  const GemmKernel* gemm_f32 = nullptr;
  const GemmKernel* gemm_bf16 = nullptr;
  const GemmKernel* gemm_f16w = nullptr;
  const GemmKernel* gemm_bf16w = nullptr;
  bool ahead_off = false;  // the kernels' ahead forms left out (CpuBackendOptions::gemm_ahead)
  // The gemm kernel for weights of `dtype` (nullptr: XNNPACK).
  const GemmKernel* Gemm(DType dtype) const {
    if (dtype == DType::F16 && gemm_f16w != nullptr) return gemm_f16w;
    if (dtype == DType::BF16 && gemm_bf16 != nullptr) return gemm_bf16;
    if (dtype == DType::BF16 && gemm_bf16w != nullptr) return gemm_bf16w;
    return gemm_f32;
  }
};

// The engine and kernels that pack float matrices with `options` on this CPU, XNNPACK's
// operators sliced at `slice_bytes`.
PackChoice ChoosePackEngine(const CpuBackendOptions& options, size_t slice_bytes);

// The direct-kernel thresholds `options` give with `choice` (the routed experts' choice): dense
// f16/bf16 calls and expert batches of at most these many tokens run on the file's rows; both
// capped at `chunk` (the tokens per pass), the experts' at the dense layers'.
struct DirectLimits {
  size_t dense = 0, expert = 0;
};
DirectLimits ChooseDirectLimits(const CpuBackendOptions& options, const PackChoice& choice,
                                size_t chunk);

// What multiplies packed float matrices in a backend made with `options` on this CPU: for f32
// weights the gemm kernel's isa ("avx512", "avx2", ...) or "xnnpack"; for f16 weights its
// 16-bit-panel twin ("avx2-f16w") where it has one, else the same as f32; for bf16 weights the
// bf16 gemm kernel's ("avx512bf16", "amx-bf16") when they are multiplied in bf16, else the
// 16-bit-panel twin ("avx2-bf16w"), else the same as f32.
struct PackedKernelNames {
  std::string f32, f16, bf16;
};
PackedKernelNames CpuPackedKernelNames(const CpuBackendOptions& options);
// The same in words, for reports: e.g. "gemm avx512 (f16 weights: f32 panels; bf16 weights:
// avx512bf16)" or "xnnpack".
std::string CpuPackedEngineName(const CpuBackendOptions& options);
// Whether such a backend multiplies bf16 weights in bf16 (activations rounded to bf16).
bool CpuBf16Arithmetic(const CpuBackendOptions& options);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_CPU_OPTIONS_H_
