// The quantised matrix engine: optional block rotation of the activations, then the float- or
// int8-activation kernel over panels of rows shared among the pool's threads.
#include "backends/xnnpack/quant_engine.h"

#include <algorithm>
#include <cstring>

#include "base/tsan.h"
#include "format/quant_layout.h"

namespace fflite {

namespace {

struct Job {
  const QuantEngine* engine;
  bool gemm;
  const uint8_t* w;
  DType dtype;
  size_t panel_bytes;
  const float* bias;
  size_t c, k, rows;
  const float* x;
  size_t x_stride;
  const QActBlock* xq;
  float* y;
  size_t y_stride;
};

// Rows [first, first + n) (first a multiple of 16).
void RunTile(void* context, size_t first, size_t n) {
  const Job& job = *static_cast<const Job*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  const uint8_t* w = job.w + first / kQuantPanelRows * job.panel_bytes;
  const float* bias = job.bias != nullptr ? job.bias + first : nullptr;
  if (job.gemm) {
    job.engine->gemm().qgemm(job.c, job.k, n, w, job.dtype, bias, job.xq, job.y + first,
                             job.y_stride);
  } else {
    job.engine->gemv().qgemv(job.c, job.k, n, w, job.dtype, bias, job.x, job.x_stride,
                             job.y + first, job.y_stride);
  }
  FFLITE_TSAN_RELEASE(context);
}

// Whether x[c, x_stride] (k values per token) holds only finite values: an integer test of the
// exponent bits, which the compiler vectorises (a float sum would be a latency-bound chain).
bool AllFinite(size_t c, size_t k, const float* x, size_t x_stride) {
  for (size_t t = 0; t < c; ++t) {
    const float* row = x + t * x_stride;
    uint32_t bad = 0;
    for (size_t j = 0; j < k; ++j) {
      uint32_t bits;
      std::memcpy(&bits, row + j, sizeof(bits));
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad != 0) return false;
  }
  return true;
}

}  // namespace

QuantEngine::QuantEngine(const QGemvKernel& gemv, const QGemmKernel& gemm, size_t gemm_min_tokens)
    : gemv_(gemv),
      gemm_(gemm),
      gemm_min_tokens_i8_(gemm_min_tokens != kQuantGemmTokensAuto
                              ? gemm_min_tokens
                              : DefaultQuantGemmMinTokens(DType::I8, gemv, gemm)),
      gemm_min_tokens_i4_(gemm_min_tokens != kQuantGemmTokensAuto
                              ? gemm_min_tokens
                              : DefaultQuantGemmMinTokens(DType::I4, gemv, gemm)) {}

bool QuantEngine::Reserve(size_t max_tokens, size_t max_k) {
  const size_t kp = (max_k + kQuantBlock - 1) / kQuantBlock * kQuantBlock;
  max_tokens_ = max_tokens;
  max_k_ = kp;
  return rotated_.Allocate(max_tokens * kp) && xq_.Allocate(max_tokens * (kp / kQuantBlock));
}

void QuantEngine::Run(const TensorView& w, const float* bias, size_t c, const float* x,
                      size_t x_stride, float* y, size_t y_stride, const EngineContext& ctx,
                      bool last) {
  const size_t rows = static_cast<size_t>(w.shape[0]);
  size_t k = static_cast<size_t>(w.shape[1]);
  const QuantGeometry g = QuantMatrixGeometry(w.dtype, rows, k);
  if (w.layout == Layout::PANEL16_K4_HADAMARD32) {
    // x' = R·x per block of 32 (zero-padded past k): the stored weights are W·Rᵀ.
    const size_t kp = g.k_blocks * kQuantBlock;
    for (size_t t = 0; t < c; ++t) {
      float* r = rotated_.data() + t * kp;
      std::memcpy(r, x + t * x_stride, k * sizeof(float));
      std::memset(r + k, 0, (kp - k) * sizeof(float));
      for (size_t b = 0; b < g.k_blocks; ++b) Rotate32(r + b * kQuantBlock);
    }
    x = rotated_.data();
    x_stride = kp;
    k = kp;
  }
  // Int8 activations cannot carry a NaN or an infinity: a call with one takes the float path,
  // which propagates it to the token's outputs as every other engine does. (One pass over the
  // activations: c·k reads against c·k·rows multiply-adds.)
  bool gemm = UsesGemm(w.dtype, c);
  if (gemm) gemm = AllFinite(c, k, x, x_stride);
  Job job{this, gemm, w.data, w.dtype, static_cast<size_t>(g.panel_bytes), bias, c, k,
          rows, x, x_stride, xq_.data(), y, y_stride};
  if (job.gemm) gemm_.quantize_activations(c, k, x, x_stride, xq_.data());
  if (ctx.pool != nullptr && ctx.threads > 1 && c * rows * k >= kMinParallelMacs &&
      rows > kQuantPanelRows) {
    // About 4 tiles per thread, whole panels each.
    const size_t panels = (rows + kQuantPanelRows - 1) / kQuantPanelRows;
    const size_t tile = std::max<size_t>(1, (panels + 4 * ctx.threads - 1) / (4 * ctx.threads)) *
                        kQuantPanelRows;
    FFLITE_TSAN_RELEASE(&job);
    pthreadpool_parallelize_1d_tile_1d(ctx.pool, RunTile, &job, rows, tile,
                                       PoolFlags(ctx, last));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    RunTile(&job, 0, rows);
  }
}

}  // namespace fflite
