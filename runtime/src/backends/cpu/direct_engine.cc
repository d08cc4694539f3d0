// The direct engine: fflite's few-token kernel (kernels.gemv) on the file's row-major
// f32/f16/bf16 weights, read in place; rows shared among the pool's threads in tiles.
#include "backends/cpu/engines.h"
#include "base/tsan.h"

namespace fflite {

namespace {

struct GemvJob {
  F32GemvFn gemv;
  const uint8_t* w;  // [rows, k] of dtype
  FloatType dtype;
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

struct ValueRowsJob {
  F32ValueRowsFn kernel;
  size_t c, n;
  const uint32_t* rows;  // nullptr: every row
  const uint8_t* v;      // [k][cols] of dtype
  FloatType dtype;
  size_t elem, v_stride;
  const float* bias;  // [cols] or nullptr
  const float* x;
  size_t x_stride;
  float* y;
  size_t y_stride;
};

void RunValueRowsTile(void* context, size_t first, size_t cols) {
  ValueRowsJob& job = *static_cast<ValueRowsJob*>(context);
  FFLITE_TSAN_ACQUIRE(&job);
  job.kernel(job.c, cols, job.n, job.rows, job.v + first * job.elem, job.dtype, job.v_stride,
             job.bias != nullptr ? job.bias + first : nullptr, job.x, job.x_stride, job.y + first,
             job.y_stride);
  FFLITE_TSAN_RELEASE(&job);
}

struct ListedGemvJob {
  F32GemvFn gemv;
  const uint8_t* w;  // [rows, k] of dtype
  FloatType dtype;
  size_t row_bytes;
  const float* bias;
  size_t c, k;
  const float* x;
  size_t x_stride;
  float* y;
  size_t y_stride;
  const uint32_t* rows;  // ascending
};

// Entries [first, first + count) of the list, as runs of consecutive rows (one kernel call each:
// the kernel's sums do not depend on how rows are split).
void RunListedGemvTile(void* context, size_t first, size_t count) {
  ListedGemvJob& job = *static_cast<ListedGemvJob*>(context);
  FFLITE_TSAN_ACQUIRE(&job);
  for (size_t j = first; j < first + count;) {
    const size_t r0 = job.rows[j];
    size_t run = 1;
    while (j + run < first + count && job.rows[j + run] == r0 + run) ++run;
    job.gemv(job.c, job.k, run, job.w + r0 * job.row_bytes, job.dtype,
             job.bias != nullptr ? job.bias + r0 : nullptr, job.x, job.x_stride, job.y + r0,
             job.y_stride);
    j += run;
  }
  FFLITE_TSAN_RELEASE(&job);
}

}  // namespace

void RunDirectListed(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
                     const float* x, size_t x_stride, float* y, size_t y_stride,
                     const uint32_t* rows, size_t n, const EngineContext& ctx, bool last) {
  const size_t k = static_cast<size_t>(w.shape[1]);
  const FloatType w_type = FloatTypeOf(w.dtype);
  ListedGemvJob job{kernels.gemv, w.data, w_type, DTypeSize(w.dtype) * k, bias, c, k, x, x_stride,
                    y, y_stride, rows};
  if (ctx.pool != nullptr && c * n * k >= kMinParallelMacs) {
    const size_t tile = (n + 4 * ctx.threads - 1) / (4 * ctx.threads);
    FFLITE_TSAN_RELEASE(&job);
    ctx.pool->ForTiles(RunListedGemvTile, &job, n, tile,
                                       PoolFlags(ctx, last));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    RunListedGemvTile(&job, 0, n);
  }
}

namespace {

// Whether one value fired: nonzero, or above zero before a ReLU; NaN fires either way.
template <bool kBeforeRelu>
inline bool Fired(float v) {
  return kBeforeRelu ? !(v <= 0.0f) : v != 0.0f;
}

template <bool kBeforeRelu>
size_t ListFired(const float* x, size_t c, size_t x_stride, size_t k, uint32_t* active) {
  size_t n = 0;
  if (c == 1) {
    // Branch-free: the index is always written, and kept when the neuron fired.
    for (size_t i = 0; i < k; ++i) {
      active[n] = static_cast<uint32_t>(i);
      n += Fired<kBeforeRelu>(x[i]);
    }
    return n;
  }
  for (size_t i = 0; i < k; ++i) {
    bool fired = false;
    for (size_t t = 0; t < c; ++t) fired |= Fired<kBeforeRelu>(x[t * x_stride + i]);
    active[n] = static_cast<uint32_t>(i);
    n += fired;
  }
  return n;
}

}  // namespace

size_t ActiveNeurons(const float* x, size_t c, size_t x_stride, size_t k, uint32_t* active,
                     bool before_relu) {
  return before_relu ? ListFired<true>(x, c, x_stride, k, active)
                     : ListFired<false>(x, c, x_stride, k, active);
}

size_t RunValueRows(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
                    const float* x, size_t x_stride, float* y, size_t y_stride,
                    double dense_fraction, uint32_t* active, const EngineContext& ctx,
                    bool last) {
  const size_t cols = static_cast<size_t>(w.shape[0]), k = static_cast<size_t>(w.shape[1]);
  size_t n = ActiveNeurons(x, c, x_stride, k, active, /*before_relu=*/false);
  const uint32_t* rows = active;
  if (!ReadListed(n, k, dense_fraction)) {
    rows = nullptr;  // most neurons fired: every row, streamed in order (the same bits)
    n = k;
  }
  const size_t elem = DTypeSize(w.dtype);
  const FloatType w_type = FloatTypeOf(w.dtype);
  ValueRowsJob job{kernels.value_rows, c, n, rows, w.data, w_type, elem, cols, bias, x, x_stride, y,
                   y_stride};
  if (ctx.pool != nullptr && c * n * cols >= kMinParallelMacs) {
    // About 2 tiles per thread, each a multiple of 64 columns (a few cache lines of a row).
    const size_t tile = ((cols + 2 * ctx.threads - 1) / (2 * ctx.threads) + 63) / 64 * 64;
    FFLITE_TSAN_RELEASE(&job);
    ctx.pool->ForTiles(RunValueRowsTile, &job, cols, tile,
                                       PoolFlags(ctx, last));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    RunValueRowsTile(&job, 0, cols);
  }
  return n;
}

void RunDirect(const Kernels& kernels, const TensorView& w, const float* bias, size_t c,
               const float* x, size_t x_stride, float* y, size_t y_stride,
               const EngineContext& ctx, bool last) {
  const size_t rows = static_cast<size_t>(w.shape[0]), k = static_cast<size_t>(w.shape[1]);
  const FloatType w_type = FloatTypeOf(w.dtype);
  GemvJob job{kernels.gemv, w.data, w_type, DTypeSize(w.dtype) * k, bias, c, k, x, x_stride, y,
              y_stride};
  if (ctx.pool != nullptr && c * rows * k >= kMinParallelMacs) {
    // About 4 tiles per thread, each a multiple of 8 rows.
    const size_t tile = ((rows + 4 * ctx.threads - 1) / (4 * ctx.threads) + 7) / 8 * 8;
    FFLITE_TSAN_RELEASE(&job);
    ctx.pool->ForTiles(RunGemvTile, &job, rows, tile,
                                       PoolFlags(ctx, last));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    RunGemvTile(&job, 0, rows);
  }
}

}  // namespace fflite
