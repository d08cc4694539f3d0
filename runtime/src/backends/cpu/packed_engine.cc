// The packed engine: XNNPACK fully-connected operators over slices of output channels, so that a
// slice's packed weights stay in cache while every token tile passes through it.
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
// matrix, each slice's operator on one thread; see RunPacked).
#include <algorithm>
#include <atomic>
#include <limits>

#include "absl/strings/str_format.h"
#include "backends/cpu/engines.h"
#include "base/status_macros.h"
#include "base/tsan.h"
#include "format/writer.h"

namespace fflite {

namespace {

absl::Status XnnError(xnn_status status, const std::string& what) {
  const std::string message =
      absl::StrFormat("%s: XNNPACK status %d", what, static_cast<int>(status));
  if (status == xnn_status_out_of_memory) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
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

}  // namespace

absl::Status InitializeXnnpack() {
  // Idempotent and thread-safe (XNNPACK initialises once); never deinitialised.
  const xnn_status status = xnn_initialize(/*allocator=*/nullptr);
  if (status == xnn_status_success) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "XNNPACK cannot run on this CPU (xnn_initialize: status %d)", static_cast<int>(status)));
}

// A tensor's values as f32: the mapped data itself for f32, else converted into `storage`.
const float* AsF32(const TensorView& t, std::vector<float>* storage) {
  if (!t.present()) return nullptr;
  if (t.dtype == DType::F32) return reinterpret_cast<const float*>(t.data);
  storage->resize(t.numel());
  ConvertElements(t.dtype, t.data, DType::F32, reinterpret_cast<uint8_t*>(storage->data()),
                  t.numel());
  return storage->data();
}

// y = W·x + b, clamped to [out_min, +inf).   W:[out, in] f32, b:[out] f32 or nullptr.
// The slices' operators are created (their weights packed) in parallel on ctx's pool.
namespace {
struct PackJob {
  const float* weights;
  const float* bias;
  size_t in, out, width;
  float out_min;
  std::vector<xnn_operator_t>* ops;
  std::vector<xnn_status>* statuses;
};
void PackSlice(void* context, size_t i) {
  const PackJob& job = *static_cast<const PackJob*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  const size_t first = i * job.width, n = std::min(job.width, job.out - first);
  (*job.statuses)[i] = xnn_create_fully_connected_nc_f32(
      /*input_channels=*/job.in, /*output_channels=*/n, /*input_stride=*/job.in,
      /*output_stride=*/job.out, job.weights + first * job.in,
      job.bias != nullptr ? job.bias + first : nullptr, job.out_min,
      std::numeric_limits<float>::infinity(), /*flags=*/0, &(*job.ops)[i]);
  FFLITE_TSAN_RELEASE(context);
}
}  // namespace

absl::Status PackMatrixF32(const float* weights, const float* bias, size_t out, size_t in,
                           float out_min, size_t slice_bytes, const EngineContext& ctx,
                           const std::string& what, PackedMatrix* m) {
  m->out = out;
  m->in = in;
  const size_t width = SliceWidth(m->in, m->out, slice_bytes, ctx.threads);
  const size_t count = (m->out + width - 1) / width;
  std::vector<xnn_operator_t> ops(count, nullptr);
  std::vector<xnn_status> statuses(count, xnn_status_success);
  PackJob job{weights, bias, in, out, width, out_min, &ops, &statuses};
  if (ctx.pool != nullptr && ctx.threads > 1 && count > 1) {
    FFLITE_TSAN_RELEASE(&job);
    ctx.pool->For(PackSlice, &job, count, PoolFlags(ctx, /*last=*/true));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    for (size_t i = 0; i < count; ++i) PackSlice(&job, i);
  }
  absl::Status status = absl::OkStatus();
  for (size_t i = 0; i < count; ++i) {
    if (statuses[i] != xnn_status_success && status.ok()) {
      status = XnnError(statuses[i], absl::StrFormat("%s: creating the fully-connected operator "
                                                     "for output channels [%d, %d)",
                                                     what, i * width,
                                                     std::min(out, (i + 1) * width)));
    }
    // Every operator created goes into the matrix, so that it is deleted with it (a failed
    // slice has none; the caller discards the matrix with the error).
    if (ops[i] != nullptr) m->slices.push_back({OperatorPtr(ops[i]), i * width});
  }
  return status;
}

// The same from the model's tensors, for the engine `choice` names.
absl::Status PackMatrix(const TensorView& file_w, const TensorView& b, float out_min,
                        const PackChoice& choice, const EngineContext& ctx,
                        const std::string& what, PackedMatrix* m) {
  std::vector<uint8_t> transposed;  // a VALUE_ROWS down matrix, back to [out, in] for packing
  const TensorView w = RowMajorView(file_w, &transposed);
  std::vector<float> w_storage, b_storage;
  const float* bias = AsF32(b, &b_storage);  // [out] or nullptr
  const size_t out = static_cast<size_t>(w.shape[0]), in = static_cast<size_t>(w.shape[1]);
  if (const GemmKernel* gemm = choice.Gemm(w.dtype)) {
    // bf16 pairs, 16-bit panels as stored, or f32 panels converted panel by panel from the
    // file's f16/bf16 (no f32 copy of the whole matrix).
    return PackMatrixGemm(*gemm, w.data, w.dtype, bias, out, in, out_min, ctx, what, m);
  }
  const float* weights = AsF32(w, &w_storage);  // [out, in]
  return PackMatrixF32(weights, bias, out, in, out_min, choice.slice_bytes, ctx, what, m);
}

uint64_t PackedMatrixBytes(uint64_t out, uint64_t in, DType dtype, const PackChoice& choice) {
  if (const GemmKernel* gemm = choice.Gemm(dtype)) {
    return uint64_t{gemm->Panels(out)} * gemm->nr * gemm->Units(in) * gemm->SlotBytes() +
           out * sizeof(float);
  }
  // XNNPACK packs each slice's weights and bias (zeros when absent) in tiles of nr output
  // channels (16 on AVX-512; 8 or 4 elsewhere, so this slightly overestimates there).
  const uint64_t padded = (out + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
  return padded * (in + 1) * sizeof(float);
}

uint64_t PackedMatrix::bytes() const {
  if (gemm != nullptr) return uint64_t{panels.size()} * sizeof(uint32_t) + bias.size() * 4;
  if (slices.empty()) return bias.size() * sizeof(float);
  uint64_t padded = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const size_t end = i + 1 < slices.size() ? slices[i + 1].first : out;
    padded += (end - slices[i].first + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
  }
  return padded * (in + 1) * sizeof(float) + bias.size() * sizeof(float);
}

namespace {

struct SliceJob {
  const PackedMatrix* m;
  size_t n;
  const float* in;          // [n, m->in] + XNN_EXTRA_BYTES
  float* out;               // [n, m->out]
  std::atomic<int> status;  // the last failure, or success
};

void RunSlice(void* context, size_t i) {
  SliceJob& job = *static_cast<SliceJob*>(context);
  FFLITE_TSAN_ACQUIRE(&job);
  const PackedMatrix::Slice& s = job.m->slices[i];
  xnn_status status = xnn_setup_fully_connected_nc_f32(s.op.get(), job.n, job.in,
                                                       job.out + s.first, /*threadpool=*/nullptr);
  if (status == xnn_status_success) status = xnn_run_operator(s.op.get(), nullptr);
  if (status != xnn_status_success) job.status.store(status, std::memory_order_relaxed);
  FFLITE_TSAN_RELEASE(&job);
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

}  // namespace

absl::Status RunPacked(const PackedMatrix& m, size_t n, const float* in, float* out,
                       const EngineContext& ctx, bool last, const Epilogue& epilogue) {
  if (m.gemm != nullptr) {
    RunGemm(m, n, in, m.in, out, m.out, ctx, last, epilogue);
    return absl::OkStatus();
  }
  SliceJob job{&m, n, in, out, {xnn_status_success}};
  if (ctx.pool != nullptr && m.slices.size() > 1 && n * m.in * m.out >= kMinParallelMacs) {
    FFLITE_TSAN_RELEASE(&job);
    ctx.pool->For(RunSlice, &job, m.slices.size(),
                               PoolFlags(ctx, last));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    for (size_t i = 0; i < m.slices.size(); ++i) RunSlice(&job, i);
  }
  const int status = job.status.load(std::memory_order_relaxed);
  if (status != xnn_status_success) {
    return XnnError(static_cast<xnn_status>(status), "running a fully-connected operator");
  }
  epilogue.Apply(out, m.out, 0, n, 0, m.out);
  return absl::OkStatus();
}

}  // namespace fflite
