// The matrix engines of the CPU backend: each way of computing y = x·Wᵀ + b for one weight
// matrix, behind one calling convention. The backend picks an engine per matrix (per call for
// routed experts, by their token count) and never looks inside one.
//
//   engine            weights                              prepared              best for
//   packed (gemm)     f32/f16/bf16, packed panels (f32,    on first use          many tokens
//                     or bf16 with a bf16 kernel)
//   packed (XNNPACK)  f32/f16/bf16, packed f32 copies      on first use          many tokens
//   direct            f32/f16/bf16 read from the file      nothing (in place)    a few tokens
//   quant             i8/i4 panels read from the file      nothing (in place)    every count
//
// Every engine computes   y[n, y_stride] = x[n, x_stride] · Wᵀ + b   for one matrix, shares its
// output rows among the context's threads, and with `last` lets the pool's threads sleep
// afterwards (the last product of a Run). Kernels below the engines take plain pointers and
// shapes, never the file format's types.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_ENGINES_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_ENGINES_H_

#include <pthreadpool.h>
#include <xnnpack.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "format/model.h"
#include "backends/cpu/cpu_options.h"
#include "base/aligned_buffer.h"
#include "base/workers.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

namespace fflite {

// Where an engine runs: the session's workers (fflite's pool or the caller's parallel-for;
// nullptr: the calling thread only) and their count.
struct EngineContext {
  Workers* pool = nullptr;
  size_t threads = 1;
  // Every parallel loop records here whether it left the pool's threads spinning (a loop without
  // PTHREADPOOL_FLAG_YIELD_WORKERS), so that the backend can put them to sleep at the end of a
  // Run: spinning workers take the cores from the caller's own work between sublayers (and, in
  // fflite-bench, from the other side of a comparison). nullptr: not recorded.
  bool* awake = nullptr;
  // The gemm engine's packed activations: at least GemmScratchUnits of the largest product a
  // backend runs (the caller's, one Run at a time); nullptr when no matrix uses the engine.
  uint32_t* gemm_scratch = nullptr;
  size_t gemm_scratch_units = 0;  // its size
};

// The flags of a parallel loop: `last` (the last of a Run) yields the workers; records the state.
inline uint32_t PoolFlags(const EngineContext& ctx, bool last) {
  if (ctx.awake != nullptr) *ctx.awake = !last;
  return last ? PTHREADPOOL_FLAG_YIELD_WORKERS : 0;
}

// Below this many multiply-adds (~10 us on one core) a matrix runs on the caller's thread: waking
// the pool would cost more than it saves.
inline constexpr size_t kMinParallelMacs = size_t{1} << 20;

// --- packed: XNNPACK fully-connected operators over packed f32 copies of the weights. ---

// XNNPACK reads (never writes) up to XNN_EXTRA_BYTES past the end of its inputs.
inline constexpr size_t kXnnTailBytes = XNN_EXTRA_BYTES;
// Slices are multiples of 16 output channels (XNNPACK's nr on AVX-512; a multiple of 8 and 4 for
// AVX/NEON), so only the last slice of a matrix has a partial tile.
inline constexpr size_t kSliceAlign = 16;

// Initialises XNNPACK once (idempotent, thread-safe). FailedPrecondition when the CPU cannot run it.
absl::Status InitializeXnnpack();

struct OperatorDeleter {
  void operator()(xnn_operator_t op) const { xnn_delete_operator(op); }
};
using OperatorPtr = std::unique_ptr<xnn_operator, OperatorDeleter>;

// One weight matrix [out, in], packed for one of two engines: XNNPACK operators over slices of
// output channels, each owning its packed weights (and bias), or the gemm engine's panels
// (kernels/gemm.h). Empty (neither) when the matrix is not packed.
struct PackedMatrix {
  struct Slice {
    OperatorPtr op;
    size_t first = 0;  // first output channel
  };
  std::vector<Slice> slices;
  // The gemm engine: its kernel (nullptr: XNNPACK's slices), panels, f32 bias and clamp.
  const GemmKernel* gemm = nullptr;
  AlignedBuffer<uint32_t> panels;
  std::vector<float> bias;
  float out_min = 0.0f;
  size_t in = 0, out = 0;
  bool empty() const { return slices.empty() && gemm == nullptr; }
  // Bytes held: the gemm engine's panels and bias; XNNPACK's packed f32 weights and bias, padded
  // to kSliceAlign output channels per slice (as XNNPACK packs them, about).
  uint64_t bytes() const;
};

// Packs y = W·x + b, clamped to [out_min, +inf), in slices of about `slice_bytes` of packed
// weights (0: one operator), their count a multiple of ctx.threads, packed in parallel on
// ctx.pool (if any). W: [out, in] f32; b: [out] f32 or nullptr. Errors: ResourceExhausted /
// Internal from XNNPACK, naming `what` and the slice.
absl::Status PackMatrixF32(const float* weights, const float* bias, size_t out, size_t in,
                           float out_min, size_t slice_bytes, const EngineContext& ctx,
                           const std::string& what, PackedMatrix* m);
// The same from the model's tensors, for the engine `choice` names (XNNPACK: f16/bf16 converted
// to f32 first; not quantised ones).
absl::Status PackMatrix(const TensorView& w, const TensorView& b, float out_min,
                        const PackChoice& choice, const EngineContext& ctx,
                        const std::string& what, PackedMatrix* m);
// Bytes of packed weights a [out, in] matrix of `dtype` takes with `choice`: XNNPACK pads to
// kSliceAlign output channels, the gemm engine to its panel width; plus a bias per channel.
uint64_t PackedMatrixBytes(uint64_t out, uint64_t in, DType dtype, const PackChoice& choice);

// out[n, m.out] = in[n, m.in] · Wᵀ + b, then `epilogue` (declared below) on out; in carries
// kXnnTailBytes of readable slack.
struct Epilogue;
absl::Status RunPacked(const PackedMatrix& m, size_t n, const float* in, float* out,
                       const EngineContext& ctx, bool last, const Epilogue& epilogue);

// --- gemm: fflite's own engine (kernels/gemm.h), packed panels per ISA. ---

// Packs W: [out, in] (f32, f16 or bf16; bf16 only for a BF16 kernel) for `kernel`, panels packed
// in parallel on ctx's pool. bias: [out] f32 or nullptr. Errors: ResourceExhausted naming `what`.
absl::Status PackMatrixGemm(const GemmKernel& kernel, const void* w, DType w_dtype,
                            const float* bias, size_t out, size_t in, float out_min,
                            const EngineContext& ctx, const std::string& what, PackedMatrix* m);
// Units of ctx.gemm_scratch a product of n tokens over an `in`-wide matrix needs with `kernel`.
inline size_t GemmScratchUnits(const GemmKernel& kernel, size_t n, size_t in) {
  return kernel.ActivationBytes(n, in) / 4;
}
// An element-wise step applied to a product's outputs by the thread that computed them, while
// they are in cache: y = act(gate) · y (GLU, gate [n, y_stride]) or y = act(y) (gate nullptr),
// then the neuron edits y[., c] *= scale[c] (layer/neuron_scales.h) when scale is set.
struct Epilogue {
  F32ActivationFn activation = nullptr;  // nullptr: none
  const float* gate = nullptr;
  const float* scale = nullptr;  // [columns of y] or nullptr

  // On rows [r0, r1) × columns [c0, c1) of y [.., stride] (gate with the same stride).
  void Apply(float* y, size_t stride, size_t r0, size_t r1, size_t c0, size_t c1) const {
    if (r0 >= r1 || c0 >= c1) return;
    if (activation != nullptr) {
      // Whole rows are contiguous: one call.
      const size_t rows = c0 == 0 && c1 == stride ? 1 : r1 - r0;
      const size_t count = rows == 1 ? (r1 - r0 - 1) * stride + (c1 - c0) : c1 - c0;
      for (size_t i = 0; i < rows; ++i) {
        float* row = y + (r0 + i) * stride + c0;
        const float* g = gate != nullptr ? gate + (r0 + i) * stride + c0 : nullptr;
        activation(count, g != nullptr ? g : row, g != nullptr ? row : nullptr, row);
      }
    }
    if (scale == nullptr) return;
    for (size_t r = r0; r < r1; ++r) {
      float* row = y + r * stride;
      for (size_t c = c0; c < c1; ++c) row[c] *= scale[c];
    }
  }
};

// out[n, y_stride] = in[n, x_stride] · Wᵀ + b for a gemm-packed matrix: activations packed into
// ctx.gemm_scratch, then tiles × panel groups shared among the pool's threads, each applying
// `epilogue` to its outputs.
void RunGemm(const PackedMatrix& m, size_t n, const float* in, size_t x_stride, float* out,
             size_t y_stride, const EngineContext& ctx, bool last, const Epilogue& epilogue = {});

// A whole FFN on the gemm engine with its tokens split among the pool's threads: each thread packs
// its own tokens, runs gate (if any) and up over every panel, the activation (and GLU product) on
// its rows, packs them and runs down over every panel. No barrier between the products and no
// activations crossing between cores, but each thread reads all the weights: it pays where they
// stay in the last-level cache and every thread has many tokens (GemmFfnByTokens). Sums as
// RunGemm's: the same bits.
//   in [n, up.in], gate_out and hidden [n, up.out], out [n, down.out].
struct GemmFfn {
  const PackedMatrix* gate = nullptr;  // nullptr: not gated
  const PackedMatrix* up = nullptr;
  const PackedMatrix* down = nullptr;
  F32ActivationFn activation = nullptr;
  const float* scale = nullptr;  // neuron edits [up->out] or nullptr (Epilogue::scale)
};
// When the token split beats splitting each product's panels. Measured on a Zen 5 VM (2 threads,
// 128 tokens, median call time, panels -> tokens): BERT 768/3072 f32 (18.9 MB packed) 3.85 ->
// 3.60 ms, bf16 1.98 -> 1.77; 1024/4096 (33.5 MB f32, 16.8 bf16) equal; 2048/8192 and SwiGLU
// 2048/5632 (134-138 MB) 24.0 -> 26.6 and 24.3 -> 27.3 ms, Llama 95 -> 116 ms (the weights
// come from memory twice). At most this many bytes of packed weights in the FFN:
inline constexpr size_t kGemmFfnSplitBytes = size_t{24} << 20;
// and at least this many tokens per thread (4 tiles of 12; fewer would read the weights for
// little work, as an MoE expert's batch does).
inline constexpr size_t kGemmFfnTokensPerThread = 48;
// Whether f can run on the gemm engine as one FFN: every matrix on the engine, gate's kernel and
// shape the same as up's, down's input up's output.
bool GemmFfnWhole(const GemmFfn& f);
// Whether RunGemmFfnByTokens takes n tokens here: the pool has threads and the FFN passes the two
// limits above, every matrix is on the gemm engine (gate's kernel the same as up's) and ctx's
// scratch holds every thread's tiles.
bool GemmFfnByTokens(const GemmFfn& f, size_t n, const EngineContext& ctx);
// Units of scratch the token split needs beyond GemmScratchUnits(kernel, n, in): one partial tile
// per extra thread.
inline size_t GemmFfnExtraScratchUnits(const GemmKernel& kernel, size_t threads, size_t in) {
  return threads > 1 ? (threads - 1) * kernel.mr * kernel.Units(in) : 0;
}
// Optional per-token work of the caller's around the FFN, run by each range's thread on its
// tokens [t0, t1): `before` (writing in's rows) and `after` (reading out's rows).
struct GemmFfnRows {
  void (*before)(void* context, size_t t0, size_t t1) = nullptr;
  void (*after)(void* context, size_t t0, size_t t1) = nullptr;
  void* context = nullptr;
};
void RunGemmFfnByTokens(const GemmFfn& f, size_t n, const float* in, float* gate_out,
                        float* hidden, float* out, const EngineContext& ctx, bool last,
                        const GemmFfnRows& rows = {});

// The whole FFN f (GemmFfnWhole) over n tokens on the caller's thread alone: in [n, in_stride],
// gate_out and hidden [n, up.out], out [n, down.out]; scratch: at least GemmScratchUnits of n
// tokens over max(up.in, down.in) for f's kernels. The same bits as RunGemm's products.
void RunGemmFfnHere(const GemmFfn& f, size_t n, const float* in, size_t in_stride,
                    float* gate_out, float* hidden, float* out, uint32_t* scratch);

// --- direct: fflite's few-token kernel on the file's row-major f32/f16/bf16 weights. ---

// Row stride (in floats) of the direct kernel's token inputs: n plus one cache line, never a
// multiple of 4 KiB. When token rows are a multiple of 4 KiB apart (d_model 1024 or 2048 in f32)
// every token's x line and every weight row of a block fall in the same L1 set and evict each
// other: measured on mixtral-mini's up matrix [3584, 1024] at 32 tokens, the AVX-512 kernel ran at
// 71.5 GFLOP/s with stride 1024 and 92.7 with 1040 (AVX2: 66.4 and 85.3).
inline size_t DirectStride(size_t n) {
  size_t stride = n + 16;
  if ((stride * sizeof(float)) % 4096 == 0) stride += 16;
  return stride;
}

// y[c, y_stride] = x[c, x_stride] · Wᵀ + b, W the file's [rows, k] tensor; bias [rows] f32 or
// nullptr. Rows are shared among threads in tiles of a multiple of 8.
void RunDirect(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
               const float* x, size_t x_stride, float* y, size_t y_stride,
               const EngineContext& ctx, bool last);

// RunDirect for the listed rows only (ascending, n of them): y[t, r] for r in rows; the other
// columns of y are not written. The same bits as RunDirect for those rows.
void RunDirectListed(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
                     const float* x, size_t x_stride, float* y, size_t y_stride,
                     const uint32_t* rows, size_t n, const EngineContext& ctx, bool last);

// --- value rows: the down projection from a VALUE_ROWS matrix, reading only the neurons that fire.

// The neurons (columns of x [c, x_stride], i < k) that fire for some token, in order, into
// active [k]; returns their count. Fire: x != 0, or with before_relu (x a ReLU's input) x > 0;
// NaN fires either way (it must reach the output as the dense product would carry it).
size_t ActiveNeurons(const float* x, size_t c, size_t x_stride, size_t k, uint32_t* active,
                     bool before_relu);
// Whether a call with n of k neurons firing reads only theirs (the list) rather than every row:
// n at most dense_fraction of k, and dense_fraction above 0 (0: always every row).
inline bool ReadListed(size_t n, size_t k, double dense_fraction) {
  return dense_fraction > 0.0 && static_cast<double>(n) <= dense_fraction * static_cast<double>(k);
}
// y[c, y_stride] = x[c, x_stride] · Wᵀ + b for W [rows, k] stored as VALUE_ROWS ([k][rows]),
// through kernels.value_rows: only the value rows of the neurons that fire for some token are
// read, unless more than dense_fraction of them fire (then every row: the same bits). Columns
// are shared among threads. active: scratch [k]. Returns the number of value rows read.
size_t RunValueRows(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
                    const float* x, size_t x_stride, float* y, size_t y_stride,
                    double dense_fraction, uint32_t* active, const EngineContext& ctx, bool last);

// --- quant: see quant_engine.h. ---

// A tensor's values as f32: the mapped data itself for f32, else converted into `storage`;
// nullptr for an absent tensor. Float dtypes only.
const float* AsF32(const TensorView& t, std::vector<float>* storage);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_ENGINES_H_
