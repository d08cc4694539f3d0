// The CPU backend: its rooms composed into the layer runner's and the MoE runner's executors
// (cpu_backend.h lists the rooms). A layer's steps come from layer/layer_runner.h, an MoE
// layer's from moe/moe_runner.h; this file says how each step runs on the CPU.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/cpu/engines.h"
#include "backends/cpu/expert_store.h"
#include "backends/cpu/experts_alone.h"
#include "backends/cpu/ffn.h"
#include "backends/cpu/matrix_op.h"
#include "backends/cpu/plans.h"
#include "backends/cpu/quant_engine.h"
#include "backends/cpu/scratch.h"
#include "base/status_macros.h"
#include "moe/routing.h"

namespace fflite {

namespace {

// y[i] += a · x[i]   x, y: [n], not overlapping.
inline void Axpy(size_t n, float a, const float* __restrict x, float* __restrict y) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

class CpuBackend : public Backend, LayerExecutor, ExpertExecutor {
 public:
  CpuBackend(const Model& model, const CpuBackendOptions& options, const Kernels& kernels,
             const QGemvKernel& qgemv, const QGemmKernel& qgemm)
      : model_(model),
        kernels_(kernels),
        quant_(qgemv, qgemm, options.quant_gemm_min_tokens),
        ops_(kernels, quant_, options.value_rows_dense_fraction),
        store_(model, kernels) {}

  absl::Status Init(const BackendConfig& config, const CpuBackendOptions& options) {
    FFLITE_RETURN_IF_ERROR(InitializeXnnpack());
    threads_ = static_cast<size_t>(std::max(1, config.num_threads));
    max_tokens_ = config.max_tokens;
    if (config.parallel_for != nullptr) {
      // The caller's pool: fflite starts no thread of its own (not even the expert reader).
      if (config.num_threads > 1) {
        workers_ = std::make_unique<CallerWorkers>(config.parallel_for,
                                                   config.parallel_for_context, threads_);
      }
    } else if (config.num_threads > 1) {
      pthreadpool_t pool = pthreadpool_create(static_cast<size_t>(config.num_threads));
      if (pool == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("creating a pool of %d threads failed", config.num_threads));
      }
      workers_ = std::make_unique<PoolWorkers>(pool, config.sleep_between_loops);
    }
    choice_ = ChoosePackEngine(options, options.slice_bytes);
    expert_choice_ = ChoosePackEngine(options, options.expert_slice_bytes);
    const size_t d = model_.d_model();
    chunk_ = std::max<size_t>(1, std::min(config.max_tokens, options.token_chunk));
    // MoE layers route up to 4 chunks of tokens at once, so that each expert sees ~4x more of
    // them per batch (at 128 tokens, 8 experts, top-2: 32 per expert instead of 8 with 32-token
    // chunks); an expert's batch still passes through its FFN in chunks of `chunk_`.
    moe_chunk_ = std::max<size_t>(1, std::min(config.max_tokens, 4 * options.token_chunk));
    direct_ = ChooseDirectLimits(options, expert_choice_, chunk_);
    ModelSizes sizes;
    FFLITE_RETURN_IF_ERROR(
        PlanLayers(model_, kernels_, choice_, Context(), &store_, &plans_, &sizes));

    // Scratch, sized once: Run allocates nothing (but for packing a layer or an expert on first
    // use, by design).
    ScratchShape shape;
    shape.d = d;
    shape.chunk = chunk_;
    shape.moe_chunk = moe_chunk_;
    shape.direct_max = direct_.dense;
    shape.model = sizes;
    // The gemm engine packs the activations of a product of up to chunk_ tokens (an expert's
    // batch passes in chunks of chunk_ too) over up to max(d_model, d_ff) inputs, plus one
    // partial tile per extra thread for RunGemmFfnByTokens.
    for (const PackChoice* c : {&choice_, &expert_choice_}) {
      for (const GemmKernel* g : {c->gemm_f32, c->gemm_bf16}) {
        if (g == nullptr) continue;
        const size_t in = std::max(d, sizes.max_ff);
        const size_t units =
            GemmScratchUnits(*g, chunk_, in) + GemmFfnExtraScratchUnits(*g, threads_, in);
        shape.gemm_units = std::max(shape.gemm_units, units);
      }
    }
    const bool gemm_experts = expert_choice_.gemm_f32 != nullptr;
    const bool alone = ExpertsAlone::Possible(options.experts_alone, threads_, sizes.max_experts,
                                              gemm_experts, sizes.any_quantized_expert);
    if (alone) {
      shape.alone_threads = threads_ - 1;
      shape.alone_units = ExpertsAlone::TaskUnits(expert_choice_, chunk_, d, sizes.max_expert_ff);
    }
    FFLITE_RETURN_IF_ERROR(scratch_.Allocate(shape));
    ops_.Reserve(sizes.max_ff);
    if (sizes.any_quantized && !quant_.Reserve(chunk_, std::max(d, sizes.max_ff))) {
      return absl::ResourceExhaustedError("allocating the quantised engine's scratch failed");
    }
    ffn_.emplace(ops_, scratch_.gate, scratch_.hidden);
    if (sizes.any_moe) {
      router_.Reserve(static_cast<uint32_t>(sizes.max_experts),
                      static_cast<uint32_t>(sizes.max_groups));
    }
    if (alone) {
      const ExpertsAlone::Task task0{scratch_.gathered, scratch_.gate, scratch_.hidden,
                                     gemm_experts ? scratch_.gemm : nullptr,
                                     sizes.any_quantized_expert ? &quant_ : nullptr};
      FFLITE_RETURN_IF_ERROR(alone_.Init(
          kernels_, threads_, chunk_, d, sizes.max_expert_ff, task0, scratch_.task_floats,
          scratch_.task_units, shape.alone_units, options.quant_gemm_min_tokens,
          sizes.max_experts, scratch_.routed_out));
    }
    // Routed experts are prepared lazily, budget or not: an expert's packed form is made the
    // first time a call gives it more than the experts' direct limit of tokens, its mapped form
    // the first time it gets fewer. Experts that only ever see a few tokens are never packed (an
    // unbudgeted qwen-moe session used to pack 2 GB at creation that decode never read).
    FFLITE_RETURN_IF_ERROR(store_.Init(expert_choice_, config.expert_budget_bytes,
                                       options.expert_policy,
                                       /*reader_thread=*/config.parallel_for == nullptr));
    if (store_.streamed()) {
      uint32_t top_k = 0;
      for (const LayerView& l : model_.layers()) top_k = std::max(top_k, l.moe.top_k);
      guess_experts_.resize(kGuessTokens * top_k);
      guess_weights_.resize(kGuessTokens * top_k);
    }
    InitRunner(model_, moe_chunk_, config.time_routed_experts);
    return absl::OkStatus();
  }

  absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output) override {
    LayerPlan& p = plans_[layer];
    if (!p.scales_checked) {
      // A dense layer's quantised matrices are read in place on both of its paths: their first
      // call checks their scales (the loader does not), and fails, leaving the session as it
      // was, until they pass.
      FFLITE_RETURN_IF_ERROR(model_.CheckFfnScales(model_.layers()[layer].ffn));
      p.scales_checked = true;
    }
    const absl::Status status = runner_.Run(model_, layer, *this, this, input, n_tokens, output);
    if (status.ok() && store_.streamed()) GuessNextExperts(layer, output, n_tokens);
    if (pool_awake_) {
      // The last parallel loop was not the Run's last operation: put the workers to sleep.
      workers_->Yield();
      pool_awake_ = false;
    }
    return status;
  }

  // Every dense layer: its scales checked, and its packed form made where calls of up to
  // max_tokens_ run on it (the first pass that needs it would make it otherwise).
  absl::Status Prepare() override {
    for (size_t layer = 0; layer < plans_.size(); ++layer) {
      LayerPlan& p = plans_[layer];
      if (p.moe) continue;
      if (!p.scales_checked) {
        FFLITE_RETURN_IF_ERROR(model_.CheckFfnScales(model_.layers()[layer].ffn));
        p.scales_checked = true;
      }
      const size_t largest = std::min(max_tokens_, chunk_);
      if (!p.packed && !DirectPass(p, largest)) FFLITE_RETURN_IF_ERROR(PackDense(layer, &p));
    }
    return absl::OkStatus();
  }

  BackendMemory Memory() const override {
    BackendMemory m;
    for (const LayerPlan& p : plans_) {
      // The model's shared forms are counted once, by the model (shared_prepared_bytes).
      m.prepared_bytes += p.own_ffn.bytes() + p.moe_plan.router.bytes();
      for (const PackedFfn& f : p.moe_plan.shared) m.prepared_bytes += f.bytes();
      for (const NormPlan* n : {&p.norm, &p.output_norm}) {
        m.prepared_bytes += (n->weight.size() + n->bias.size()) * sizeof(float);
      }
    }
    m.expert_bytes = store_.resident_bytes();
    m.expert_slot_bytes = uint64_t{store_.pool().slots()} * store_.pool().slot_bytes();
    m.scratch_bytes = scratch_.bytes() + quant_.scratch_bytes();
    return m;
  }

  BackendStats Stats() const override {
    BackendStats s = ops_.counters();
    s.resident_expert_bytes = store_.resident_bytes();
    s.routed_expert_bytes = store_.read_bytes();
    s.routed_seconds = runner_.moe().routed_seconds();
    s.routed_batches = batches_ + alone_.count();
    s.routed_batches_together = alone_.count();
    s.expert_hits = store_.hits();
    s.expert_misses = store_.misses();
    const ExpertPool::Counters reads = store_.pool().counters();
    s.expert_slots = store_.pool().slots();
    s.expert_slot_bytes = store_.pool().slot_bytes();
    s.expert_reads = reads.fills;
    s.expert_read_buffered_bytes = reads.buffered_bytes;
    s.expert_read_direct_bytes = reads.direct_bytes;
    s.expert_read_wait_seconds = reads.wait_seconds;
    s.expert_prefetches_used = store_.prefetches_used();
    s.expert_prefetches_wasted = store_.prefetches_wasted();
    return s;
  }

 private:
  // --- LayerExecutor: a pass of up to chunk_ tokens (moe_chunk_ in MoE layers) through
  // scratch_.in -> the body -> scratch_.out, then into the caller's y.

  size_t PassTokens(const LayerView& layer) const override {
    return layer.kind == LayerKind::kMoe ? moe_chunk_ : chunk_;
  }

  // Whether a dense pass runs on the file's rows (f16/bf16, value rows) rather than packed.
  bool DirectPass(const LayerPlan& p, size_t n) const {
    return p.direct_small && n <= direct_.dense;
  }

  // A dense layer's packed form on its first pass that needs it; then, with many tokens per
  // thread on the gemm engine, the whole pass split by tokens: each thread norms its tokens,
  // runs the whole FFN on them and adds the residual (no wait between the products).
  absl::StatusOr<bool> RunWholePass(const LayerPass& pass) override {
    LayerPlan& p = plans_[pass.layer];
    if (DirectPass(p, pass.n)) return false;
    if (!p.packed) FFLITE_RETURN_IF_ERROR(PackDense(pass.layer, &p));
    GemmFfn whole;
    if (!FfnRunner::SplitTokens(p.ffn(), pass.n, Context(), &whole)) return false;
    whole.scale = pass.scale;
    DenseRows rows{this, &p, pass.x, pass.y};
    RunGemmFfnByTokens(whole, pass.n, scratch_.in, scratch_.gate, scratch_.hidden, scratch_.out,
                       Context(), pass.last,
                       GemmFfnRows{&DenseRows::Before, &DenseRows::After, &rows});
    if (pass.capture != nullptr) {
      pass.capture->DenseRows(pass.t0, scratch_.hidden, p.ffn().d_ff, pass.n);
    }
    return true;
  }

  // scratch_.in[n, d] = PreNorm(x) or x: XNNPACK may read past the end of its input, which must
  // never be the caller's buffer.
  absl::Status PreNorm(const LayerPass& pass) override {
    PreNormRows(plans_[pass.layer], pass.x, 0, pass.n);
    return absl::OkStatus();
  }

  // scratch_.out[n, d] = FFN(scratch_.in): on the file's rows (f16/bf16 and value rows, few
  // tokens; the tokens DirectStride apart, as rows 4 KiB apart alias in L1) or packed.
  absl::Status Dense(const LayerPass& pass) override {
    const LayerPlan& p = plans_[pass.layer];
    const size_t d = model_.d_model(), n = pass.n;
    const bool direct = DirectPass(p, n);
    if (direct) {
      const float* src = scratch_.in;
      size_t stride = d;
      if (n > 1) {
        stride = DirectStride(d);
        for (size_t r = 0; r < n; ++r) {
          std::memcpy(scratch_.gathered + r * stride, scratch_.in + r * d, d * sizeof(float));
        }
        src = scratch_.gathered;
      }
      ffn_->RunFile(p.file, n, src, stride, scratch_.out, Context(), pass.last, pass.scale);
    } else {
      FFLITE_RETURN_IF_ERROR(
          ffn_->RunPacked(p.ffn(), n, scratch_.in, scratch_.out, Context(), pass.last, pass.scale));
    }
    if (pass.capture != nullptr) {
      pass.capture->DenseRows(pass.t0, scratch_.hidden,
                              FfnRunner::HiddenStride(direct, p.file.view->d_ff_padded), n);
    }
    return absl::OkStatus();
  }

  // y[n, d] = [x +] scratch_.out, then the post-norm if any.
  absl::Status Finish(const LayerPass& pass, bool /*residual_added*/) override {
    FinishRows(plans_[pass.layer], pass.x, 0, pass.n, pass.y);
    return absl::OkStatus();
  }

  // PreNorm and Finish on tokens [t0, t1) of x, the scratch and y.
  void PreNormRows(const LayerPlan& p, const float* x, size_t t0, size_t t1) {
    const size_t d = model_.d_model();
    if (p.norm.present() && p.norm.pre) {
      for (size_t t = t0; t < t1; ++t) p.norm.Apply(kernels_, d, x + t * d, scratch_.in + t * d);
    } else {
      std::memcpy(scratch_.in + t0 * d, x + t0 * d, (t1 - t0) * d * sizeof(float));
    }
  }
  void FinishRows(const LayerPlan& p, const float* x, size_t t0, size_t t1, float* y) {
    const size_t d = model_.d_model();
    const bool post = p.norm.present() && !p.norm.pre;
    float* out = scratch_.out;
    if (p.output_norm.present()) {
      // In place: the norm kernels read a row whole (its mean square) before they write it.
      for (size_t t = t0; t < t1; ++t) p.output_norm.Apply(kernels_, d, out + t * d, out + t * d);
    }
    if (p.residual) {
      F32Add((t1 - t0) * d, out + t0 * d, x + t0 * d, (post ? out : y) + t0 * d);
    } else if (!post) {
      std::memcpy(y + t0 * d, out + t0 * d, (t1 - t0) * d * sizeof(float));
    }
    if (post) {
      for (size_t t = t0; t < t1; ++t) p.norm.Apply(kernels_, d, out + t * d, y + t * d);
    }
  }

  // A dense layer's per-token work around a token-split FFN, on each range's thread.
  struct DenseRows {
    CpuBackend* backend;
    const LayerPlan* plan;
    const float* x;  // the pass's input, [n, d]
    float* y;        // the pass's output, [n, d]
    static void Before(void* context, size_t t0, size_t t1) {
      const auto& r = *static_cast<const DenseRows*>(context);
      r.backend->PreNormRows(*r.plan, r.x, t0, t1);
    }
    static void After(void* context, size_t t0, size_t t1) {
      const auto& r = *static_cast<const DenseRows*>(context);
      r.backend->FinishRows(*r.plan, r.x, t0, t1, r.y);
    }
  };

  // Packs dense layer `layer`'s float matrices on the session's threads (its first call that
  // needs them), then hands back the file's pages unless the direct kernel still reads them.
  // Where every float matrix takes the gemm engine, the form is the model's, shared by its
  // sessions (made by whichever needs it first, on that session's threads: the panels do not
  // depend on the thread count); its key names what the form depends on (the layer, the
  // kernels that pack and run it).
  absl::Status PackDense(size_t layer, LayerPlan* p) {
    const FfnView& f = model_.layers()[layer].ffn;
    const std::string name = absl::StrFormat("layers[%d].ffn", layer);
    bool shareable = true;
    for (const TensorView* t : {&f.up, &f.gate, &f.down}) {
      if (t->present() && !t->quantized() && choice_.Gemm(t->dtype) == nullptr) shareable = false;
    }
    if (shareable) {
      const std::string key = absl::StrFormat(
          "cpu/dense/%d/%p/%p/%p/%p/%p/%d", layer, static_cast<const void*>(&kernels_),
          static_cast<const void*>(choice_.gemm_f32), static_cast<const void*>(choice_.gemm_bf16),
          static_cast<const void*>(choice_.gemm_f16w),
          static_cast<const void*>(choice_.gemm_bf16w), choice_.ahead_off ? 1 : 0);
      const bool release = !p->direct_small;
      FFLITE_ASSIGN_OR_RETURN(
          std::shared_ptr<const void> form,
          model_.shared_forms().GetOrMake(key, [&]() -> absl::StatusOr<SharedForms::Form> {
            auto packed = std::make_shared<PackedFfn>();
            FFLITE_RETURN_IF_ERROR(PackFfn(f, kernels_, choice_, Context(), name, packed.get()));
            if (release) ReleaseFfnPages(model_, f, /*keep_quantized=*/true);
            const uint64_t bytes = packed->bytes();
            return SharedForms::Form{std::move(packed), bytes};
          }));
      p->shared_ffn = std::static_pointer_cast<const PackedFfn>(std::move(form));
    } else {
      PackedFfn packed;
      FFLITE_RETURN_IF_ERROR(PackFfn(f, kernels_, choice_, Context(), name, &packed));
      if (!p->direct_small) ReleaseFfnPages(model_, f, /*keep_quantized=*/true);
      p->own_ffn = std::move(packed);
    }
    p->packed = true;
    return absl::OkStatus();
  }

  // --- ExpertExecutor: the MoE sum in scratch_.out, one expert's output in expert_out.

  size_t ExpertBatchTokens() const override { return chunk_; }

  // logits[n, router_out] = h · [router; shared gate]ᵀ (one f32 operator), then each token's
  // routing in double (moe/routing.h).
  absl::Status Route(const MoeCall& call, uint32_t* experts, double* weights) override {
    const MoePlan& mp = plans_[call.layer].moe_plan;
    FFLITE_RETURN_IF_ERROR(RunPacked(mp.router, call.n, scratch_.in, scratch_.logits, Context(),
                                     /*last=*/false, {}));
    router_.Route(mp.routing, scratch_.logits, mp.router_out, call.n, experts, weights);
    return absl::OkStatus();
  }

  // At decode (a few tokens), with streamed experts: starts reading the experts the next MoE
  // layer's router chooses for this layer's output (its norm, then its router), so that the reads
  // overlap whatever the caller runs before that layer (attention) and the layers in between.
  // The residual stream changes little from layer to layer, so the guess is mostly right; the
  // real routing decides what runs, so a wrong guess costs only its read (counted as a wasted
  // prefetch). Guesses drop no expert of the guess itself; they may drop others (LRU).
  void GuessNextExperts(size_t layer, const float* y, size_t n) {
    const auto& layers = model_.layers();
    if (n > kGuessTokens) return;
    size_t next = layer + 1;
    while (next < layers.size() && layers[next].kind != LayerKind::kMoe) ++next;
    if (next >= layers.size()) return;
    const MoePlan& mp = plans_[next].moe_plan;
    PreNormRows(plans_[next], y, 0, n);
    if (!RunPacked(mp.router, n, scratch_.in, scratch_.logits, Context(), /*last=*/false, {})
             .ok()) {
      return;  // only a guess
    }
    router_.Route(mp.routing, scratch_.logits, mp.router_out, n, guess_experts_.data(),
                  guess_weights_.data());
    store_.NewEpoch();
    const size_t k = layers[next].moe.top_k;
    for (size_t i = 0; i < n * k; ++i) {
      if (!store_.Prefetch(mp.first_slot + guess_experts_[i], /*guess=*/true)) break;
    }
  }

  // With streamed experts, the call's experts are read ahead in the order they run, on the
  // pool's reader thread while the first ones compute (the first read is taken back by the
  // compute thread when it comes to it: ExpertPool::Wait). Where the slots do not hold them all
  // (a prefill), the reads go on in waves: each expert that finished gives its slot to the next
  // one not yet started (AddExpert).
  absl::Status BeginExperts(const MoeCall& call, const ExpertGroups& groups) override {
    std::memset(scratch_.out, 0, call.n * model_.d_model() * sizeof(float));
    if (store_.streamed()) {
      const size_t first = plans_[call.layer].moe_plan.first_slot;
      const uint32_t experts = call.moe->num_experts;
      store_.NewEpoch();
      for (uint32_t e = 0; e < experts; ++e) {
        if (groups.count(e) != 0) store_.Protect(first + e);
      }
      ahead_ = {&groups, first, experts, 0};
      ReadAhead();
    }
    return absl::OkStatus();
  }

  // Starts the reads of the call's experts from ahead_.next on while they fit.
  void ReadAhead() {
    for (; ahead_.next < ahead_.experts; ++ahead_.next) {
      if (ahead_.groups->count(ahead_.next) == 0) continue;
      if (!store_.Prefetch(ahead_.first + ahead_.next, /*guess=*/false)) return;
    }
  }

  absl::Status RunMany(const MoeCall& call, absl::Span<const ExpertBatch> batches,
                       uint8_t* ran) override {
    const ExpertsAlone::Call alone{&plans_[call.layer].moe_plan, scratch_.in, direct_.expert,
                                   Context()};
    return alone_.Run(alone, batches, store_, ran);
  }

  // A few tokens (at most the experts' direct limit; a quantised expert always): the file form,
  // its tokens gathered DirectStride apart. More: the packed form, its tokens read in place when
  // the expert has every token of the pass (in token order: the grouping is stable).
  absl::Status RunExpert(const MoeCall& call, const ExpertBatch& b) override {
    const MoePlan& mp = plans_[call.layer].moe_plan;
    const size_t d = model_.d_model(), slot = mp.first_slot + b.expert;
    const bool direct = b.group_count <= direct_.expert || store_.slot(slot).all_quantized;
    PackedFfn* f = nullptr;
    if (direct) {
      FFLITE_RETURN_IF_ERROR(store_.FileForm(slot));
    } else {
      FFLITE_ASSIGN_OR_RETURN(f, store_.Packed(slot, Context()));
    }
    const size_t stride = direct ? DirectStride(d) : d;
    const float* src = scratch_.in + b.offset * d;
    if (direct || b.group_count != call.n) {
      for (size_t r = 0; r < b.count; ++r) {
        std::memcpy(scratch_.gathered + r * stride, scratch_.in + b.tokens[r] * d,
                    d * sizeof(float));
      }
      src = scratch_.gathered;  // [count, stride] + tail
    }
    // Each batch reads the whole form it runs on (the budget's count of its bytes).
    store_.CountRead(slot, direct ? kFileForm : kPackedForm);
    if (direct) {
      ffn_->RunFile(store_.slot(slot), b.count, src, stride, scratch_.expert_out, Context(),
                    b.last, b.scale);
    } else {
      FFLITE_RETURN_IF_ERROR(
          ffn_->RunPacked(*f, b.count, src, scratch_.expert_out, Context(), b.last, b.scale));
    }
    ++batches_;
    if (call.capture != nullptr) {
      const size_t hs = FfnRunner::HiddenStride(direct, store_.slot(slot).view->d_ff_padded);
      call.capture->ExpertRows(call.t0, b.expert, b.tokens, b.count, call.chosen, scratch_.hidden,
                               hs);
    }
    return absl::OkStatus();
  }

  absl::Status AddExpert(const MoeCall& /*call*/, const ExpertBatch& b, bool ran_many) override {
    const size_t d = model_.d_model();
    const float* y = ran_many ? alone_.out(b) : scratch_.expert_out;
    for (size_t r = 0; r < b.count; ++r) {
      Axpy(d, b.weights[r], y + r * d, scratch_.out + b.tokens[r] * d);
    }
    if (store_.streamed() && b.offset + b.count == b.group_count &&
        ahead_.next < ahead_.experts) {
      store_.Release(ahead_.first + b.expert);  // done with it in this call: the next wave's
      ReadAhead();
    }
    return absl::OkStatus();
  }

  // The gate's logit is the router operator's extra row; its sigmoid in double.
  absl::Status RunShared(const MoeCall& call, size_t s, size_t r0, size_t m,
                         bool last) override {
    const MoePlan& mp = plans_[call.layer].moe_plan;
    const size_t d = model_.d_model();
    FFLITE_RETURN_IF_ERROR(ffn_->RunPacked(mp.shared[s], m, scratch_.in + r0 * d,
                                           scratch_.expert_out, Context(), last, nullptr));
    for (size_t r = 0; r < m; ++r) {
      float g = 1.0f;
      if (mp.shared_gate) {
        const double logit = scratch_.logits[(r0 + r) * mp.router_out + mp.num_experts];
        g = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
      }
      Axpy(d, g, scratch_.expert_out + r * d, scratch_.out + (r0 + r) * d);
    }
    return absl::OkStatus();
  }

  EngineContext Context() {
    return EngineContext{workers_.get(), threads_, &pool_awake_, scratch_.gemm,
                         scratch_.gemm_units};
  }

  const Model& model_;
  const Kernels& kernels_;
  QuantEngine quant_;  // I8/I4 matrices, read from the file
  MatrixOps ops_;      // over quant_ and the kernels
  size_t threads_ = 1;
  size_t max_tokens_ = 1;
  std::unique_ptr<Workers> workers_;  // null: one thread (everything on the caller's thread)
  bool pool_awake_ = false;   // the pool's threads may be spinning (see EngineContext)
  PackChoice choice_;         // dense layers and shared experts: engine, kernels, slices
  PackChoice expert_choice_;  // routed experts
  size_t chunk_ = 1;          // tokens per pass of a dense layer, and per expert batch
  size_t moe_chunk_ = 1;      // tokens per pass of an MoE layer (routed and grouped at once)
  DirectLimits direct_;       // dense calls and expert batches run on the file's rows up to these
  std::vector<LayerPlan> plans_;  // [layers]
  ExpertStore store_;             // routed experts: forms, residency
  HostRouter router_;
  // The call's read-ahead (BeginExperts): its grouping, its layer's first expert slot, its
  // experts, and the next one whose read is not started.
  struct ReadAheadState {
    const ExpertGroups* groups = nullptr;
    size_t first = 0;
    uint32_t experts = 0, next = 0;
  } ahead_;
  // GuessNextExperts: tokens it guesses for (decode), and its routing [kGuessTokens, top_k].
  static constexpr size_t kGuessTokens = 8;
  std::vector<uint32_t> guess_experts_;
  std::vector<double> guess_weights_;
  CpuScratch scratch_;
  std::optional<FfnRunner> ffn_;  // over ops_ and the scratch's gate and hidden rows
  ExpertsAlone alone_;
  uint64_t batches_ = 0;  // routed experts' batches run one at a time (RunExpert), so far
};

}  // namespace

bool CpuBackendAvailable(std::string* why) {
  const absl::Status status = InitializeXnnpack();
  if (!status.ok() && why != nullptr) *why = std::string(status.message());
  return status.ok();
}

uint64_t CpuPackedFfnBytes(const FfnView& f) {
  const CpuBackendOptions defaults;
  return PackedFfnBytes(f, ChoosePackEngine(defaults, defaults.expert_slice_bytes));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const Model& model,
                                                          const BackendConfig& config) {
  CpuBackendOptions options = config.cpu_options != nullptr ? *config.cpu_options
                                                             : CpuBackendOptions();
  if (config.float_activations) options.quant_gemm_min_tokens = 0;  // never the int8 kernels
  const Kernels& kernels = options.kernels != nullptr ? *options.kernels : BestKernels();
  const QGemvKernel& qgemv = options.qgemv != nullptr ? *options.qgemv : BestQGemvKernel();
  const QGemmKernel& qgemm = options.qgemm != nullptr ? *options.qgemm : BestQGemmKernel();
  auto backend = std::make_unique<CpuBackend>(model, options, kernels, qgemv, qgemm);
  FFLITE_RETURN_IF_ERROR(backend->Init(config, options));
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace fflite
