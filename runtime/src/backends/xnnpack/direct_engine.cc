// The direct engine: fflite's few-token kernel (kernels.gemv) on the file's row-major
// f32/f16/bf16 weights, read in place; rows shared among the pool's threads in tiles.
#include "backends/xnnpack/engines.h"
#include "base/tsan.h"

namespace fflite {

namespace {

struct GemvJob {
  F32GemvFn gemv;
  const uint8_t* w;  // [rows, k] of dtype
  DType dtype;
  size_t row_bytes;
  const float* bias;  // [rows] or nullptr
  size_t c, k;
  const float* x;
  size_t x_stride;
  float* y;
  size_t y_stride;
};

void RunGemvTile(void* context, size_t first, size_t rows) {
  GemvJob& job = *static_cast<GemvJob*>(context);
  FFLITE_TSAN_ACQUIRE(&job);
  job.gemv(job.c, job.k, rows, job.w + first * job.row_bytes, job.dtype,
           job.bias != nullptr ? job.bias + first : nullptr, job.x, job.x_stride, job.y + first,
           job.y_stride);
  FFLITE_TSAN_RELEASE(&job);
}

}  // namespace

void RunDirect(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
               const float* x, size_t x_stride, float* y, size_t y_stride,
               const EngineContext& ctx, bool last) {
  const size_t rows = static_cast<size_t>(w.shape[0]), k = static_cast<size_t>(w.shape[1]);
  GemvJob job{kernels.gemv, w.data, w.dtype, DTypeSize(w.dtype) * k, bias, c, k, x, x_stride,
              y, y_stride};
  if (ctx.pool != nullptr && c * rows * k >= kMinParallelMacs) {
    // About 4 tiles per thread, each a multiple of 8 rows.
    const size_t tile = ((rows + 4 * ctx.threads - 1) / (4 * ctx.threads) + 7) / 8 * 8;
    FFLITE_TSAN_RELEASE(&job);
    pthreadpool_parallelize_1d_tile_1d(ctx.pool, RunGemvTile, &job, rows, tile,
                                       PoolFlags(ctx, last));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    RunGemvTile(&job, 0, rows);
  }
}

}  // namespace fflite
