// One weight matrix by the engine that holds it (matrix_op.h).
#include "backends/cpu/matrix_op.h"

namespace fflite {

absl::Status MatrixOps::Run(const MatrixOp& m, size_t n, const float* x, size_t x_stride,
                            float* y, size_t y_stride, const EngineContext& ctx, bool last,
                            const Epilogue& epilogue) {
  const TensorView& w = *m.w;
  if (m.packed != nullptr && !m.packed->empty() && !w.quantized()) {
    return RunPacked(*m.packed, n, x, y, ctx, last, epilogue);
  }
  if (w.quantized()) {
    quant_.Run(w, m.bias, n, x, x_stride, y, y_stride, ctx, last, epilogue);
    return absl::OkStatus();
  }
  if (w.value_rows()) {
    counters_.value_rows_read += RunValueRows(kernels_, w, m.bias, n, x, x_stride, y, y_stride,
                                              dense_fraction_, active_.data(), ctx, last);
    counters_.value_rows_total += w.shape[1];
  } else {
    RunDirect(kernels_, w, m.bias, n, x, x_stride, y, y_stride, ctx, last);
  }
  epilogue.Apply(y, y_stride, 0, n, 0, static_cast<size_t>(w.shape[0]));
  return absl::OkStatus();
}

}  // namespace fflite
