// The gemm engine: fflite's own many-token product over packed panels (kernels/gemm.h), shared
// among the pool's threads in two dimensions.
//
// Why our own. XNNPACK 2022's f32 GEMM (7 tokens × 16 channels on AVX-512, one operator per slice
// of output channels) reached 54-60% of the FMA peak on Zen 5 and 33-38% on a Xeon at 128 tokens
// of Llama. The gemm microkernel keeps 12 tokens × 32 channels in registers (24 FMAs per 2 panel
// loads and 12 broadcasts), the driver blocks k (GemmKernel::BlockUnits) and walks groups of panels
// that stay in L2 while every tile of tokens passes over them. With AVX-512 BF16, bf16 weights
// stay bf16 (half the bytes) and vdpbf16ps does two multiply-adds per lane.
//
// Threads: the tiles are packed in one parallel loop, then the work is split into tasks of
// panels (about 8 panels each, their number a multiple of the thread count) and, when there are
// fewer panels than that needs, of tiles: a task computes every token of its panels, so each
// thread reads its own weights once. Each output is summed in the same order however the work
// is split (gemm.h), so results do not depend on the thread count. A small FFN with many tokens
// per thread runs whole on each thread over its own tokens instead (RunGemmFfnByTokens).
#include <algorithm>

#include "absl/strings/str_format.h"
#include "backends/cpu/engines.h"
#include "base/tsan.h"

namespace fflite {

namespace {

struct PackJob {
  const GemmKernel* kernel;
  const void* w;
  FloatType w_type;
  size_t rows, k, panels_per_task;
  uint32_t* panels;
};

void PackPanels(void* context, size_t i) {
  const PackJob& job = *static_cast<const PackJob*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  const size_t first = i * job.panels_per_task;
  const size_t last = std::min(job.kernel->Panels(job.rows), first + job.panels_per_task);
  GemmPackWeights(*job.kernel, job.rows, job.k, job.w, job.w_type, first, last, job.panels);
  FFLITE_TSAN_RELEASE(context);
}

}  // namespace

absl::Status PackMatrixGemm(const GemmKernel& kernel, const void* w, DType w_dtype,
                            const float* bias, size_t out, size_t in, float out_min,
                            const EngineContext& ctx, const std::string& what, PackedMatrix* m) {
  m->in = in;
  m->out = out;
  m->out_min = out_min;
  const size_t panels = kernel.Panels(out);
  if (!m->panels.Allocate(kernel.WeightBytes(out, in) / 4, 0, /*zero=*/false, /*huge=*/true)) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: allocating %d bytes of packed weights failed", what,
                        kernel.WeightBytes(out, in)));
  }
  if (bias != nullptr) m->bias.assign(bias, bias + out);
  const size_t tasks = ctx.pool != nullptr && ctx.threads > 1 ? std::min(panels, 4 * ctx.threads)
                                                               : 1;
  const size_t per_task = (panels + tasks - 1) / tasks;
  PackJob job{&kernel, w, FloatTypeOf(w_dtype), out, in, per_task, m->panels.data()};
  if (tasks > 1) {
    FFLITE_TSAN_RELEASE(&job);
    ctx.pool->For(PackPanels, &job, tasks, PoolFlags(ctx, /*last=*/true));
    FFLITE_TSAN_ACQUIRE(&job);
  } else {
    PackPanels(&job, 0);
  }
  m->gemm = &kernel;
  return absl::OkStatus();
}

namespace {

// Panels per task, about (tasks take whole panels, their sizes differing by at most one).
constexpr size_t kTaskPanels = 8;

// Start of range r of n things split into `ranges` (sizes differ by at most one).
size_t RangeStart(size_t n, size_t ranges, size_t r) { return n * r / ranges; }

struct RunJob {
  const PackedMatrix* m;
  size_t n;
  const float* in;
  size_t x_stride;
  float* out;
  size_t y_stride;
  uint32_t* packed_x;
  size_t panel_tasks, tile_tasks;
  Epilogue epilogue;
};

void PackTiles(void* context, size_t i) {
  const RunJob& job = *static_cast<const RunJob*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  const GemmKernel& kernel = *job.m->gemm;
  GemmPackActivations(kernel, job.n, job.m->in, job.in, job.x_stride, i, i + 1, job.packed_x);
  FFLITE_TSAN_RELEASE(context);
}

void RunTask(void* context, size_t task) {
  const RunJob& job = *static_cast<const RunJob*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  const PackedMatrix& m = *job.m;
  const GemmKernel& kernel = *m.gemm;
  const size_t tiles = kernel.Tiles(job.n), panels = kernel.Panels(m.out);
  const size_t p = task % job.panel_tasks, t = task / job.panel_tasks;
  // Task (p, t)'s share of panels and tiles: each split's sizes differ by at most one.
  const size_t p0 = RangeStart(panels, job.panel_tasks, p);
  const size_t p1 = RangeStart(panels, job.panel_tasks, p + 1);
  const size_t t0 = RangeStart(tiles, job.tile_tasks, t);
  const size_t t1 = RangeStart(tiles, job.tile_tasks, t + 1);
  if (p0 < p1 && t0 < t1) {
    GemmBlock(kernel, job.n, m.in, m.out, job.packed_x, m.panels.data(),
              m.bias.empty() ? nullptr : m.bias.data(), m.out_min, t0, t1, p0, p1, job.out,
              job.y_stride);
    // This task's outputs: its tokens' rows, its panels' columns.
    job.epilogue.Apply(job.out, job.y_stride, kernel.TileStart(job.n, t0),
                       kernel.TileStart(job.n, t1),
                       p0 * kernel.nr, std::min(m.out, p1 * kernel.nr));
  }
  FFLITE_TSAN_RELEASE(context);
}

}  // namespace

void RunGemm(const PackedMatrix& m, size_t n, const float* in, size_t x_stride, float* out,
             size_t y_stride, const EngineContext& ctx, bool last, const Epilogue& epilogue) {
  const GemmKernel& kernel = *m.gemm;
  const size_t tiles = kernel.Tiles(n), panels = kernel.Panels(m.out);
  RunJob job{&m, n, in, x_stride, out, y_stride, ctx.gemm_scratch, 1, 1, epilogue};
  const bool parallel =
      ctx.pool != nullptr && ctx.threads > 1 && n * m.in * m.out >= kMinParallelMacs;
  if (!parallel) {
    GemmPackActivations(kernel, n, m.in, in, x_stride, 0, tiles, ctx.gemm_scratch);
    RunTask(&job, 0);
    return;
  }
  const size_t threads = ctx.threads;
  // Panel tasks: about kTaskPanels panels each, their count a multiple of the threads; when the
  // matrix has too few panels for that, the tiles are split too.
  size_t panel_tasks = std::max<size_t>(1, (panels + kTaskPanels - 1) / kTaskPanels);
  panel_tasks = (panel_tasks + threads - 1) / threads * threads;
  job.panel_tasks = std::min(panel_tasks, panels);
  if (job.panel_tasks < 2 * threads) {
    job.tile_tasks = std::min(tiles, (2 * threads + job.panel_tasks - 1) / job.panel_tasks);
  }
  FFLITE_TSAN_RELEASE(&job);
  ctx.pool->For(PackTiles, &job, tiles, PoolFlags(ctx, /*last=*/false));
  ctx.pool->For(RunTask, &job, job.panel_tasks * job.tile_tasks,
                             PoolFlags(ctx, last));
  FFLITE_TSAN_ACQUIRE(&job);
}

namespace {

// Units of scratch range r's tiles take: its input for gate/up, then its hidden rows for down.
size_t RangeScratchUnits(const GemmFfn& f, size_t tokens) {
  return std::max(GemmScratchUnits(*f.up->gemm, tokens, f.up->in),
                  GemmScratchUnits(*f.down->gemm, tokens, f.down->in));
}

// Units of scratch before range r's (the ranges' tiles lie in order); r = ranges: all of them.
size_t RangeScratchOffset(const GemmFfn& f, size_t n, size_t ranges, size_t r) {
  size_t units = 0;
  for (size_t i = 0; i < r; ++i) {
    units += RangeScratchUnits(f, RangeStart(n, ranges, i + 1) - RangeStart(n, ranges, i));
  }
  return units;
}

struct FfnJob {
  const GemmFfn* f;
  size_t n, ranges;
  const float* in;
  float *gate_out, *hidden, *out;
  uint32_t* scratch;
  GemmFfnRows rows;
};

// Every panel of m over the range's tiles (packed at x), rows [0, tokens) of y.
void WholeProduct(const PackedMatrix& m, size_t tokens, const uint32_t* x, float* y) {
  const GemmKernel& kernel = *m.gemm;
  GemmBlock(kernel, tokens, m.in, m.out, x, m.panels.data(),
            m.bias.empty() ? nullptr : m.bias.data(), m.out_min, 0, kernel.Tiles(tokens), 0,
            kernel.Panels(m.out), y, m.out);
}

}  // namespace

void RunGemmFfnHere(const GemmFfn& f, size_t n, const float* in, size_t in_stride,
                    float* gate_out, float* hidden, float* out, uint32_t* scratch) {
  const size_t ff = f.up->out, d_in = f.up->in;
  const GemmKernel& up_kernel = *f.up->gemm;
  GemmPackActivations(up_kernel, n, d_in, in, in_stride, 0, up_kernel.Tiles(n), scratch);
  if (f.gate != nullptr) WholeProduct(*f.gate, n, scratch, gate_out);
  WholeProduct(*f.up, n, scratch, hidden);
  const Epilogue act{f.activation, f.gate != nullptr ? gate_out : nullptr, f.scale};
  act.Apply(hidden, ff, 0, n, 0, ff);
  const GemmKernel& down_kernel = *f.down->gemm;
  GemmPackActivations(down_kernel, n, ff, hidden, ff, 0, down_kernel.Tiles(n), scratch);
  WholeProduct(*f.down, n, scratch, out);
}

namespace {

void RunFfnRange(void* context, size_t r) {
  const FfnJob& job = *static_cast<const FfnJob*>(context);
  FFLITE_TSAN_ACQUIRE(context);
  const GemmFfn& f = *job.f;
  const size_t t0 = RangeStart(job.n, job.ranges, r);
  const size_t tokens = RangeStart(job.n, job.ranges, r + 1) - t0;
  const size_t ff = f.up->out, d_in = f.up->in;
  if (job.rows.before != nullptr) job.rows.before(job.rows.context, t0, t0 + tokens);
  RunGemmFfnHere(f, tokens, job.in + t0 * d_in, d_in, job.gate_out + t0 * ff,
                 job.hidden + t0 * ff, job.out + t0 * f.down->out,
                 job.scratch + RangeScratchOffset(f, job.n, job.ranges, r));
  if (job.rows.after != nullptr) job.rows.after(job.rows.context, t0, t0 + tokens);
  FFLITE_TSAN_RELEASE(context);
}

}  // namespace

bool GemmFfnWhole(const GemmFfn& f) {
  for (const PackedMatrix* m : {f.gate, f.up, f.down}) {
    if (m != nullptr && m->gemm == nullptr) return false;
  }
  return f.up != nullptr && f.down != nullptr && f.down->in == f.up->out &&
         (f.gate == nullptr || (f.gate->gemm == f.up->gemm && f.gate->out == f.up->out));
}

bool GemmFfnByTokens(const GemmFfn& f, size_t n, const EngineContext& ctx) {
  if (ctx.pool == nullptr || ctx.threads < 2 || n < kGemmFfnTokensPerThread * ctx.threads ||
      !GemmFfnWhole(f)) {
    return false;
  }
  size_t bytes = 0;
  for (const PackedMatrix* m : {f.gate, f.up, f.down}) {
    if (m != nullptr) bytes += m->panels.size() * sizeof(uint32_t);
  }
  if (bytes > kGemmFfnSplitBytes) return false;
  return ctx.gemm_scratch != nullptr &&
         RangeScratchOffset(f, n, ctx.threads, ctx.threads) <= ctx.gemm_scratch_units;
}

void RunGemmFfnByTokens(const GemmFfn& f, size_t n, const float* in, float* gate_out,
                        float* hidden, float* out, const EngineContext& ctx, bool last,
                        const GemmFfnRows& rows) {
  FfnJob job{&f, n, ctx.threads, in, gate_out, hidden, out, ctx.gemm_scratch, rows};
  FFLITE_TSAN_RELEASE(&job);
  ctx.pool->For(RunFfnRange, &job, job.ranges, PoolFlags(ctx, last));
  FFLITE_TSAN_ACQUIRE(&job);
}

}  // namespace fflite
