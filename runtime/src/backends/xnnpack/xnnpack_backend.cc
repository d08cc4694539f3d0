// xnnpack backend: dense FFN layers as sliced XNNPACK fully-connected operators plus fflite
// kernels; MoE layers delegated to an internal reference backend (until the MoE issue).
//
// Why slices. XNNPACK 2022's f32 GEMM walks the output in tiles of mr (7 on AVX-512) tokens by
// all output channels, so one operator over a whole matrix streams every packed weight from
// memory once per 7 tokens: at 128 tokens on the llama shape (d 4096, d_ff 11008) that is 19
// passes over 180 MB per matrix. Splitting the output channels into slices of about 2 MiB of
// packed weights, one operator each, writing into the strided output (output_stride = N), keeps
// each slice in L2/L3 while all token tiles pass through it. Measured with fflite-bench on one
// Zen 4 core (AVX-512, 2 MiB L2, 32 MiB L3; FMA peak measured 116 GFLOP/s), llama, 128 tokens:
//   slice 0 (one operator per matrix) 41 GFLOP/s, 1 MiB 99, 2 MiB 99, 4 MiB 91;
//   whole layer: 99 GFLOP/s = 86% of peak, 2.2x plain XNNPACK (one operator per matrix).
// At decode (1 token) slicing costs nothing: the same operators stream the weights at 23 GB/s
// cold, 96% of the read bandwidth measured in the same run (plain XNNPACK is also at the
// roofline there). One set of operators serves both ends, so the packed weights exist once.
//
// Tokens pass through in chunks of at most `token_chunk` = 128 (llama, 256 tokens: chunk 64
// 90 GFLOP/s, 128 99, 256 73: bigger chunks push the token panel out of L2); the chunk also bounds
// the [chunk, d_ff] scratch.
//
// Threads: the slices of a matrix are shared among the pool's threads (one parallel loop per
// matrix, each slice's operator on one thread; see RunMatrix).
#include "backends/xnnpack/xnnpack_backend.h"

#include <xnnpack.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_format.h"
#include "backends/reference/reference_backend.h"
#include "base/aligned_buffer.h"
#include "base/status_macros.h"
#include "base/tsan.h"
#include "format/writer.h"

namespace fflite {

namespace {

// XNNPACK reads (never writes) up to XNN_EXTRA_BYTES past the end of its inputs.
constexpr size_t kXnnTailBytes = XNN_EXTRA_BYTES;
// Slices are multiples of 16 output channels (XNNPACK's nr on AVX-512; a multiple of 8 and 4 for
// AVX/NEON), so only the last slice of a matrix has a partial tile.
constexpr size_t kSliceAlign = 16;
// Below this many multiply-adds (~10 us on one core) a matrix runs on the caller's thread: waking
// the pool would cost more than it saves.
constexpr size_t kMinParallelMacs = size_t{1} << 20;

absl::Status XnnError(xnn_status status, const std::string& what) {
  const std::string message =
      absl::StrFormat("%s: XNNPACK status %d", what, static_cast<int>(status));
  if (status == xnn_status_out_of_memory) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status InitializeXnnpack() {
  // Idempotent and thread-safe (XNNPACK initialises once); never deinitialised.
  const xnn_status status = xnn_initialize(/*allocator=*/nullptr);
  if (status == xnn_status_success) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "XNNPACK cannot run on this CPU (xnn_initialize: status %d)", static_cast<int>(status)));
}

struct OperatorDeleter {
  void operator()(xnn_operator_t op) const { xnn_delete_operator(op); }
};
using OperatorPtr = std::unique_ptr<xnn_operator, OperatorDeleter>;

struct ThreadpoolDeleter {
  void operator()(pthreadpool_t pool) const { pthreadpool_destroy(pool); }
};
using ThreadpoolPtr = std::unique_ptr<pthreadpool, ThreadpoolDeleter>;

// One weight matrix [out, in] as slices of output channels, each an operator owning its packed
// weights (and bias).
struct Matrix {
  struct Slice {
    OperatorPtr op;
    size_t first = 0;  // first output channel
  };
  std::vector<Slice> slices;
  size_t in = 0, out = 0;
};

// A tensor's values as f32: the mapped data itself for f32, else converted into `storage`.
const float* AsF32(const TensorView& t, std::vector<float>* storage) {
  if (!t.present()) return nullptr;
  if (t.dtype == DType::F32) return reinterpret_cast<const float*>(t.data);
  storage->resize(t.numel());
  ConvertElements(t.dtype, t.data, DType::F32, reinterpret_cast<uint8_t*>(storage->data()),
                  t.numel());
  return storage->data();
}

// Output channels per slice: about `slice_bytes` of packed weights, a multiple of kSliceAlign,
// with the slices of one matrix equal but for the last. With several threads the slice count is
// rounded up to a multiple of the thread count (threads take whole slices).
size_t SliceWidth(size_t in, size_t out, size_t slice_bytes, size_t threads) {
  size_t count = 1;
  if (slice_bytes != 0) {
    const size_t target = std::max<size_t>(kSliceAlign, slice_bytes / (in * sizeof(float)));
    count = std::max<size_t>(1, (out + target / 2) / target);
  }
  count = (count + threads - 1) / threads * threads;
  const size_t width = (out + count - 1) / count;
  return std::min(out, (width + kSliceAlign - 1) / kSliceAlign * kSliceAlign);
}

// y = W·x + b, clamped to [out_min, +inf).   W:[out, in] b:[out] or absent.
absl::Status PackMatrix(const TensorView& w, const TensorView& b, float out_min, size_t slice_bytes,
                        size_t threads, const std::string& what, Matrix* m) {
  m->out = static_cast<size_t>(w.shape[0]);
  m->in = static_cast<size_t>(w.shape[1]);
  std::vector<float> w_storage, b_storage;
  const float* weights = AsF32(w, &w_storage);  // [out, in]
  const float* bias = AsF32(b, &b_storage);     // [out] or nullptr
  const size_t width = SliceWidth(m->in, m->out, slice_bytes, threads);
  for (size_t first = 0; first < m->out; first += width) {
    const size_t n = std::min(width, m->out - first);
    xnn_operator_t op = nullptr;
    const xnn_status status = xnn_create_fully_connected_nc_f32(
        /*input_channels=*/m->in, /*output_channels=*/n, /*input_stride=*/m->in,
        /*output_stride=*/m->out, weights + first * m->in, bias != nullptr ? bias + first : nullptr,
        out_min, std::numeric_limits<float>::infinity(),
        /*flags=*/0, &op);
    if (status != xnn_status_success) {
      return XnnError(status, absl::StrFormat("%s: creating the fully-connected operator for "
                                              "output channels [%d, %d)",
                                              what, first, first + n));
    }
    m->slices.push_back({OperatorPtr(op), first});
  }
  return absl::OkStatus();
}

// What one layer runs. Dense layers own their operators; MoE layers go to the reference.
struct LayerPlan {
  bool moe = false;
  Matrix up, gate, down;  // gate: only when gated
  bool gated = false;
  F32ActivationFn activation = nullptr;  // nullptr: fused into `up` (non-gated ReLU clamp)
  size_t d_ff = 0;                       // d_ff_padded: the padding is exact (zeros)
  NormKind norm = NormKind::INVALID;     // INVALID: no norm
  bool pre_norm = false;
  float eps = 0.0f;
  AlignedBuffer<float> norm_weight;  // [d_model], f32, unit offset added
  AlignedBuffer<float> norm_bias;    // [d_model] or empty
  bool residual = false;
};

class XnnpackBackend : public Backend {
 public:
  XnnpackBackend(const Model& model, const Kernels& kernels) : model_(model), kernels_(kernels) {}

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
    const size_t d = model_.d_model();
    chunk_ = std::max<size_t>(1, std::min(config.max_tokens, options.token_chunk));
    size_t max_ff = 0;
    bool any_moe = false;
    plans_.resize(model_.layers().size());
    for (size_t i = 0; i < model_.layers().size(); ++i) {
      const LayerView& l = model_.layers()[i];
      LayerPlan& p = plans_[i];
      if (l.kind == LayerKind::kMoe) {
        p.moe = true;
        any_moe = true;
        continue;
      }
      FFLITE_RETURN_IF_ERROR(PlanDense(l, i, options.slice_bytes, &p));
      max_ff = std::max<size_t>(max_ff, p.d_ff);
    }
    // MoE is a later issue: until then its layers run, correctly but slowly, through the
    // reference backend (which reads the model's weights in place, so those stay mapped).
    if (any_moe) {
      FFLITE_ASSIGN_OR_RETURN(moe_backend_, CreateReferenceBackend(model_, config));
    }
    // The packed operators own copies of the dense weights: hand the file's pages back.
    for (const LayerView& l : model_.layers()) {
      if (l.kind != LayerKind::kDense) continue;
      for (const TensorView* t :
           {&l.ffn.up, &l.ffn.gate, &l.ffn.down, &l.ffn.up_bias, &l.ffn.gate_bias, &l.ffn.down_bias,
            &l.norm.weight, &l.norm.bias}) {
        model_.ReleaseTensorPages(*t);
      }
    }
    // Scratch, sized once: Run allocates nothing.
    if (max_ff > 0) {
      if (max_ff > std::numeric_limits<size_t>::max() / sizeof(float) / 2 / chunk_) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "scratch of %d tokens x d_ff %d does not fit the address space", chunk_, max_ff));
      }
      const bool ok = in_.Allocate(chunk_ * d, kXnnTailBytes) &&
                      hidden_.Allocate(chunk_ * max_ff, kXnnTailBytes) &&
                      gate_.Allocate(chunk_ * max_ff) && out_.Allocate(chunk_ * d);
      if (!ok) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "allocating scratch for %d tokens (d_model %d, d_ff %d) failed", chunk_, d, max_ff));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Run(size_t layer, const float* input, size_t n_tokens, float* output) override {
    const LayerPlan& p = plans_[layer];
    if (p.moe) return moe_backend_->Run(layer, input, n_tokens, output);
    const size_t d = model_.d_model();
    for (size_t t0 = 0; t0 < n_tokens; t0 += chunk_) {
      const size_t n = std::min(chunk_, n_tokens - t0);
      const float* x = input + t0 * d;  // [n, d], the caller's
      float* y = output + t0 * d;       // [n, d], the caller's
      // h = PreNorm(x) or x, in scratch: XNNPACK may read past the end of its input, which must
      // never be the caller's buffer.
      if (p.norm != NormKind::INVALID && p.pre_norm) {
        for (size_t t = 0; t < n; ++t) Normalize(p, x + t * d, in_.data() + t * d);
      } else {
        std::memcpy(in_.data(), x, n * d * sizeof(float));
      }
      // hidden = act(h·gateᵀ + b_gate) ⊙ (h·upᵀ + b_up)   or   act(h·upᵀ + b_up)   [n, d_ff]
      FFLITE_RETURN_IF_ERROR(RunMatrix(p.up, n, in_.data(), hidden_.data(), /*last=*/false));
      if (p.gated) {
        FFLITE_RETURN_IF_ERROR(RunMatrix(p.gate, n, in_.data(), gate_.data(), /*last=*/false));
        p.activation(n * p.d_ff, gate_.data(), hidden_.data(), hidden_.data());
      } else if (p.activation != nullptr) {
        p.activation(n * p.d_ff, hidden_.data(), nullptr, hidden_.data());
      }
      // f = hidden·downᵀ + b_down   [n, d]
      FFLITE_RETURN_IF_ERROR(RunMatrix(p.down, n, hidden_.data(), out_.data(),
                                       /*last=*/t0 + n == n_tokens));
      // y = [x +] f, then the post-norm if any.
      const bool post = p.norm != NormKind::INVALID && !p.pre_norm;
      if (p.residual) {
        F32Add(n * d, out_.data(), x, post ? out_.data() : y);
      } else if (!post) {
        std::memcpy(y, out_.data(), n * d * sizeof(float));
      }
      if (post) {
        for (size_t t = 0; t < n; ++t) Normalize(p, out_.data() + t * d, y + t * d);
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status PlanDense(const LayerView& l, size_t index, size_t slice_bytes, LayerPlan* p) {
    const FfnView& f = l.ffn;
    const std::string name = absl::StrFormat("layers[%d].ffn", index);
    p->gated = f.gated;
    p->d_ff = f.d_ff_padded;
    // A plain ReLU FFN needs no activation pass: the up operator clamps at 0.
    const bool fuse_relu = !f.gated && f.activation == Activation::RELU;
    p->activation = fuse_relu ? nullptr : kernels_.Activation(f.activation);
    const float inf = std::numeric_limits<float>::infinity();
    FFLITE_RETURN_IF_ERROR(PackMatrix(f.up, f.up_bias, fuse_relu ? 0.0f : -inf, slice_bytes,
                                      threads_, name + ".up", &p->up));
    if (f.gated) {
      FFLITE_RETURN_IF_ERROR(
          PackMatrix(f.gate, f.gate_bias, -inf, slice_bytes, threads_, name + ".gate", &p->gate));
    }
    FFLITE_RETURN_IF_ERROR(
        PackMatrix(f.down, f.down_bias, -inf, slice_bytes, threads_, name + ".down", &p->down));
    p->residual = l.residual;
    if (l.norm.present) {
      const size_t d = model_.d_model();
      p->norm = l.norm.kind;
      p->pre_norm = l.norm.placement == NormPlacement::PRE;
      p->eps = l.norm.eps;
      std::vector<float> storage;
      const float* w = AsF32(l.norm.weight, &storage);
      if (!p->norm_weight.Allocate(d)) return absl::ResourceExhaustedError(name + ": norm weight");
      for (size_t i = 0; i < d; ++i)
        p->norm_weight.data()[i] = w[i] + (l.norm.unit_offset ? 1.0f : 0.0f);
      if (l.norm.bias.present()) {
        const float* b = AsF32(l.norm.bias, &storage);
        if (!p->norm_bias.Allocate(d)) return absl::ResourceExhaustedError(name + ": norm bias");
        std::memcpy(p->norm_bias.data(), b, d * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

  // out[n, m.out] = in[n, m.in] · Wᵀ + b, slice by slice. With threads, one parallel loop over
  // the slices, each slice's operator running on one thread (set up without a pool): one
  // synchronisation per matrix instead of one per slice. On a loaded 2-core machine (the one the
  // numbers in the header come from) per-slice dispatch through XNNPACK's own pool measured
  // 400-1000 ms for llama up at 128 tokens, 2 threads, against 188 ms this way; at 1 token 41-47
  // against 20-24 ms.
  // `last`: the last matrix of this Run; the pool's threads then sleep instead of spinning, so
  // that they do not take cores from the caller's work between layers (attention, say), as
  // XNNPACK's runtime does with XNN_FLAG_YIELD_WORKERS.
  absl::Status RunMatrix(const Matrix& m, size_t n, const float* in, float* out, bool last) {
    SliceJob job{&m, n, in, out, {xnn_status_success}};
    if (threadpool_ != nullptr && m.slices.size() > 1 && n * m.in * m.out >= kMinParallelMacs) {
      // pthreadpool synchronises the hand-off itself, but TSan cannot see into it.
      FFLITE_TSAN_RELEASE(&job);
      pthreadpool_parallelize_1d(threadpool_.get(), RunSlice, &job, m.slices.size(),
                                 last ? PTHREADPOOL_FLAG_YIELD_WORKERS : 0);
      FFLITE_TSAN_ACQUIRE(&job);
    } else {
      for (size_t i = 0; i < m.slices.size(); ++i) RunSlice(&job, i);
    }
    const int status = job.status.load(std::memory_order_relaxed);
    if (status != xnn_status_success) {
      return XnnError(static_cast<xnn_status>(status), "running a fully-connected operator");
    }
    return absl::OkStatus();
  }

  struct SliceJob {
    const Matrix* m;
    size_t n;
    const float* in;          // [n, m->in] + XNN_EXTRA_BYTES
    float* out;               // [n, m->out]
    std::atomic<int> status;  // the last failure, or success
  };

  static void RunSlice(void* context, size_t i) {
    FFLITE_TSAN_ACQUIRE(context);
    SliceJob& job = *static_cast<SliceJob*>(context);
    const Matrix::Slice& s = job.m->slices[i];
    xnn_status status = xnn_setup_fully_connected_nc_f32(s.op.get(), job.n, job.in,
                                                         job.out + s.first, /*threadpool=*/nullptr);
    if (status == xnn_status_success) status = xnn_run_operator(s.op.get(), nullptr);
    if (status != xnn_status_success) job.status.store(status, std::memory_order_relaxed);
    FFLITE_TSAN_RELEASE(context);
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
  size_t threads_ = 1;
  ThreadpoolPtr threadpool_;      // null: one thread (everything runs on the caller's thread)
  std::vector<LayerPlan> plans_;  // [layers]
  std::unique_ptr<Backend> moe_backend_;  // reference, for MoE layers; null without them
  size_t chunk_ = 1;
  // Scratch for one chunk of tokens; the XNNPACK inputs carry XNN_EXTRA_BYTES of tail slack.
  AlignedBuffer<float> in_;      // [chunk, d_model] + tail: (pre-normed) input
  AlignedBuffer<float> hidden_;  // [chunk, max d_ff_padded] + tail: up output, then act ⊙ up
  AlignedBuffer<float> gate_;    // [chunk, max d_ff_padded]: gate output
  AlignedBuffer<float> out_;     // [chunk, d_model]: down output, then + residual
};

}  // namespace

bool XnnpackBackendAvailable(std::string* why) {
  const absl::Status status = InitializeXnnpack();
  if (!status.ok() && why != nullptr) *why = std::string(status.message());
  return status.ok();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackendWithOptions(
    const Model& model, const BackendConfig& config, const XnnpackBackendOptions& options) {
  const Kernels& kernels = options.kernels != nullptr ? *options.kernels : BestKernels();
  auto backend = std::make_unique<XnnpackBackend>(model, kernels);
  FFLITE_RETURN_IF_ERROR(backend->Init(config, options));
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateXnnpackBackend(const Model& model,
                                                              const BackendConfig& config) {
  return CreateXnnpackBackendWithOptions(model, config, XnnpackBackendOptions());
}

}  // namespace fflite
