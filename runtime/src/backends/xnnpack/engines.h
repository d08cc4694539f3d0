// The matrix engines of the xnnpack backend: each way of computing y = x·Wᵀ + b for one weight
// matrix, behind one calling convention. The backend picks an engine per matrix (per call for
// routed experts, by their token count) and never looks inside one.
//
//   engine            weights                              prepared              best for
//   packed (XNNPACK)  f32/f16/bf16, packed f32 copies      on first use          many tokens
//   direct            f32/f16/bf16 read from the file      nothing (in place)    a few tokens
//   quant             i8/i4 panels read from the file      nothing (in place)    every count
//
// Every engine computes   y[n, y_stride] = x[n, x_stride] · Wᵀ + b   for one matrix, shares its
// output rows among the context's threads, and with `last` lets the pool's threads sleep
// afterwards (the last product of a Run). Kernels below the engines take plain pointers and
// shapes, never the file format's types.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_ENGINES_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_ENGINES_H_

#include <pthreadpool.h>
#include <xnnpack.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "format/model.h"
#include "kernels/kernels.h"

namespace fflite {

// Where an engine runs: the session's pool (nullptr: the caller's thread only) and its size.
struct EngineContext {
  pthreadpool_t pool = nullptr;
  size_t threads = 1;
  // Every parallel loop records here whether it left the pool's threads spinning (a loop without
  // PTHREADPOOL_FLAG_YIELD_WORKERS), so that the backend can put them to sleep at the end of a
  // Run: spinning workers take the cores from the caller's own work between sublayers (and, in
  // fflite-bench, from the other side of a comparison). nullptr: not recorded.
  bool* awake = nullptr;
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

// One weight matrix [out, in] as slices of output channels, each an operator owning its packed
// weights (and bias). Empty (no slices) when the matrix is not packed.
struct PackedMatrix {
  struct Slice {
    OperatorPtr op;
    size_t first = 0;  // first output channel
  };
  std::vector<Slice> slices;
  size_t in = 0, out = 0;
  bool empty() const { return slices.empty(); }
};

// Packs y = W·x + b, clamped to [out_min, +inf), in slices of about `slice_bytes` of packed
// weights (0: one operator), their count a multiple of ctx.threads, packed in parallel on
// ctx.pool (if any). W: [out, in] f32; b: [out] f32 or nullptr. Errors: ResourceExhausted /
// Internal from XNNPACK, naming `what` and the slice.
absl::Status PackMatrixF32(const float* weights, const float* bias, size_t out, size_t in,
                           float out_min, size_t slice_bytes, const EngineContext& ctx,
                           const std::string& what, PackedMatrix* m);
// The same from the model's tensors (f16/bf16 converted to f32 first; not quantised ones).
absl::Status PackMatrix(const TensorView& w, const TensorView& b, float out_min,
                        size_t slice_bytes, const EngineContext& ctx, const std::string& what,
                        PackedMatrix* m);
// Bytes of packed weights an [out, in] matrix takes: padded to kSliceAlign output channels, plus
// a bias per output channel.
uint64_t PackedMatrixBytes(uint64_t out, uint64_t in);

// out[n, m.out] = in[n, m.in] · Wᵀ + b; in carries kXnnTailBytes of readable slack.
absl::Status RunPacked(const PackedMatrix& m, size_t n, const float* in, float* out,
                       const EngineContext& ctx, bool last);

// --- direct: fflite's few-token kernel on the file's row-major f32/f16/bf16 weights. ---

// y[c, y_stride] = x[c, x_stride] · Wᵀ + b, W the file's [rows, k] tensor; bias [rows] f32 or
// nullptr. Rows are shared among threads in tiles of a multiple of 8.
void RunDirect(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
               const float* x, size_t x_stride, float* y, size_t y_stride,
               const EngineContext& ctx, bool last);

// --- quant: see quant_engine.h. ---

// A tensor's values as f32: the mapped data itself for f32, else converted into `storage`;
// nullptr for an absent tensor. Float dtypes only.
const float* AsF32(const TensorView& t, std::vector<float>* storage);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_XNNPACK_ENGINES_H_
