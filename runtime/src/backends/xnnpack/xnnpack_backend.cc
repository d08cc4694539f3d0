// xnnpack backend: the layer's orchestration (norm, residual, dense FFN, MoE routing and
// grouping, expert residency) over three matrix engines chosen per matrix (engines.h): XNNPACK's
// packed operators (packed_engine.cc), fflite's direct few-token kernel on the file's weights
// (direct_engine.cc) and the quantised kernels on the file's I8/I4 panels (quant_engine.cc).
//
// MoE: an expert is an FFN like a dense layer and is packed the same way (PackedFfn). The router
// (plus the shared-expert gate as one more row) is one f32 operator; each token's logits go to
// RouteToken in double, the (token, expert) pairs are grouped by a counting sort, and each active
// expert runs once over the gathered batch of its tokens, so at decode only the top-k experts'
// weights are read and at prefill each expert's weights are read once per call (see RunMoe). With
// a pool and many experts per thread in a call, each packed or quantised expert runs whole on one
// thread (RunExpertsAlone); otherwise its products are shared among the threads.
// Experts are prepared on first use; with an expert budget the least recently used forms are
// dropped (see Acquire and moe/residency.h).
//
// Few tokens per expert: direct kernel on the file's weights. An expert that gets at most
// `direct_max_tokens` (4 or 40, below) tokens in a call, every expert at decode, does not use its
// packed operators: fflite's own kernel (kernels_.gemv) reads the expert's row-major weights
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
// identical whatever the budget. The file pages that path reads are the expert's second resident
// form: the budget counts them and the LRU drops them (MADV_DONTNEED) like packed experts.
#include "backends/xnnpack/xnnpack_backend.h"

#include <xnnpack.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/aligned_buffer.h"
#include "base/status_macros.h"
#include "backends/layer_steps.h"
#include "backends/xnnpack/engines.h"
#include "backends/xnnpack/quant_engine.h"
#include "base/tsan.h"
#include "format/writer.h"
#include "moe/expert_counts.h"
#include "moe/grouping.h"
#include "moe/residency.h"
#include "moe/routing.h"

// ThreadSanitizer does not see the synchronisation inside pthreadpool (an uninstrumented system
// library: its own atomics and futexes), so it would report the job handed to the pool and the
// buffers the workers write as races. These annotations state the happens-before edges the pool
// provides: everything before pthreadpool_parallelize_1d happens before each task, and each task
// happens before its return.
// (base/tsan.h: FFLITE_TSAN_ACQUIRE / FFLITE_TSAN_RELEASE.)

namespace fflite {

namespace {

// Row stride (in floats) of the direct kernel's token inputs: n plus one cache line, never a
// multiple of 4 KiB. When token rows are a multiple of 4 KiB apart (d_model 1024 or 2048 in f32)
// every token's x line and every weight row of a block fall in the same L1 set and evict each
// other: measured on mixtral-mini's up matrix [3584, 1024] at 32 tokens, the AVX-512 kernel ran at
// 71.5 GFLOP/s with stride 1024 and 92.7 with 1040 (AVX2: 66.4 and 85.3).
size_t DirectStride(size_t n) {
  size_t stride = n + 16;
  if ((stride * sizeof(float)) % 4096 == 0) stride += 16;
  return stride;
}

// Every tensor of an FFN (absent ones included: !present()).
std::array<const TensorView*, 6> FfnTensors(const FfnView& f) {
  return {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias};
}

// The expert's bytes in the file (what its mapped form keeps resident).
uint64_t FileBytes(const FfnView& f) {
  uint64_t bytes = 0;
  for (const TensorView* t : FfnTensors(f)) {
    if (t->present()) bytes += t->size;
  }
  return bytes;
}

struct ThreadpoolDeleter {
  void operator()(pthreadpool_t pool) const { pthreadpool_destroy(pool); }
};
using ThreadpoolPtr = std::unique_ptr<pthreadpool, ThreadpoolDeleter>;

// One FFN (a dense layer's, a routed expert's or a shared expert's) as packed operators. A
// quantised matrix (I8/I4) is not packed: the quantised engine reads it from the file (its
// Matrix stays empty, and its bias is kept here as f32).
struct PackedFfn {
  const FfnView* view = nullptr;
  PackedMatrix up, gate, down;  // gate: only when gated (each empty when quantised)
  bool gated = false;
  F32ActivationFn activation = nullptr;  // nullptr: fused into `up` (non-gated ReLU clamp)
  size_t d_ff = 0;                       // d_ff_padded: the padding is exact (zeros)
  // f32 biases of the quantised matrices when the file stores them in f16/bf16 (else empty).
  std::vector<float> up_bias, gate_bias, down_bias;
};

absl::Status PackFfn(const FfnView& f, const Kernels& kernels, const PackChoice& choice,
                     const EngineContext& ctx, const std::string& name, PackedFfn* p) {
  p->view = &f;
  p->gated = f.gated;
  p->d_ff = f.d_ff_padded;
  // A plain ReLU FFN needs no activation pass: the up operator clamps at 0.
  const bool fuse_relu = !f.gated && f.activation == Activation::RELU && !f.up.quantized();
  p->activation = fuse_relu ? nullptr : kernels.Activation(f.activation);
  const float inf = std::numeric_limits<float>::infinity();
  auto pack = [&](const TensorView& w, const TensorView& b, float out_min, const char* what,
                  PackedMatrix* m, std::vector<float>* bias) {
    if (w.quantized()) {
      if (b.present() && b.dtype != DType::F32) AsF32(b, bias);
      return absl::OkStatus();
    }
    return PackMatrix(w, b, out_min, choice, ctx, name + what, m);
  };
  FFLITE_RETURN_IF_ERROR(
      pack(f.up, f.up_bias, fuse_relu ? 0.0f : -inf, ".up", &p->up, &p->up_bias));
  if (f.gated) {
    FFLITE_RETURN_IF_ERROR(pack(f.gate, f.gate_bias, -inf, ".gate", &p->gate, &p->gate_bias));
  }
  return pack(f.down, f.down_bias, -inf, ".down", &p->down, &p->down_bias);
}

// The packed operators own copies of the weights: hand the file's pages back. Another session
// of the same model may be reading these pages at this moment (packing the same expert): that is
// safe, because the mapping is private and read-only, so MADV_DONTNEED only drops page-table
// entries of clean file pages, and a later touch (in any thread) faults them in again from the
// page cache or the file, with the same contents.
// `keep_quantized`: leave the pages of quantised matrices, which are read in place.
void ReleaseFfnPages(const Model& model, const FfnView& f, bool keep_quantized = false) {
  for (const TensorView* t : FfnTensors(f)) {
    if (!(keep_quantized && t->quantized())) model.ReleaseTensorPages(*t);
  }
}

void PopulateFfnPages(const Model& model, const FfnView& f) {
  for (const TensorView* t : FfnTensors(f)) model.PopulateTensorPages(*t);
}

// A bias for the direct kernel: absent, the file's f32 values, or an f32 copy of f16/bf16 ones.
const float* DirectBias(const TensorView& b, const std::vector<float>& converted) {
  if (!b.present()) return nullptr;
  if (!converted.empty()) return converted.data();
  return reinterpret_cast<const float*>(b.data);
}

// An FFN as the direct kernel and the quantised engine run it: on the file's weights, with f32
// copies of the biases the file stores in f16/bf16 (else empty: the file's own are used).
struct FileFfn {
  const FfnView* view = nullptr;
  std::vector<float> up_bias, gate_bias, down_bias;

  void Init(const FfnView& f) {
    view = &f;
    for (auto [t, converted] : {std::pair{&f.up_bias, &up_bias}, std::pair{&f.gate_bias, &gate_bias},
                                std::pair{&f.down_bias, &down_bias}}) {
      if (t->present() && t->dtype != DType::F32) AsF32(*t, converted);
    }
  }
};

// A routed expert. It is held in memory in up to two forms, each counted by the budget and on the
// LRU list on its own (see Acquire): its packed operators, for batches of more than
// expert_direct_max_ tokens, and its file pages, read by the direct kernel for smaller ones.
struct ExpertSlot : FileFfn {
  size_t layer = 0, expert = 0;
  std::unique_ptr<PackedFfn> ffn;  // while the packed form is resident
  bool all_quantized = false;      // always runs on the file's weights (never packed)
};

// One form of one expert on the residency list: entry 2·slot + kPackedForm / kMappedForm.
enum ExpertForm : size_t { kPackedForm = 0, kMappedForm = 1 };

// What an MoE layer runs besides its routed experts.
struct MoePlan {
  RoutingParams routing;
  uint32_t num_experts = 0, top_k = 0;
  // logits[n, router_out] = h · [router; shared_gate]ᵀ + [router_bias; 0]: the shared-expert gate
  // (Qwen2-MoE) rides along as one more output row of the router's operator.
  PackedMatrix router;
  size_t router_out = 0;  // num_experts, + 1 with a shared-expert gate
  bool shared_gate = false;
  size_t first_slot = 0;  // the layer's experts are slots_[first_slot, first_slot + num_experts)
  std::vector<PackedFfn> shared;
};

// What one layer runs.
struct LayerPlan {
  bool moe = false;
  // Dense layers, prepared on first use (nothing is packed at session creation):
  //  - f16/bf16 float matrices (`direct_small`): calls of at most direct_max_ tokens run the
  //    direct kernel on the file's rows, which reads half the bytes of packed f32; larger calls
  //    pack the float matrices the first time. The path depends only on the call's token count.
  //  - f32: packed on the first call of any size (the same bytes either way: one form in memory,
  //    the file's pages released after packing).
  //  - every matrix quantised: the quantised engine on the file, never packed (`packed` from
  //    the start: PackFfn only converts the biases).
  PackedFfn ffn;
  bool packed = false;
  bool direct_small = false;
  FileFfn file;
  MoePlan moe_plan;
  NormKind norm = NormKind::INVALID;  // INVALID: no norm
  bool pre_norm = false;
  float eps = 0.0f;
  AlignedBuffer<float> norm_weight;  // [d_model], f32, unit offset added
  AlignedBuffer<float> norm_bias;    // [d_model] or empty
  bool residual = false;
};

// y[i] += a · x[i]   x, y: [n], not overlapping.
inline void Axpy(size_t n, float a, const float* __restrict x, float* __restrict y) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The engine and kernels that pack float matrices (see XnnpackBackendOptions::packed_engine).
PackChoice ChoosePackEngine(const XnnpackBackendOptions& options, size_t slice_bytes) {
  PackChoice choice;
  choice.slice_bytes = slice_bytes;
  const GemmKernel& f32 = options.gemm_f32 != nullptr ? *options.gemm_f32
                                                      : BestGemmKernel(DType::F32);
  const GemmKernel& bf16 = options.gemm_bf16 != nullptr ? *options.gemm_bf16
                                                        : BestGemmKernel(DType::BF16);
  bool gemm = options.packed_engine == XnnpackBackendOptions::PackedEngine::kGemm;
  if (options.packed_engine == XnnpackBackendOptions::PackedEngine::kAuto) {
    // Measured faster than XNNPACK on x86 (AVX2, AVX-512; see gemm_engine.cc). On ARM XNNPACK's
    // assembly kernels stay until the NEON microkernel is measured on hardware.
    gemm = std::string(f32.isa) == "avx512" || std::string(f32.isa) == "avx2";
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
    choice.gemm_f16w = HalfPanelKernel(f32, DType::F16);
    choice.gemm_bf16w = HalfPanelKernel(f32, DType::BF16);
  }
  using GemmAhead = XnnpackBackendOptions::GemmAhead;
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

// Bytes of packed weights one FFN takes with `choice` (what the budget counts).
uint64_t PackedFfnBytes(const FfnView& f, const PackChoice& choice) {
  // A quantised matrix is not packed: the packed form reads it from the file.
  auto bytes = [&](const TensorView& w, uint64_t out, uint64_t in) {
    return w.quantized() ? w.size : PackedMatrixBytes(out, in, w.dtype, choice);
  };
  const uint64_t d = f.d_model, ff = f.d_ff_padded;
  return bytes(f.up, ff, d) + (f.gated ? bytes(f.gate, ff, d) : 0) + bytes(f.down, d, ff);
}

// The default direct_max_tokens per engine (see the header comment): dense f16/bf16 layers and
// routed experts with XNNPACK, dense layers and routed experts with the gemm engine.
constexpr size_t kGemmDirectMaxTokens = 8;
constexpr size_t kGemmExpertDirectMaxTokens = 4;
constexpr size_t kXnnpackDirectMaxTokens = 40;
// Experts alone (RunExpertsAlone): at least this many such experts per thread in a call. With
// fewer, the threads' last experts would end unevenly (a thread waits up to a whole expert).
constexpr size_t kExpertsAlonePerThread = 4;

class XnnpackBackend : public Backend {
 public:
  XnnpackBackend(const Model& model, const Kernels& kernels, const QGemvKernel& qgemv,
                 const QGemmKernel& qgemm, size_t quant_gemm_min_tokens)
      : model_(model),
        kernels_(kernels),
        quant_(qgemv, qgemm, quant_gemm_min_tokens),
        quant_gemm_min_tokens_(quant_gemm_min_tokens) {}

  absl::Status Init(const BackendConfig& config, const XnnpackBackendOptions& options) {
    FFLITE_RETURN_IF_ERROR(InitializeXnnpack());
    threads_ = static_cast<size_t>(std::max(1, config.num_threads));
    if (config.num_threads > 1) {
      threadpool_.reset(pthreadpool_create(static_cast<size_t>(config.num_threads)));
      if (threadpool_ == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("creating a pool of %d threads failed", config.num_threads));
      }
    }
    choice_ = ChoosePackEngine(options, options.slice_bytes);
    expert_choice_ = ChoosePackEngine(options, options.expert_slice_bytes);
    const uint64_t budget = config.expert_budget_bytes;
    const size_t d = model_.d_model();
    chunk_ = std::max<size_t>(1, std::min(config.max_tokens, options.token_chunk));
    // MoE layers route up to 4 chunks of tokens at once, so that each expert sees ~4x more of
    // them per batch (at 128 tokens, 8 experts, top-2: 32 per expert instead of 8 with 32-token
    // chunks); an expert's batch still passes through its FFN in chunks of `chunk_`.
    moe_chunk_ = std::max<size_t>(1, std::min(config.max_tokens, 4 * options.token_chunk));
    size_t direct = options.direct_max_tokens, expert_direct = direct;
    if (direct == XnnpackBackendOptions::kDirectTokensAuto) {
      const bool gemm = expert_choice_.gemm_f32 != nullptr;
      direct = gemm ? kGemmDirectMaxTokens : kXnnpackDirectMaxTokens;
      expert_direct = gemm ? kGemmExpertDirectMaxTokens : kXnnpackDirectMaxTokens;
    }
    direct_max_ = std::min(direct, chunk_);
    expert_direct_max_ = std::min(expert_direct, direct_max_);
    time_routed_ = options.time_routed_experts;
    experts_alone_ = options.experts_alone;
    value_rows_dense_fraction_ = options.value_rows_dense_fraction;
    size_t max_ff = 0, max_experts = 0, max_k = 0, max_groups = 1, max_router_out = 0;
    size_t max_expert_ff = 0;
    bool any_moe = false, any_quantized = false, any_quantized_expert = false;
    bool any_direct_dense = false;
    plans_.resize(model_.layers().size());
    for (size_t i = 0; i < model_.layers().size(); ++i) {
      const LayerView& l = model_.layers()[i];
      LayerPlan& p = plans_[i];
      FFLITE_RETURN_IF_ERROR(PlanNorm(l, i, &p));
      if (l.kind == LayerKind::kMoe) {
        any_moe = true;
        FFLITE_RETURN_IF_ERROR(PlanMoe(l, i, &p));
        const MoeView& m = l.moe;
        max_ff = std::max<size_t>(max_ff, m.experts[0].d_ff_padded);
        max_expert_ff = std::max<size_t>(max_expert_ff, m.experts[0].d_ff_padded);
        for (const FfnView& s : m.shared_experts) max_ff = std::max<size_t>(max_ff, s.d_ff_padded);
        max_experts = std::max<size_t>(max_experts, m.num_experts);
        max_k = std::max<size_t>(max_k, m.top_k);
        max_groups = std::max<size_t>(max_groups, m.n_group);
        max_router_out = std::max(max_router_out, p.moe_plan.router_out);
        for (const FfnView& f : m.experts) {
          any_quantized |= f.AnyQuantized();
          any_quantized_expert |= f.AllQuantized();
        }
        for (const FfnView& f : m.shared_experts) {
          any_quantized |= f.AnyQuantized();
        }
      } else {
        const FfnView& f = l.ffn;
        p.file.Init(f);
        if (f.AllQuantized()) {
          // Nothing to pack: PackFfn converts the biases only.
          FFLITE_RETURN_IF_ERROR(PackFfn(f, kernels_, choice_, Context(),
                                         absl::StrFormat("layers[%d].ffn", i), &p.ffn));
          p.packed = true;
        } else {
          p.direct_small = true;
          for (const TensorView* t : {&f.up, &f.gate, &f.down}) {
            if (t->present() && !t->quantized() && t->dtype == DType::F32) p.direct_small = false;
          }
          // Value rows: few-token calls read only the rows of the neurons that fire, which the
          // packed form cannot do, whatever the dtype.
          p.direct_small |= f.down.value_rows();
          any_direct_dense |= p.direct_small;
        }
        max_ff = std::max<size_t>(max_ff, f.d_ff_padded);
        any_quantized |= f.AnyQuantized();
      }
    }
    // Norms, routers and shared experts are copied or packed now: hand their file pages back.
    // (Dense layers' pages are released when they are packed, see PackDense.)
    for (const LayerView& l : model_.layers()) {
      model_.ReleaseTensorPages(l.norm.weight);
      model_.ReleaseTensorPages(l.norm.bias);
      if (l.kind == LayerKind::kDense) continue;
      for (const TensorView* t :
           {&l.moe.router, &l.moe.router_bias, &l.moe.score_correction_bias,
            &l.moe.shared_expert_gate}) {
        model_.ReleaseTensorPages(*t);
      }
      for (const FfnView& s : l.moe.shared_experts) {
        ReleaseFfnPages(model_, s, /*keep_quantized=*/true);
      }
    }
    // Scratch, sized once: Run allocates nothing (but for packing an expert on first use under
    // a budget, by design).
    const size_t rows = any_moe ? std::max(chunk_, moe_chunk_) : chunk_;
    if (max_ff > 0) {
      if (max_ff > std::numeric_limits<size_t>::max() / sizeof(float) / 2 / rows ||
          d > std::numeric_limits<size_t>::max() / sizeof(float) / 2 / rows) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "scratch of %d tokens x d_ff %d does not fit the address space", rows, max_ff));
      }
      // The direct kernel's [direct_max_, DirectStride(d_ff)] rows share hidden_ and gate_
      // (quantised experts run that path for up to chunk_ tokens).
      const size_t direct_rows = any_quantized_expert ? chunk_ : direct_max_;
      const size_t ff_elems = std::max(
          chunk_ * max_ff, any_moe || any_direct_dense ? direct_rows * DirectStride(max_ff) : 0);
      active_.resize(max_ff);  // value rows: the neurons that fired
      const bool ok = in_.Allocate(rows * d, kXnnTailBytes) &&
                      hidden_.Allocate(ff_elems, kXnnTailBytes) && gate_.Allocate(ff_elems) &&
                      out_.Allocate(rows * d);
      if (!ok) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "allocating scratch for %d tokens (d_model %d, d_ff %d) failed", rows, d, max_ff));
      }
    }
    if ((any_moe || any_direct_dense) &&
        !gathered_.Allocate(chunk_ * DirectStride(d), kXnnTailBytes)) {
      return absl::ResourceExhaustedError("allocating the direct kernel's scratch failed");
    }
    if (any_moe) {
      const bool ok = expert_out_.Allocate(chunk_ * d) &&
                      logits_.Allocate(moe_chunk_ * max_router_out);
      if (!ok) return absl::ResourceExhaustedError("allocating MoE scratch failed");
      logits_f64_.resize(max_experts);
      routed_experts_.resize(moe_chunk_ * max_k);
      routed_weights_.resize(moe_chunk_ * max_k);
      groups_.Reserve(static_cast<uint32_t>(max_experts), moe_chunk_, static_cast<uint32_t>(max_k));
      route_scratch_.Reserve(static_cast<uint32_t>(max_experts), static_cast<uint32_t>(max_groups));
    }
    if (any_quantized && !quant_.Reserve(chunk_, std::max<size_t>(d, max_ff))) {
      return absl::ResourceExhaustedError("allocating the quantised engine's scratch failed");
    }
    // The gemm engine packs the activations of a product of up to chunk_ tokens (an expert's
    // batch passes in chunks of chunk_ too) over up to max(d_model, d_ff) inputs.
    size_t gemm_units = 0;
    for (const PackChoice* c : {&choice_, &expert_choice_}) {
      for (const GemmKernel* g : {c->gemm_f32, c->gemm_bf16}) {
        if (g != nullptr) {
          // Plus one partial tile per extra thread for RunGemmFfnByTokens.
          const size_t in = std::max(d, max_ff);
          gemm_units = std::max(gemm_units, GemmScratchUnits(*g, chunk_, in) +
                                                GemmFfnExtraScratchUnits(*g, threads_, in));
        }
      }
    }
    if (gemm_units > 0 && !gemm_scratch_.Allocate(gemm_units, 0, /*zero=*/false)) {
      return absl::ResourceExhaustedError("allocating the gemm engine's scratch failed");
    }
    FFLITE_RETURN_IF_ERROR(
        ReserveExpertsAlone(max_experts, max_k, max_expert_ff, any_quantized_expert));
    residency_.Init(2 * slots_.size(), budget);
    for (size_t i = 0; i < slots_.size(); ++i) {
      residency_.SetBytes(2 * i + kPackedForm, PackedFfnBytes(*slots_[i].view, expert_choice_));
      residency_.SetBytes(2 * i + kMappedForm, FileBytes(*slots_[i].view));
    }
    counts_.Init(model_);
    // Routed experts are prepared lazily, budget or not: an expert's packed form is made the
    // first time a call gives it more than expert_direct_max_ tokens, its mapped form the first
    // time it gets fewer. Experts that only ever see a few tokens are never packed (an unbudgeted
    // qwen-moe session used to pack 2 GB at creation that decode never read).
    return absl::OkStatus();
  }

  ExpertCounts* expert_counts() override { return &counts_; }
  uint64_t resident_expert_bytes() const { return residency_.resident_bytes(); }
  double routed_seconds() const { return routed_seconds_; }
  uint64_t routed_bytes() const { return routed_bytes_; }
  ValueRowsRead value_rows_read() const { return value_rows_; }
  ExpertsAloneCount experts_alone_count() const { return experts_alone_count_; }

  absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output) override {
    LayerPlan& p = plans_[layer];
    const absl::Status status =
        p.moe ? RunMoe(layer, p, input, n_tokens, output) : RunDense(layer, p, input, n_tokens,
                                                                     output);
    if (pool_awake_) {
      // The last parallel loop was not the Run's last operation: put the workers to sleep.
      pthreadpool_parallelize_1d(threadpool_.get(), [](void*, size_t) {}, nullptr, threads_,
                                 PTHREADPOOL_FLAG_YIELD_WORKERS);
      pool_awake_ = false;
    }
    return status;
  }

 private:
  absl::Status RunDense(size_t layer, LayerPlan& p, const float* input, size_t n_tokens,
                        float* output) {
    const size_t d = model_.d_model();
    for (size_t t0 = 0; t0 < n_tokens; t0 += chunk_) {
      const size_t n = std::min(chunk_, n_tokens - t0);
      const float* x = input + t0 * d;  // [n, d], the caller's
      const bool last = t0 + n == n_tokens;
      const bool direct = p.direct_small && n <= direct_max_;
      if (!direct && !p.packed) FFLITE_RETURN_IF_ERROR(PackDense(layer, &p));
      const float* scale = neuron_scales_.Get(layer, -1);
      const LayerCapture* capture = neuron_capture_.Get(layer);
      GemmFfn whole;
      if (!direct && SplitTokens(p.ffn, n, &whole)) {
        whole.scale = scale;
        // Each thread also norms its tokens before and adds the residual after.
        DenseRows rows{this, &p, x, output + t0 * d};
        RunGemmFfnByTokens(whole, n, in_.data(), gate_.data(), hidden_.data(), out_.data(),
                           Context(), last, GemmFfnRows{&DenseRows::Before, &DenseRows::After,
                                                        &rows});
        if (capture != nullptr) capture->DenseRows(t0, hidden_.data(), p.ffn.d_ff, n);
        continue;
      }
      PreNorm(p, x, n);
      // f = FFN(h)   [n, d]
      if (direct) {
        // The file's f16/bf16 rows; tokens at DirectStride (rows 4 KiB apart alias in L1).
        const float* src = in_.data();
        size_t stride = d;
        if (n > 1) {
          stride = DirectStride(d);
          for (size_t r = 0; r < n; ++r) {
            std::memcpy(gathered_.data() + r * stride, in_.data() + r * d, d * sizeof(float));
          }
          src = gathered_.data();
        }
        RunFfnDirect(p.file, n, src, stride, out_.data(), last, scale);
      } else {
        FFLITE_RETURN_IF_ERROR(RunFfn(p.ffn, n, in_.data(), out_.data(), last, scale));
      }
      if (capture != nullptr) {
        capture->DenseRows(t0, hidden_.data(), HiddenStride(direct, p.file.view->d_ff_padded), n);
      }
      Finish(p, x, n, output + t0 * d);
    }
    return absl::OkStatus();
  }

  absl::Status PlanNorm(const LayerView& l, size_t index, LayerPlan* p) {
    p->residual = l.residual;
    if (!l.norm.present) return absl::OkStatus();
    const std::string name = absl::StrFormat("layers[%d].norm", index);
    const size_t d = model_.d_model();
    p->norm = l.norm.kind;
    p->pre_norm = StepsOf(l).pre_norm;
    p->eps = l.norm.eps;
    if (!p->norm_weight.Allocate(d)) return absl::ResourceExhaustedError(name + ": weight");
    NormWeightAsApplied(l.norm, p->norm_weight.data());
    std::vector<float> storage;
    if (l.norm.bias.present()) {
      const float* b = AsF32(l.norm.bias, &storage);
      if (!p->norm_bias.Allocate(d)) return absl::ResourceExhaustedError(name + ": bias");
      std::memcpy(p->norm_bias.data(), b, d * sizeof(float));
    }
    return absl::OkStatus();
  }

  absl::Status PlanMoe(const LayerView& l, size_t index, LayerPlan* p) {
    const MoeView& m = l.moe;
    MoePlan& mp = p->moe_plan;
    p->moe = true;
    const std::string name = absl::StrFormat("layers[%d].moe", index);
    const size_t d = model_.d_model(), e = m.num_experts;
    mp.routing = MakeRoutingParams(m);
    mp.num_experts = m.num_experts;
    mp.top_k = m.top_k;
    mp.shared_gate = m.shared_expert_gate.present();
    mp.router_out = e + (mp.shared_gate ? 1 : 0);
    // [router_out, d] f32 weights and [router_out] bias (or none).
    std::vector<float> w(mp.router_out * d), b;
    ConvertElements(m.router.dtype, m.router.data, DType::F32,
                    reinterpret_cast<uint8_t*>(w.data()), e * d);
    if (mp.shared_gate) {
      ConvertElements(m.shared_expert_gate.dtype, m.shared_expert_gate.data, DType::F32,
                      reinterpret_cast<uint8_t*>(w.data() + e * d), d);
    }
    if (m.router_bias.present()) {
      b.assign(mp.router_out, 0.0f);
      ConvertElements(m.router_bias.dtype, m.router_bias.data, DType::F32,
                      reinterpret_cast<uint8_t*>(b.data()), e);
    }
    // One operator (a few KiB to a few hundred KiB), run on the caller's thread.
    FFLITE_RETURN_IF_ERROR(PackMatrixF32(w.data(), b.empty() ? nullptr : b.data(), mp.router_out,
                                         d, -std::numeric_limits<float>::infinity(),
                                         /*slice_bytes=*/0, EngineContext{}, name + ".router",
                                         &mp.router));
    mp.shared.resize(m.shared_experts.size());
    for (size_t s = 0; s < m.shared_experts.size(); ++s) {
      FFLITE_RETURN_IF_ERROR(PackFfn(m.shared_experts[s], kernels_, choice_, Context(),
                                     absl::StrFormat("%s.shared_experts[%d]", name, s),
                                     &mp.shared[s]));
    }
    if (slots_.size() + e > static_cast<size_t>(std::numeric_limits<int32_t>::max()) / 2) {
      return absl::ResourceExhaustedError(name + ": too many experts");
    }
    mp.first_slot = slots_.size();
    for (size_t i = 0; i < e; ++i) {
      const FfnView& f = m.experts[i];
      ExpertSlot slot;
      slot.layer = index;
      slot.expert = i;
      slot.all_quantized = f.AllQuantized();
      slot.Init(f);
      slots_.push_back(std::move(slot));
    }
    return absl::OkStatus();
  }

  // in_[n, d] = PreNorm(x) or x: XNNPACK may read past the end of its input, which must never be
  // the caller's buffer.
  void PreNorm(const LayerPlan& p, const float* x, size_t n) { PreNormRows(p, x, 0, n); }

  // y[n, d] = [x +] out_, then the post-norm if any.
  void Finish(const LayerPlan& p, const float* x, size_t n, float* y) { FinishRows(p, x, 0, n, y); }

  // The same on tokens [t0, t1) of x, in_, out_ and y.
  void PreNormRows(const LayerPlan& p, const float* x, size_t t0, size_t t1) {
    const size_t d = model_.d_model();
    if (p.norm != NormKind::INVALID && p.pre_norm) {
      for (size_t t = t0; t < t1; ++t) Normalize(p, x + t * d, in_.data() + t * d);
    } else {
      std::memcpy(in_.data() + t0 * d, x + t0 * d, (t1 - t0) * d * sizeof(float));
    }
  }
  void FinishRows(const LayerPlan& p, const float* x, size_t t0, size_t t1, float* y) {
    const size_t d = model_.d_model();
    const bool post = p.norm != NormKind::INVALID && !p.pre_norm;
    float* out = out_.data();
    if (p.residual) {
      F32Add((t1 - t0) * d, out + t0 * d, x + t0 * d, (post ? out : y) + t0 * d);
    } else if (!post) {
      std::memcpy(y + t0 * d, out + t0 * d, (t1 - t0) * d * sizeof(float));
    }
    if (post) {
      for (size_t t = t0; t < t1; ++t) Normalize(p, out + t * d, y + t * d);
    }
  }

  // A dense layer's per-token work around a token-split FFN, on each range's thread.
  struct DenseRows {
    XnnpackBackend* backend;
    const LayerPlan* plan;
    const float* x;  // the chunk's input, [n, d]
    float* y;        // the chunk's output, [n, d]
    static void Before(void* context, size_t t0, size_t t1) {
      const auto& r = *static_cast<const DenseRows*>(context);
      r.backend->PreNormRows(*r.plan, r.x, t0, t1);
    }
    static void After(void* context, size_t t0, size_t t1) {
      const auto& r = *static_cast<const DenseRows*>(context);
      r.backend->FinishRows(*r.plan, r.x, t0, t1, r.y);
    }
  };

  // out[n, d] = down( act(in·gateᵀ + b_gate) ⊙ (in·upᵀ + b_up) )  or  down( act(in·upᵀ + b_up) )
  // in: [n, d] + XNN_EXTRA_BYTES; n <= chunk_; hidden_ and gate_ hold [n, d_ff].
  // A quantised matrix goes to the quantised engine (same strides), the others to their operators.
  // scale: neuron edits [d_ff_padded] or nullptr.
  absl::Status RunFfn(const PackedFfn& f, size_t n, const float* in, float* out, bool last,
                      const float* scale) {
    const FfnView& v = *f.view;
    const size_t d = model_.d_model(), ff = f.d_ff;
    GemmFfn whole;
    if (SplitTokens(f, n, &whole)) {
      whole.scale = scale;
      RunGemmFfnByTokens(whole, n, in, gate_.data(), hidden_.data(), out, Context(), last);
      return absl::OkStatus();
    }
    // The activation (and the neuron edits) ride on the up product (gate first when gated): the
    // gemm and quantised engines apply them on each thread's outputs while they are in cache, the
    // others after the product.
    FFLITE_RETURN_IF_ERROR(GateUp(v, &f.gate, &f.up, DirectBias(v.gate_bias, f.gate_bias),
                                  DirectBias(v.up_bias, f.up_bias), n, in, d, ff,
                                  Epilogue{f.activation, nullptr, scale}));
    return Multiply(v.down, &f.down, DirectBias(v.down_bias, f.down_bias), n, hidden_.data(), ff,
                    out, d, last, {});
  }

  // hidden_[n, stride] = act(gate) ⊙ up (gated) or act(up), then the epilogue's neuron edits, of
  // x[n, x_stride] through v's gate (when gated) and up: gate's product into gate_ first, the
  // activation riding on up's. Quantised alike, the two are one pass of the quantised engine
  // (QuantGateUp). gate_packed, up_packed: Multiply's `packed` for each.
  absl::Status GateUp(const FfnView& v, const PackedMatrix* gate_packed,
                      const PackedMatrix* up_packed, const float* gate_bias, const float* up_bias,
                      size_t n, const float* x, size_t x_stride, size_t stride, Epilogue act) {
    if (v.up.quantized() && (!v.gated || v.gate.quantized())) {
      QuantGateUp(quant_, v, gate_bias, up_bias, n, x, x_stride, gate_.data(), hidden_.data(),
                  stride, Context(), act);
      return absl::OkStatus();
    }
    if (!v.gated) {
      return Multiply(v.up, up_packed, up_bias, n, x, x_stride, hidden_.data(), stride,
                      /*last=*/false, act);
    }
    act.gate = gate_.data();
    FFLITE_RETURN_IF_ERROR(Multiply(v.gate, gate_packed, gate_bias, n, x, x_stride, gate_.data(),
                                    stride, /*last=*/false, {}));
    return Multiply(v.up, up_packed, up_bias, n, x, x_stride, hidden_.data(), stride,
                    /*last=*/false, act);
  }

  // GateUp for quantised matrices (up, and gate when gated), by `quant` on ctx, into gate and
  // hidden [n, stride]: gate and up in one pass where QuantEngine::CanPair, else gate's product
  // then up's (as Multiply runs each), the activation riding on up's. GateUp's quantised case,
  // and a quantised expert's alone (RunQuantExpertHere) with its own engine and buffers.
  static void QuantGateUp(QuantEngine& quant, const FfnView& v, const float* gate_bias,
                          const float* up_bias, size_t n, const float* x, size_t x_stride,
                          float* gate, float* hidden, size_t stride, const EngineContext& ctx,
                          Epilogue act) {
    if (!v.gated) {
      quant.Run(v.up, up_bias, n, x, x_stride, hidden, stride, ctx, /*last=*/false, act);
      return;
    }
    act.gate = gate;
    if (QuantEngine::CanPair(v.gate, v.up)) {
      quant.RunPair(v.gate, gate_bias, gate, v.up, up_bias, n, x, x_stride, hidden, stride, ctx,
                    /*last=*/false, act);
      return;
    }
    quant.Run(v.gate, gate_bias, n, x, x_stride, gate, stride, ctx, /*last=*/false, {});
    quant.Run(v.up, up_bias, n, x, x_stride, hidden, stride, ctx, /*last=*/false, act);
  }

  // Whether f runs n tokens split among the threads (RunGemmFfnByTokens): many tokens, every
  // matrix on the gemm engine. *whole: its matrices.
  bool SplitTokens(const PackedFfn& f, size_t n, GemmFfn* whole) {
    return WholeGemm(f, whole) && GemmFfnByTokens(*whole, n, Context());
  }

  // Whether every matrix of f is on the gemm engine as one FFN (GemmFfnWhole); *whole: them.
  static bool WholeGemm(const PackedFfn& f, GemmFfn* whole) {
    const FfnView& v = *f.view;
    const auto gemm = [](const TensorView& w, const PackedMatrix& m) {
      return !m.empty() && !w.quantized() && m.gemm != nullptr ? &m : nullptr;
    };
    *whole = GemmFfn{f.gated ? gemm(v.gate, f.gate) : nullptr, gemm(v.up, f.up),
                     gemm(v.down, f.down), f.activation};
    return (!f.gated || whole->gate != nullptr) && GemmFfnWhole(*whole);
  }

  // Experts alone. With a pool and many routed experts active in a call, splitting each expert's
  // three products among the threads costs two waits per product (its activations packed or
  // quantised, then its rows) and leaves the gathers and the scatter-add on one thread: qwen-moe
  // at 128 tokens has ~60 experts of ~8 tokens each, 360 waits per call. Instead, when a call
  // gives at least kExpertsAlonePerThread such experts per thread (at most chunk_ tokens each:
  // packed ones, with more than expert_direct_max_ tokens and every matrix on the gemm engine, or
  // quantised ones on the file's weights), each of them runs whole on one thread (gather, gate,
  // up, activation, down: RunGemmFfnHere, or RunQuantExpertHere on the quantised engine), the
  // threads taking them largest first from a shared counter; one wait in all. Their outputs land
  // in routed_out_ at their group's rows and RunMoe adds them into the sum in expert order with
  // the others, so the bits are the same as the shared products'. Each task has its own scratch:
  // task 0 the session's (gathered_, gate_, hidden_, gemm_scratch_, quant_), the others
  // task_scratch_. Under a budget, only when this call's experts fit it together (each must stay
  // resident until every task is done).
  struct ExpertAlone {
    uint32_t expert;
    size_t count;
    GemmFfn ffn;                     // packed: its matrices (and neuron edits)
    const FileFfn* file = nullptr;   // quantised: its file weights (then ffn.scale the edits)
  };
  struct TaskScratch {
    float* x;       // [chunk, DirectStride(d_model)]: the expert's tokens, gathered
    float* gate;    // [chunk, DirectStride(d_ff)]
    float* hidden;  // [chunk, DirectStride(d_ff)]
    uint32_t* gemm; // the gemm engine's packed activations (nullptr: no gemm engine)
    QuantEngine* quant;  // its scratch for quantised experts (nullptr: none)
  };
  struct ExpertsAloneJob {
    XnnpackBackend* backend;
    const ExpertAlone* experts;
    size_t count;
    std::atomic<size_t> next{0};
    const TaskScratch* scratch;  // [threads]
  };

  static void RunExpertsAloneTask(void* context, size_t task) {
    auto& job = *static_cast<ExpertsAloneJob*>(context);
    FFLITE_TSAN_ACQUIRE(context);
    const TaskScratch& s = job.scratch[task];
    for (size_t i = job.next.fetch_add(1); i < job.count; i = job.next.fetch_add(1)) {
      job.backend->RunExpertAlone(job.experts[i], s);
    }
    FFLITE_TSAN_RELEASE(context);
  }

  // One expert of RunExpertsAlone on the calling thread, with task scratch s: its tokens of in_
  // gathered, its FFN, the output into routed_out_ at its group's rows.
  void RunExpertAlone(const ExpertAlone& a, const TaskScratch& s) {
    const size_t d = model_.d_model(), offset = groups_.offsets[a.expert];
    const uint32_t* tokens = groups_.tokens.data() + offset;
    // Quantised experts take their tokens DirectStride apart, as on the shared path.
    const size_t stride = a.file != nullptr ? DirectStride(d) : d;
    for (size_t r = 0; r < a.count; ++r) {
      std::memcpy(s.x + r * stride, in_.data() + tokens[r] * d, d * sizeof(float));
    }
    float* out = routed_out_.data() + offset * d;
    if (a.file == nullptr) {
      RunGemmFfnHere(a.ffn, a.count, s.x, d, s.gate, s.hidden, out, s.gemm);
    } else {
      RunQuantExpertHere(*a.file, a.count, s.x, stride, s.gate, s.hidden, out, a.ffn.scale,
                         *s.quant);
    }
  }

  // A quantised expert's FFN on the calling thread alone, by `quant`: what RunFfnDirect does for
  // it (GateUp, then Multiply of down on the quantised engine), the same bits. in [c, in_stride];
  // gate and hidden [c, DirectStride(d_ff)]; out [c, d_model].
  void RunQuantExpertHere(const FileFfn& s, size_t c, const float* in, size_t in_stride,
                          float* gate, float* hidden, float* out, const float* scale,
                          QuantEngine& quant) const {
    const FfnView& f = *s.view;
    const size_t hs = DirectStride(f.d_ff_padded);
    const EngineContext here;  // no pool: the calling thread
    QuantGateUp(quant, f, DirectBias(f.gate_bias, s.gate_bias), DirectBias(f.up_bias, s.up_bias),
                c, in, in_stride, gate, hidden, hs, here,
                Epilogue{kernels_.Activation(f.activation), nullptr, scale});
    quant.Run(f.down, DirectBias(f.down_bias, s.down_bias), c, hidden, hs, out,
              model_.d_model(), here, /*last=*/false, {});
  }

  // Sizes the scratch of experts alone where a call could take that path (Init): packed experts
  // on the gemm engine, or quantised ones.
  absl::Status ReserveExpertsAlone(size_t max_experts, size_t max_k, size_t ff, bool quantised) {
    const bool gemm = expert_choice_.gemm_f32 != nullptr;
    if (!experts_alone_ || threads_ < 2 || max_experts < kExpertsAlonePerThread * threads_ ||
        (!gemm && !quantised)) {
      return absl::OkStatus();
    }
    const size_t d = model_.d_model();
    size_t units = 0;
    for (const GemmKernel* g : {expert_choice_.gemm_f32, expert_choice_.gemm_bf16,
                                expert_choice_.gemm_f16w, expert_choice_.gemm_bf16w}) {
      if (g != nullptr) units = std::max(units, GemmScratchUnits(*g, chunk_, std::max(d, ff)));
    }
    const size_t others = threads_ - 1;
    const size_t xs = chunk_ * DirectStride(d), hs = chunk_ * DirectStride(ff);
    const bool ok = routed_out_.Allocate(moe_chunk_ * max_k * d) &&
                    task_floats_.Allocate(others * (xs + 2 * hs), kXnnTailBytes) &&
                    (units == 0 || task_units_.Allocate(others * units, 0, /*zero=*/false));
    if (!ok) {
      return absl::ResourceExhaustedError("allocating the experts' per-thread scratch failed");
    }
    task_scratch_.resize(threads_);
    task_scratch_[0] = TaskScratch{gathered_.data(), gate_.data(), hidden_.data(),
                                   gemm ? gemm_scratch_.data() : nullptr,
                                   quantised ? &quant_ : nullptr};
    for (size_t t = 1; t < threads_; ++t) {
      float* f = task_floats_.data() + (t - 1) * (xs + 2 * hs);
      QuantEngine* quant = nullptr;
      if (quantised) {
        task_quant_.push_back(
            std::make_unique<QuantEngine>(quant_.gemv(), quant_.gemm(), quant_gemm_min_tokens_));
        if (!task_quant_.back()->Reserve(chunk_, std::max(d, ff))) {
          return absl::ResourceExhaustedError(
              "allocating the quantised engine's per-thread scratch failed");
        }
        quant = task_quant_.back().get();
      }
      task_scratch_[t] = TaskScratch{f, f + xs, f + xs + hs,
                                     gemm ? task_units_.data() + (t - 1) * units : nullptr, quant};
    }
    experts_.reserve(max_experts);
    ran_alone_.assign(max_experts, 0);
    return absl::OkStatus();
  }

  // Runs this call's experts alone (see above) when there are enough of them; marks them in
  // ran_alone_.
  absl::Status RunExpertsAlone(size_t layer, const MoePlan& mp) {
    std::fill(ran_alone_.begin(), ran_alone_.end(), 0);
    experts_.clear();
    const bool gemm = task_scratch_[0].gemm != nullptr;
    const bool quantised = task_scratch_[0].quant != nullptr;
    uint64_t bytes = 0;
    for (uint32_t e = 0; e < mp.num_experts; ++e) {
      const size_t c = groups_.count(e), slot = mp.first_slot + e;
      if (c == 0 || c > chunk_) continue;
      const bool quant = slots_[slot].all_quantized;
      if (quant ? quantised : gemm && c > expert_direct_max_) {
        experts_.push_back(ExpertAlone{e, c, {}, quant ? &slots_[slot] : nullptr});
        bytes += residency_.bytes(2 * slot + (quant ? kMappedForm : kPackedForm));
      }
    }
    const uint64_t budget = residency_.budget();
    if (experts_.size() < kExpertsAlonePerThread * threads_ || (budget != 0 && bytes > budget)) {
      return absl::OkStatus();
    }
    size_t kept = 0;
    for (const ExpertAlone& a : experts_) {
      const size_t slot = mp.first_slot + a.expert;
      const float* scale = neuron_scales_.Get(layer, static_cast<int>(a.expert));
      if (a.file != nullptr) {
        AcquireMapped(slot);
        GemmFfn edits;  // the scale only
        edits.scale = scale;
        experts_[kept++] = ExpertAlone{a.expert, a.count, edits, a.file};
        routed_bytes_ += residency_.bytes(2 * slot + kMappedForm);
        continue;
      }
      PackedFfn* f = nullptr;
      FFLITE_RETURN_IF_ERROR(Acquire(slot, &f));
      GemmFfn whole;
      if (!WholeGemm(*f, &whole)) continue;  // runs in RunMoe's loop
      whole.scale = scale;
      experts_[kept++] = ExpertAlone{a.expert, a.count, whole, nullptr};
      routed_bytes_ += residency_.bytes(2 * slot + kPackedForm);
    }
    experts_.resize(kept);
    // Largest first (then in expert order), so that the threads' last experts are small ones.
    std::sort(experts_.begin(), experts_.end(), [](const ExpertAlone& a, const ExpertAlone& b) {
      return a.count != b.count ? a.count > b.count : a.expert < b.expert;
    });
    ExpertsAloneJob job;
    job.backend = this;
    job.experts = experts_.data();
    job.count = experts_.size();
    job.scratch = task_scratch_.data();
    const EngineContext ctx = Context();
    FFLITE_TSAN_RELEASE(&job);
    pthreadpool_parallelize_1d(ctx.pool, RunExpertsAloneTask, &job, threads_,
                               PoolFlags(ctx, /*last=*/false));
    FFLITE_TSAN_ACQUIRE(&job);
    for (const ExpertAlone& a : experts_) ran_alone_[a.expert] = 1;
    experts_alone_count_.alone += experts_.size();
    experts_alone_count_.batches += experts_.size();
    return absl::OkStatus();
  }

  // y[n, y_stride] = x[n, x_stride] · Wᵀ + b by the engine that holds W: the quantised engine for
  // I8/I4 (from the file), the packed operators when there are some (strides: m.in, m.out), else
  // the direct kernel on the file's f32/f16/bf16 rows; then `epilogue` on y.
  absl::Status Multiply(const TensorView& w, const PackedMatrix* packed, const float* bias,
                        size_t n, const float* x, size_t x_stride, float* y, size_t y_stride,
                        bool last, const Epilogue& epilogue) {
    const EngineContext ctx = Context();
    if (packed != nullptr && !packed->empty() && !w.quantized()) {
      return RunPacked(*packed, n, x, y, ctx, last, epilogue);
    }
    if (w.quantized()) {
      quant_.Run(w, bias, n, x, x_stride, y, y_stride, ctx, last, epilogue);
      return absl::OkStatus();
    }
    if (w.value_rows()) {
      value_rows_.read += RunValueRows(kernels_, w, bias, n, x, x_stride, y, y_stride,
                                       value_rows_dense_fraction_, active_.data(), ctx, last);
      value_rows_.total += w.shape[1];
    } else {
      RunDirect(kernels_, w, bias, n, x, x_stride, y, y_stride, ctx, last);
    }
    epilogue.Apply(y, y_stride, 0, n, 0, static_cast<size_t>(w.shape[0]));
    return absl::OkStatus();
  }

  // MoE, per chunk of up to moe_chunk_ tokens:
  //   logits = h·routerᵀ (+ gate row) -> RouteToken per token (in double, as every backend)
  //   -> GroupByExpert (counting sort) -> per active expert, in expert order: gather its tokens,
  //   run its FFN over them as one batch (in chunks of chunk_), scatter-add w · out into out_
  //   -> + [sigmoid(gate·h)] · shared(h) -> residual / post-norm.
  // The order of the additions into out_ depends only on the routing (never on the budget or on
  // which experts are resident), so results are identical whatever the budget.
  absl::Status RunMoe(size_t layer, const LayerPlan& p, const float* input, size_t n_tokens,
                      float* output) {
    const MoePlan& mp = p.moe_plan;
    const size_t d = model_.d_model(), ro = mp.router_out;
    const uint32_t num_experts = mp.num_experts, k = mp.top_k;
    for (size_t t0 = 0; t0 < n_tokens; t0 += moe_chunk_) {
      const size_t n = std::min(moe_chunk_, n_tokens - t0);
      const float* x = input + t0 * d;  // [n, d], the caller's
      const bool last_chunk = t0 + n == n_tokens;
      PreNorm(p, x, n);
      // logits[n, ro]
      FFLITE_RETURN_IF_ERROR(RunPacked(mp.router, n, in_.data(), logits_.data(),
                                       Context(), false, {}));
      for (size_t t = 0; t < n; ++t) {
        const float* l = logits_.data() + t * ro;
        for (uint32_t e = 0; e < num_experts; ++e) logits_f64_[e] = l[e];
        RouteToken(mp.routing, logits_f64_.data(), &route_scratch_, routed_experts_.data() + t * k,
                   routed_weights_.data() + t * k);
      }
      const LayerCapture* capture = neuron_capture_.Get(layer);
      if (capture != nullptr) capture->Route(t0, n, routed_experts_.data(), routed_weights_.data());
      GroupByExpert(routed_experts_.data(), routed_weights_.data(), n, k, num_experts, &groups_);
      counts_.Add(layer, groups_);
      std::memset(out_.data(), 0, n * d * sizeof(float));
      uint32_t last_expert = 0;
      for (uint32_t e = 0; e < num_experts; ++e) {
        if (groups_.count(e) != 0) last_expert = e;
      }
      const auto routed_start = time_routed_ ? std::chrono::steady_clock::now()
                                             : std::chrono::steady_clock::time_point();
      // Many experts per thread: the packed and quantised ones run first, each whole on one
      // thread.
      const bool alone = capture == nullptr && !ran_alone_.empty();
      if (alone) FFLITE_RETURN_IF_ERROR(RunExpertsAlone(layer, mp));
      for (uint32_t e = 0; e < num_experts; ++e) {
        const size_t c = groups_.count(e);
        if (c == 0) continue;  // at decode: only the top-k experts are touched
        const uint32_t* tokens = groups_.tokens.data() + groups_.offsets[e];   // [c]
        const float* weights = groups_.weights.data() + groups_.offsets[e];    // [c]
        if (alone && ran_alone_[e] != 0) {
          // Its output is there already; added in the same order as below.
          const float* y = routed_out_.data() + groups_.offsets[e] * d;
          for (size_t r = 0; r < c; ++r) {
            Axpy(d, weights[r], y + r * d, out_.data() + tokens[r] * d);
          }
          continue;
        }
        // A few tokens (c <= expert_direct_max_ <= chunk_: one batch): the direct kernel on the
        // file's weights, its tokens gathered at DirectStride. More: the packed operators, in
        // batches of chunk_. A quantised expert always runs on the file's weights (in batches of
        // chunk_).
        const size_t slot = mp.first_slot + e;
        const bool direct = c <= expert_direct_max_ || slots_[slot].all_quantized;
        PackedFfn* f = nullptr;
        if (direct) {
          AcquireMapped(slot);
        } else {
          FFLITE_RETURN_IF_ERROR(Acquire(slot, &f));
        }
        const size_t stride = direct ? DirectStride(d) : d;
        const float* scale = neuron_scales_.Get(layer, static_cast<int>(e));
        for (size_t r0 = 0; r0 < c; r0 += chunk_) {
          const size_t m = std::min(chunk_, c - r0);
          // A packed expert with every token of the chunk reads them in place, in token order
          // (the counting sort is stable and a token picks an expert at most once).
          const float* src = in_.data() + r0 * d;
          if (direct || c != n) {
            for (size_t r = 0; r < m; ++r) {
              std::memcpy(gathered_.data() + r * stride, in_.data() + tokens[r0 + r] * d,
                          d * sizeof(float));
            }
            src = gathered_.data();  // [m, stride] + tail
          }
          const bool last = last_chunk && mp.shared.empty() && e == last_expert && r0 + m == c;
          // Each batch reads the whole form it runs on (the budget's count of its bytes).
          routed_bytes_ += residency_.bytes(2 * slot + (direct ? kMappedForm : kPackedForm));
          if (direct) {
            RunFfnDirect(slots_[slot], m, src, stride, expert_out_.data(), last, scale);
          } else {
            FFLITE_RETURN_IF_ERROR(RunFfn(*f, m, src, expert_out_.data(), last, scale));
          }
          ++experts_alone_count_.batches;
          if (capture != nullptr) {
            capture->ExpertRows(t0, e, tokens + r0, m, routed_experts_.data(), hidden_.data(),
                                HiddenStride(direct, slots_[slot].view->d_ff_padded));
          }
          for (size_t r = 0; r < m; ++r) {
            Axpy(d, weights[r0 + r], expert_out_.data() + r * d,
                 out_.data() + tokens[r0 + r] * d);
          }
        }
      }
      if (time_routed_) {
        routed_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                         routed_start).count();
      }
      // Shared experts: every token, behind the sigmoid gate if any.
      for (size_t s = 0; s < mp.shared.size(); ++s) {
        for (size_t s0 = 0; s0 < n; s0 += chunk_) {
          const size_t m = std::min(chunk_, n - s0);
          const bool last = last_chunk && s + 1 == mp.shared.size() && s0 + m == n;
          FFLITE_RETURN_IF_ERROR(
              RunFfn(mp.shared[s], m, in_.data() + s0 * d, expert_out_.data(), last, nullptr));
          for (size_t r = 0; r < m; ++r) {
            float g = 1.0f;
            if (mp.shared_gate) {
              const double logit = logits_.data()[(s0 + r) * ro + num_experts];
              g = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
            }
            Axpy(d, g, expert_out_.data() + r * d, out_.data() + (s0 + r) * d);
          }
        }
      }
      Finish(p, x, n, output + t0 * d);
    }
    return absl::OkStatus();
  }

  // The row stride of hidden_ after RunFfnDirect (direct) or RunFfn of an FFN of d_ff_padded.
  static size_t HiddenStride(bool direct, size_t d_ff_padded) {
    return direct ? DirectStride(d_ff_padded) : d_ff_padded;
  }

  // out[c, d] = the expert's FFN of in[c rows of in_stride] through the direct kernel on its file
  // weights (c <= direct_max_; hidden_, gate_ hold [c, DirectStride(d_ff)]).
  void RunFfnDirect(const FileFfn& s, size_t c, const float* in, size_t in_stride, float* out,
                    bool last, const float* scale) {
    const FfnView& f = *s.view;
    const size_t d = model_.d_model(), ff = f.d_ff_padded, hs = DirectStride(ff);
    Epilogue act{kernels_.Activation(f.activation), nullptr, scale};
    float* hidden = hidden_.data();
    if (f.gated && f.activation == Activation::RELU && !f.up.quantized() &&
        !f.gate.quantized() && value_rows_dense_fraction_ > 0.0) {
      // ReGLU: h = relu(gate·x + b) ⊙ (up·x + b) is 0 wherever the gate is silent, so up is
      // computed only for the neurons whose gate fired for some token (up's rows are contiguous
      // per neuron) when few enough did: the same bits as the whole product for those, exact 0
      // for the others (the whole product gives 0 · u there: the same unless u is infinite or
      // NaN while the gate is not, i.e. for an infinite input).
      float* gate = gate_.data();
      Multiply(f.gate, nullptr, DirectBias(f.gate_bias, s.gate_bias), c, in, in_stride, gate, hs,
               false, {})
          .IgnoreError();
      const size_t n = ActiveNeurons(gate, c, hs, ff, active_.data(), /*before_relu=*/true);
      if (ReadListed(n, ff, value_rows_dense_fraction_)) {
        const uint32_t* rows = active_.data();
        RunDirectListed(kernels_, f.up, DirectBias(f.up_bias, s.up_bias), c, in, in_stride,
                        hidden, hs, rows, n, Context(), false);
        value_rows_.up_read += n;
        for (size_t t = 0; t < c; ++t) {
          float* h = hidden + t * hs;
          const float* g = gate + t * hs;
          // relu(g) · u on the listed neurons (the reference's relu), 0 on the others: one pass.
          for (size_t i = 0, j = 0; i < ff; ++i) {
            const bool listed = j < n && rows[j] == i;
            h[i] = listed ? (g[i] > 0.0f ? g[i] : 0.0f) * h[i] : 0.0f;
            j += listed;
          }
        }
      } else {
        Multiply(f.up, nullptr, DirectBias(f.up_bias, s.up_bias), c, in, in_stride, hidden, hs,
                 false, {})
            .IgnoreError();
        value_rows_.up_read += ff;
        act.gate = gate;
        act.Apply(hidden, hs, 0, c, 0, ff);
      }
      value_rows_.up_total += ff;
      if (act.gate == nullptr) Epilogue{nullptr, nullptr, scale}.Apply(hidden, hs, 0, c, 0, ff);
      Multiply(f.down, nullptr, DirectBias(f.down_bias, s.down_bias), c, hidden, hs, out, d, last,
               {})
          .IgnoreError();
      return;
    }
    // Status: the direct and quantised engines cannot fail (no packed operator is involved).
    // The activation rides on the up product (gate first when gated), as in RunFfn: the quantised
    // engine applies it on each thread's rows, the direct kernel after the product.
    GateUp(f, nullptr, nullptr, DirectBias(f.gate_bias, s.gate_bias),
           DirectBias(f.up_bias, s.up_bias), c, in, in_stride, hs, act)
        .IgnoreError();
    Multiply(f.down, nullptr, DirectBias(f.down_bias, s.down_bias), c, hidden, hs, out, d, last, {})
        .IgnoreError();
  }

  // Packs dense layer `layer`'s float matrices on the session's threads (its first call that
  // needs them), then hands back the file's pages unless the direct kernel still reads them.
  absl::Status PackDense(size_t layer, LayerPlan* p) {
    const FfnView& f = model_.layers()[layer].ffn;
    PackedFfn packed;
    FFLITE_RETURN_IF_ERROR(PackFfn(f, kernels_, choice_, Context(),
                                   absl::StrFormat("layers[%d].ffn", layer), &packed));
    if (!p->direct_small) ReleaseFfnPages(model_, f, /*keep_quantized=*/true);
    p->ffn = std::move(packed);
    p->packed = true;
    return absl::OkStatus();
  }

  EngineContext Context() {
    return EngineContext{threadpool_.get(), threads_, &pool_awake_, gemm_scratch_.data(),
                         gemm_scratch_.size()};
  }

  // Residency. Each expert has two forms on the residency list (moe/residency.h): its packed
  // operators and its mapped file pages. Under a budget, least recently used forms are dropped
  // first until the new one fits.

  // The packed operators of expert slot i, packing it if they are not resident.
  absl::Status Acquire(size_t i, PackedFfn** out) {
    ExpertSlot& s = slots_[i];
    const size_t entry = 2 * i + kPackedForm;
    if (residency_.resident(entry)) {
      residency_.Touch(entry);
      *out = s.ffn.get();
      return absl::OkStatus();
    }
    residency_.MakeRoom(entry, [this](size_t e) { Evict(e); });
    auto packed = std::make_unique<PackedFfn>();
    FFLITE_RETURN_IF_ERROR(PackFfn(
        *s.view, kernels_, expert_choice_, Context(),
        absl::StrFormat("layers[%d].moe.experts[%d]", s.layer, s.expert), packed.get()));
    // Packing read the file pages: hand them back, unless the mapped form holds them.
    if (!residency_.resident(2 * i + kMappedForm)) ReleaseFfnPages(model_, *s.view);
    s.ffn = std::move(packed);
    residency_.Insert(entry);
    *out = s.ffn.get();
    return absl::OkStatus();
  }

  // Makes expert slot i's file pages resident (mapped in at once) for the direct kernel.
  void AcquireMapped(size_t i) {
    const size_t entry = 2 * i + kMappedForm;
    if (residency_.resident(entry)) {
      residency_.Touch(entry);
      return;
    }
    residency_.MakeRoom(entry, [this](size_t e) { Evict(e); });
    PopulateFfnPages(model_, *slots_[i].view);
    residency_.Insert(entry);
  }

  // Drops a form the residency list let go of.
  void Evict(size_t entry) {
    ExpertSlot& s = slots_[entry / 2];
    if (entry % 2 == kPackedForm) {
      s.ffn.reset();  // deletes the operators and their packed weights
    } else {
      ReleaseFfnPages(model_, *s.view);
    }
  }

  void Normalize(const LayerPlan& p, const float* in, float* out) const {
    const size_t d = model_.d_model();
    if (p.norm == NormKind::LAYER_NORM) {
      kernels_.layer_norm(d, in, p.norm_weight.data(),
                          p.norm_bias.size() != 0 ? p.norm_bias.data() : nullptr, p.eps, out);
    } else {
      kernels_.rms_norm(d, in, p.norm_weight.data(), p.eps, out);
    }
  }

  const Model& model_;
  const Kernels& kernels_;
  QuantEngine quant_;  // I8/I4 matrices, read from the file
  size_t quant_gemm_min_tokens_;  // quant_'s (for the experts' per-thread engines)
  size_t threads_ = 1;
  PackChoice choice_;         // dense layers and shared experts: engine, kernels, slices
  PackChoice expert_choice_;  // routed experts
  AlignedBuffer<uint32_t> gemm_scratch_;  // the gemm engine's packed activations
  ThreadpoolPtr threadpool_;      // null: one thread (everything runs on the caller's thread)
  bool pool_awake_ = false;       // the pool's threads may be spinning (see EngineContext)
  std::vector<LayerPlan> plans_;  // [layers]
  size_t chunk_ = 1;              // tokens per FFN pass (dense layers, experts' batches)
  size_t moe_chunk_ = 1;          // tokens routed and grouped at once in an MoE layer
  size_t direct_max_ = 0;         // f16/bf16 dense calls of at most this many tokens: direct kernel
  size_t expert_direct_max_ = 0;  // experts with at most this many tokens: the direct kernel
  bool time_routed_ = false;
  bool experts_alone_ = true;     // XnnpackBackendOptions::experts_alone
  double routed_seconds_ = 0.0;   // with time_routed_: time in routed experts so far
  uint64_t routed_bytes_ = 0;     // bytes of the expert forms routed batches ran on, so far
  ExpertsAloneCount experts_alone_count_;  // routed batches so far, and how many ran alone
  double value_rows_dense_fraction_ = kValueRowsDenseFraction;
  ValueRowsRead value_rows_;       // value rows read so far, of how many
  std::vector<uint32_t> active_;   // [max d_ff_padded]: the neurons that fired (value rows)
  // Routed experts of every MoE layer, resident or not; their two forms each, and the LRU list over
  // the resident forms (head: most recently used).
  std::vector<ExpertSlot> slots_;
  ExpertResidency residency_;  // [2 · slots] forms: packed, mapped
  ExpertCounts counts_;          // routing statistics
  // Scratch; the XNNPACK inputs carry XNN_EXTRA_BYTES of tail slack.
  AlignedBuffer<float> in_;      // [max(chunk, moe_chunk), d_model] + tail: (pre-normed) input
  AlignedBuffer<float> hidden_;  // [chunk, max d_ff_padded] + tail: up output, then act ⊙ up
  AlignedBuffer<float> gate_;    // [chunk, max d_ff_padded]: gate output
  AlignedBuffer<float> out_;     // [max(chunk, moe_chunk), d_model]: FFN / MoE sum, + residual
  AlignedBuffer<float> gathered_;    // [chunk, d_model] + tail: one expert's tokens
  AlignedBuffer<float> expert_out_;  // [chunk, d_model]: one expert's output
  AlignedBuffer<float> logits_;      // [moe_chunk, max router_out]
  std::vector<double> logits_f64_;   // [max experts]: one token's logits for RouteToken
  std::vector<uint32_t> routed_experts_;  // [moe_chunk, max top_k]
  std::vector<double> routed_weights_;    // [moe_chunk, max top_k]
  ExpertGroups groups_;
  RoutingScratch route_scratch_;
  // Experts alone (RunExpertsAlone); empty where no call can take that path.
  AlignedBuffer<float> routed_out_;     // [moe_chunk · max top_k, d_model]: by group row
  AlignedBuffer<float> task_floats_;    // tasks 1..: x, gate, hidden each; + tail
  AlignedBuffer<uint32_t> task_units_;  // tasks 1..: packed activations each
  std::vector<std::unique_ptr<QuantEngine>> task_quant_;  // tasks 1..: quantised experts' scratch
  std::vector<TaskScratch> task_scratch_;  // [threads]
  std::vector<ExpertAlone> experts_;       // this call's, reserved [max experts]
  std::vector<uint8_t> ran_alone_;         // [max experts]: whether expert e ran alone this call
};

}  // namespace

bool XnnpackBackendAvailable(std::string* why) {
  const absl::Status status = InitializeXnnpack();
  if (!status.ok() && why != nullptr) *why = std::string(status.message());
  return status.ok();
}

uint64_t XnnpackPackedFfnBytes(const FfnView& f) {
  const XnnpackBackendOptions defaults;
  return PackedFfnBytes(f, ChoosePackEngine(defaults, defaults.expert_slice_bytes));
}

PackedKernelNames XnnpackPackedKernelNames(const XnnpackBackendOptions& options) {
  const PackChoice choice = ChoosePackEngine(options, options.slice_bytes);
  PackedKernelNames names;
  auto name = [](const GemmKernel* g) { return g != nullptr ? g->isa : "xnnpack"; };
  names.f32 = name(choice.gemm_f32);
  names.f16 = name(choice.Gemm(DType::F16));
  names.bf16 = name(choice.Gemm(DType::BF16));
  return names;
}

std::string XnnpackPackedEngineName(const XnnpackBackendOptions& options) {
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

bool XnnpackBf16Arithmetic(const XnnpackBackendOptions& options) {
  return ChoosePackEngine(options, options.slice_bytes).gemm_bf16 != nullptr;
}

uint64_t XnnpackResidentExpertBytes(Backend* backend) {
  auto* x = dynamic_cast<XnnpackBackend*>(backend);
  return x != nullptr ? x->resident_expert_bytes() : 0;
}

double XnnpackRoutedExpertSeconds(Backend* backend) {
  auto* x = dynamic_cast<XnnpackBackend*>(backend);
  return x != nullptr ? x->routed_seconds() : 0.0;
}

uint64_t XnnpackRoutedExpertBytes(Backend* backend) {
  auto* x = dynamic_cast<XnnpackBackend*>(backend);
  return x != nullptr ? x->routed_bytes() : 0;
}

ExpertsAloneCount XnnpackExpertsAlone(Backend* backend) {
  auto* x = dynamic_cast<XnnpackBackend*>(backend);
  return x != nullptr ? x->experts_alone_count() : ExpertsAloneCount();
}

ValueRowsRead XnnpackValueRowsRead(Backend* backend) {
  auto* x = dynamic_cast<XnnpackBackend*>(backend);
  return x != nullptr ? x->value_rows_read() : ValueRowsRead();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackendWithOptions(
    const Model& model, const BackendConfig& config, const XnnpackBackendOptions& options) {
  const Kernels& kernels = options.kernels != nullptr ? *options.kernels : BestKernels();
  const QGemvKernel& qgemv = options.qgemv != nullptr ? *options.qgemv : BestQGemvKernel();
  const QGemmKernel& qgemm = options.qgemm != nullptr ? *options.qgemm : BestQGemmKernel();
  auto backend = std::make_unique<XnnpackBackend>(model, kernels, qgemv, qgemm,
                                                  options.quant_gemm_min_tokens);
  FFLITE_RETURN_IF_ERROR(backend->Init(config, options));
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackend(const Model& model,
                                                              const BackendConfig& config) {
  return CreateXnnpackBackendWithOptions(model, config, XnnpackBackendOptions());
}

}  // namespace fflite
