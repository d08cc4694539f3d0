// The quantised matrix engine: optional block rotation of the activations and their int8 form
// (tokens shared among the pool's threads), then the float- or int8-activation kernel over panels
// of rows shared among them, each thread applying the epilogue to its rows.
#include "backends/cpu/quant_engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/tsan.h"
#include "format/quant_layout.h"

namespace fflite {

namespace {

struct Job {
  const QuantEngine* engine;
  bool gemm;
  QuantType type;
  size_t panel_bytes;
  size_t c, k, rows;
  const float* x;
  size_t x_stride;
  const QActBlock* xq;
  size_t y_stride;
  const QuantEngine::Product* products;  // all over the same rows; the epilogue on the last
  size_t count;
  const Epilogue* epilogue;
};

// Rows [first, first + n) (first a multiple of 16) of each product, then the epilogue on them.
void RunTile(void* context, size_t first, size_t n) {
  const Job& job = *static_cast<const Job*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  for (size_t i = 0; i < job.count; ++i) {
    const QuantEngine::Product& p = job.products[i];
    const uint8_t* w = p.w + first / kQuantPanelRows * job.panel_bytes;
    const float* bias = p.bias != nullptr ? p.bias + first : nullptr;
    if (job.gemm) {
      job.engine->gemm().qgemm(job.c, job.k, n, w, job.type, bias, job.xq, p.y + first,
                               job.y_stride);
    } else {
      job.engine->gemv().qgemv(job.c, job.k, n, w, job.type, bias, job.x, job.x_stride,
                               p.y + first, job.y_stride);
    }
  }
  job.epilogue->Apply(job.products[job.count - 1].y, job.y_stride, 0, job.c, first, first + n);
  FFLITE_TSAN_RELEASE(context);
}

// Whether row[k] holds only finite values: an integer test of the exponent bits, which the
// compiler vectorises (a float sum would be a latency-bound chain).
bool AllFinite(size_t k, const float* row) {
  uint32_t bad = 0;
  for (size_t j = 0; j < k; ++j) {
    uint32_t bits;
    std::memcpy(&bits, row + j, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// The activations' preparation, per token: R·x per block of 32 into `rotated` by `rotate`
// (zero-padded from k to kp) when set, then the int8 blocks into xq by `quantize` when set, unless
// a value is not finite.
struct Prep {
  const float* x;
  size_t x_stride, k, kp;
  float* rotated;  // nullptr: no rotation
  RotateBlocksFn rotate;
  QuantizeActivationsFn quantize;  // nullptr: no int8 blocks
  QActBlock* xq;
  std::atomic<bool> nonfinite{false};
};

// Tokens [first, first + n).
void PrepareTokens(void* context, size_t first, size_t n) {
  Prep& prep = *static_cast<Prep*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  bool nonfinite = false;
  for (size_t t = first; t < first + n; ++t) {
    const float* row = prep.x + t * prep.x_stride;
    size_t k = prep.k;
    if (prep.rotated != nullptr) {
      // The whole blocks straight from x, the last one (when k is not a multiple of 32) from a
      // zero-padded copy.
      float* r = prep.rotated + t * prep.kp;
      const size_t whole = k / kQuantBlock, tail = k - whole * kQuantBlock;
      prep.rotate(whole, row, r);
      if (tail != 0) {
        float* last = r + whole * kQuantBlock;
        std::memcpy(last, row + whole * kQuantBlock, tail * sizeof(float));
        std::memset(last + tail, 0, (kQuantBlock - tail) * sizeof(float));
        prep.rotate(1, last, last);
      }
      row = r;
      k = prep.kp;
    }
    if (prep.quantize == nullptr || nonfinite) continue;
    if (!AllFinite(k, row)) {
      nonfinite = true;
      continue;
    }
    prep.quantize(1, k, row, k, prep.xq + t * (prep.kp / kQuantBlock));
  }
  if (nonfinite) prep.nonfinite.store(true, std::memory_order_relaxed);
  FFLITE_TSAN_RELEASE(context);
}

}  // namespace

QuantEngine::QuantEngine(const QGemvKernel& gemv, const QGemmKernel& gemm, size_t gemm_min_tokens)
    : gemv_(gemv), gemm_(gemm) {
  for (size_t t = 0; t < kQuantTypeCount; ++t) {
    gemm_min_tokens_[t] =
        gemm_min_tokens != kQuantGemmTokensAuto
            ? gemm_min_tokens
            : DefaultQuantGemmMinTokens(static_cast<QuantType>(t), gemv, gemm);
  }
}

bool QuantEngine::Reserve(size_t max_tokens, size_t max_k) {
  const size_t kp = (max_k + kQuantBlock - 1) / kQuantBlock * kQuantBlock;
  max_tokens_ = max_tokens;
  max_k_ = kp;
  return rotated_.Allocate(max_tokens * kp) && xq_.Allocate(max_tokens * (kp / kQuantBlock));
}

void QuantEngine::Run(const TensorView& w, const float* bias, size_t c, const float* x,
                      size_t x_stride, float* y, size_t y_stride, const EngineContext& ctx,
                      bool last, const Epilogue& epilogue) {
  const Product product{w.data, bias, y};
  RunProducts(w, &product, 1, c, x, x_stride, y_stride, ctx, last, epilogue);
}

void QuantEngine::RunPair(const TensorView& gate_w, const float* gate_bias, float* gate,
                          const TensorView& up_w, const float* up_bias, size_t c, const float* x,
                          size_t x_stride, float* y, size_t y_stride, const EngineContext& ctx,
                          bool last, const Epilogue& epilogue) {
  const Product products[2] = {{gate_w.data, gate_bias, gate}, {up_w.data, up_bias, y}};
  RunProducts(gate_w, products, 2, c, x, x_stride, y_stride, ctx, last, epilogue);
}

void QuantEngine::RunProducts(const TensorView& w, const Product* products, size_t count,
                              size_t c, const float* x, size_t x_stride, size_t y_stride,
                              const EngineContext& ctx, bool last, const Epilogue& epilogue) {
  const size_t rows = static_cast<size_t>(w.shape[0]);
  size_t k = static_cast<size_t>(w.shape[1]);
  const QuantGeometry g = QuantMatrixGeometry(w.dtype, rows, k);
  const bool parallel = ctx.pool != nullptr && ctx.threads > 1 &&
                        count * c * rows * k >= kMinParallelMacs && rows > kQuantPanelRows;
  // Int8 activations cannot carry a NaN or an infinity: a call with one takes the float path,
  // which propagates it to the token's outputs as every other engine does. (One pass over the
  // activations: c·k reads against c·k·rows multiply-adds.)
  bool gemm = UsesGemm(QuantTypeOf(w.dtype), c);
  const bool rotate = w.layout == Layout::PANEL16_K4_HADAMARD32;
  if (rotate || gemm) {
    // x' = R·x per block of 32 (zero-padded past k): the stored weights are W·Rᵀ. The tokens are
    // shared among the threads when the product is (each token's blocks are the same whoever
    // computes them).
    const size_t kp = g.k_blocks * kQuantBlock;
    Prep prep{x, x_stride, k, kp, rotate ? rotated_.data() : nullptr, gemm_.rotate_blocks,
              gemm ? gemm_.quantize_activations : nullptr, xq_.data()};
    if (parallel && c > 1) {
      const size_t tile = (c + ctx.threads - 1) / ctx.threads;
      FFLITE_TSAN_RELEASE(&prep);
      ctx.pool->ForTiles(PrepareTokens, &prep, c, tile,
                                         PoolFlags(ctx, false));
      FFLITE_TSAN_ACQUIRE(&prep);
    } else {
      PrepareTokens(&prep, 0, c);
    }
    if (gemm && prep.nonfinite.load(std::memory_order_relaxed)) gemm = false;
    if (rotate) {
      x = rotated_.data();
      x_stride = kp;
      k = kp;
    }
  }
  Job job{this, gemm, QuantTypeOf(w.dtype), static_cast<size_t>(g.panel_bytes), c, k, rows, x,
          x_stride, xq_.data(), y_stride, products, count, &epilogue};
  if (parallel) {
    // About 8 tiles per thread and product (whole panels each), so that the wait for the slowest
    // thread at the end is short: on a 2-core Xeon VM, i8 Llama at 128 tokens, the pool's
    // spinning took 5.7-5.8% of the kernels' CPU time with 4 tiles per thread in each loop,
    // 3.0-3.9% with 8 and 2.0-2.3% with 16 (perf cpu-clock samples, 2 runs each); the kernels'
    // own time did not move with it.
    const size_t panels = (rows + kQuantPanelRows - 1) / kQuantPanelRows;
    const size_t tiles = 8 * count * ctx.threads;
    const size_t tile = std::max<size_t>(1, (panels + tiles - 1) / tiles) * kQuantPanelRows;
    FFLITE_TSAN_RELEASE(&job);
    ctx.pool->ForTiles(RunTile, &job, rows, tile,
                                       PoolFlags(ctx, last));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    RunTile(&job, 0, rows);
  }
}

}  // namespace fflite
