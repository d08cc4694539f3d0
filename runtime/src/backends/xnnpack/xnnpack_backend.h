// The xnnpack backend: the matrix products of dense and MoE FFN layers by the engines of
// engines.h on a pthreadpool (fflite's gemm engine or XNNPACK's fully-connected operators for
// packed float weights, fflite's direct and quantised kernels on the file's weights), fflite's own
// vectorised kernels for activations, GLU and norms.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_XNNPACK_BACKEND_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_XNNPACK_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"

namespace fflite {

// Tuning knobs, for tests and fflite-bench; the defaults are what the measurements chose (see
// xnnpack_backend.cc).
// When more than this fraction of a value-row matrix's neurons fire in a call, it reads every
// row in order instead of the list of those that fired (XnnpackBackendOptions).
inline constexpr double kValueRowsDenseFraction = 0.75;

struct XnnpackBackendOptions {
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
  // xnnpack_backend.cc).
  static constexpr size_t kDirectTokensAuto = ~size_t{0};
  size_t direct_max_tokens = kDirectTokensAuto;
  // Packed bytes per operator for routed experts. Their batches are a fraction of the call's
  // tokens; mixtral-mini, 32 tokens per expert, all packed: 1 MiB 68.6-69.4% of the FMA peak,
  // 2 MiB 64.4-67.9%; equal at 128 tokens per expert (81.5-83.7%).
  size_t expert_slice_bytes = size_t{1} << 20;
  // For fflite-bench: time the routed experts' part of each MoE call (XnnpackRoutedExpertSeconds).
  bool time_routed_experts = false;
  // Quantised (I8/I4) matrices: the float-activation and int8-activation kernels (nullptr: the
  // best for this CPU), and the fewest tokens in a product that take the int8 path (0: never;
  // kQuantGemmTokensAuto: per dtype, from where the pair's int8 kernel is measured faster;
  // DefaultQuantGemmMinTokens in quant_engine.h). Fewer tokens are bound by the read of the
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
  // 5, see GemmBlock, and on a Xeon with AMX, see gemm_amx.cc). kAuto: unless the CPU reports less than 1 MiB of L2 per core
  // (GemmAheadByDefault). The results are the same bits either way; kOn and kOff are for
  // measuring it (fflite-bench --gemm_ahead off --baseline --vs gemm_ahead=on).
  enum class GemmAhead { kAuto, kOn, kOff };
  GemmAhead gemm_ahead = GemmAhead::kAuto;
  // MoE with a pool of threads: when a call gives at least kExpertsAlonePerThread experts per
  // thread that run on packed weights with the gemm engine or on quantised ones (each at most
  // token_chunk tokens), each of them runs whole on one thread, the threads taking the experts
  // largest first, instead of every expert's products being shared among the threads (see
  // RunExpertsAlone in the .cc). The same bits either way; false: always shared.
  bool experts_alone = true;
  // Down matrices stored as value rows (Layout::VALUE_ROWS, ReLU-family FFNs): a few-token call
  // reads only the rows of the neurons that fire for some token, unless more than this fraction
  // fire; then every row in order (the same bits). 0: always every row; 1: always the list.
  // The same limit applies to ReGLU's up rows on the direct path (whatever down's layout): up is
  // computed only for the neurons whose gate fired.
  double value_rows_dense_fraction = kValueRowsDenseFraction;
};

// What multiplies packed float matrices in a backend made with `options` on this CPU: for f32
// weights the gemm kernel's isa ("avx512", "avx2", ...) or "xnnpack"; for f16 weights its
// 16-bit-panel twin ("avx2-f16w") where it has one, else the same as f32; for bf16 weights the
// bf16 gemm kernel's ("avx512bf16", "amx-bf16") when they are multiplied in bf16, else the
// 16-bit-panel twin ("avx2-bf16w"), else the same as f32.
struct PackedKernelNames {
  std::string f32, f16, bf16;
};
PackedKernelNames XnnpackPackedKernelNames(const XnnpackBackendOptions& options);
// The same in words, for reports: e.g. "gemm avx512 (f16 weights: f32 panels; bf16 weights:
// avx512bf16)" or "xnnpack".
std::string XnnpackPackedEngineName(const XnnpackBackendOptions& options);
// Whether such a backend multiplies bf16 weights in bf16 (activations rounded to bf16).
bool XnnpackBf16Arithmetic(const XnnpackBackendOptions& options);

// Whether XNNPACK initialises on this CPU; `why` says why not.
bool XnnpackBackendAvailable(std::string* why);

// Packs the float weights of shared experts and routers (f16/bf16 converted to f32) into XNNPACK
// operators, releases the model's pages of those weights, and sizes the scratch from
// config.max_tokens. Dense layers are prepared on first use (see LayerPlan in the .cc): f32 ones
// are packed by their first call, on the session's threads, and their pages released; f16/bf16
// ones run calls of at most direct_max_tokens on the file's rows and are packed by their first
// larger call (their pages stay). Quantised (I8/I4) matrices are never packed: they are read from
// the model's mapping, whose pages stay. Routed experts are prepared on first use, in one of two resident
// forms: packed operators (for batches of more than direct_max_tokens; float matrices only) and
// their file pages (read in place for smaller batches, every expert at decode, and always for
// quantised experts). Without a budget (config.expert_budget_bytes == 0) nothing is dropped; with
// one, the least recently used forms are dropped to stay within the budget (a budget below one
// form keeps just the one in use). Dropping file pages (MADV_DONTNEED) affects every session of
// the same model, which then reads them again from the page cache. The model must outlive the
// backend. Errors: ResourceExhausted (memory, threads), Internal (XNNPACK refused an operator);
// Run may give these too, when packing a dense layer or an expert on first use fails.
absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackend(const Model& model,
                                                              const BackendConfig& config);
absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackendWithOptions(
    const Model& model, const BackendConfig& config, const XnnpackBackendOptions& options);

// Bytes of packed weights one expert of this shape takes (what the budget counts): every matrix
// padded to 16 output channels, plus a bias per output channel.
uint64_t XnnpackPackedFfnBytes(const FfnView& ffn);

// For tests and fflite-bench: bytes of routed experts resident now in an xnnpack backend, both
// forms (0 for any other backend).
uint64_t XnnpackResidentExpertBytes(Backend* backend);
// For fflite-bench, with time_routed_experts: seconds spent so far in routed experts (gather, FFN,
// scatter-add; not the router, routing or shared experts), over every MoE call (0 otherwise).
double XnnpackRoutedExpertSeconds(Backend* backend);
// For tests and fflite-bench: bytes routed experts have read so far, over every MoE call: for each
// batch of an expert's tokens, the bytes of the form it ran on (its packed weights, or its file
// weights on the direct path: XnnpackPackedFfnBytes and the file's bytes of its matrices), as the
// expert budget counts them (0 for any other backend).
uint64_t XnnpackRoutedExpertBytes(Backend* backend);
// For tests and fflite-bench: batches of routed experts (an expert's tokens in one pass) over
// every MoE call so far, and how many of them ran whole on one thread each
// (XnnpackBackendOptions::experts_alone); zeros for any other backend.
struct ExpertsAloneCount {
  uint64_t alone = 0, batches = 0;
};
ExpertsAloneCount XnnpackExpertsAlone(Backend* backend);
// For fflite-bench: value rows read and value rows held by the matrices read so far (the down
// projections from VALUE_ROWS of every call), and the same for the up rows of ReGLU FFNs on the
// direct path (computed only for the neurons whose gate fired), since creation; zeros for other
// backends.
struct ValueRowsRead {
  uint64_t read = 0, total = 0;
  uint64_t up_read = 0, up_total = 0;
};
ValueRowsRead XnnpackValueRowsRead(Backend* backend);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_XNNPACK_BACKEND_H_
