// One FFN over matrix ops (ffn.h).
#include "backends/cpu/ffn.h"

#include "base/status_macros.h"

namespace fflite {

namespace {

// GateUp for quantised matrices (up, and gate when gated), by `quant` on ctx, into gate and
// hidden [n, stride]: gate and up in one pass where QuantEngine::CanPair, else gate's product
// then up's (as MatrixOps runs each), the activation riding on up's. GateUp's quantised case,
// and a quantised expert's alone (RunQuantHere) with its own engine and buffers.
void QuantGateUp(QuantEngine& quant, const FfnView& v, const float* gate_bias,
                 const float* up_bias, size_t n, const float* x, size_t x_stride, float* gate,
                 float* hidden, size_t stride, const EngineContext& ctx, Epilogue act) {
  if (!v.gated) {
    quant.Run(v.up, up_bias, n, x, x_stride, hidden, stride, ctx, /*last=*/false, act);
    return;
  }
  act.gate = gate;
  if (QuantEngine::CanPair(v.gate, v.up)) {
    quant.RunPair(v.gate, gate_bias, gate, v.up, up_bias, n, x, x_stride, hidden, stride, ctx,
                  /*last=*/false, act);
    return;
  }
  quant.Run(v.gate, gate_bias, n, x, x_stride, gate, stride, ctx, /*last=*/false, {});
  quant.Run(v.up, up_bias, n, x, x_stride, hidden, stride, ctx, /*last=*/false, act);
}

}  // namespace

bool FfnRunner::WholeGemm(const PackedFfn& f, GemmFfn* whole) {
  const FfnView& v = *f.view;
  const auto gemm = [](const TensorView& w, const PackedMatrix& m) {
    return !m.empty() && !w.quantized() && m.gemm != nullptr ? &m : nullptr;
  };
  *whole = GemmFfn{f.gated ? gemm(v.gate, f.gate) : nullptr, gemm(v.up, f.up),
                   gemm(v.down, f.down), f.activation};
  return (!f.gated || whole->gate != nullptr) && GemmFfnWhole(*whole);
}

absl::Status FfnRunner::GateUp(const FfnView& v, const PackedMatrix* gate_packed,
                               const PackedMatrix* up_packed, const float* gate_bias,
                               const float* up_bias, size_t n, const float* x, size_t x_stride,
                               size_t stride, const EngineContext& ctx, Epilogue act) {
  if (v.up.quantized() && (!v.gated || v.gate.quantized())) {
    QuantGateUp(ops_.quant(), v, gate_bias, up_bias, n, x, x_stride, gate_, hidden_, stride, ctx,
                act);
    return absl::OkStatus();
  }
  if (!v.gated) {
    return ops_.Run(MatrixOp{&v.up, up_packed, up_bias}, n, x, x_stride, hidden_, stride, ctx,
                    /*last=*/false, act);
  }
  act.gate = gate_;
  FFLITE_RETURN_IF_ERROR(ops_.Run(MatrixOp{&v.gate, gate_packed, gate_bias}, n, x, x_stride,
                                  gate_, stride, ctx, /*last=*/false));
  return ops_.Run(MatrixOp{&v.up, up_packed, up_bias}, n, x, x_stride, hidden_, stride, ctx,
                  /*last=*/false, act);
}

absl::Status FfnRunner::RunPacked(const PackedFfn& f, size_t n, const float* in, float* out,
                                  const EngineContext& ctx, bool last, const float* scale) {
  const FfnView& v = *f.view;
  const size_t d = v.d_model, ff = f.d_ff;
  GemmFfn whole;
  if (SplitTokens(f, n, ctx, &whole)) {
    whole.scale = scale;
    RunGemmFfnByTokens(whole, n, in, gate_, hidden_, out, ctx, last);
    return absl::OkStatus();
  }
  // The activation (and the neuron edits) ride on the up product (gate first when gated): the
  // gemm and quantised engines apply them on each thread's outputs while they are in cache, the
  // others after the product.
  FFLITE_RETURN_IF_ERROR(GateUp(v, &f.gate, &f.up, DirectBias(v.gate_bias, f.gate_bias),
                                DirectBias(v.up_bias, f.up_bias), n, in, d, ff, ctx,
                                Epilogue{f.activation, nullptr, scale}));
  return ops_.Run(MatrixOp{&v.down, &f.down, DirectBias(v.down_bias, f.down_bias)}, n, hidden_,
                  ff, out, d, ctx, last);
}

void FfnRunner::RunFile(const FileFfn& s, size_t c, const float* in, size_t in_stride,
                        float* out, const EngineContext& ctx, bool last, const float* scale) {
  const FfnView& f = *s.view;
  const size_t d = f.d_model, ff = f.d_ff_padded, hs = DirectStride(ff);
  Epilogue act{ActivationOf(ops_.kernels(), f), nullptr, scale};
  const MatrixOp down{&f.down, nullptr, DirectBias(f.down_bias, s.down_bias)};
  // Status: the direct and quantised engines cannot fail (no packed operator is involved).
  if (f.gated && f.activation == Activation::RELU && !f.up.quantized() && !f.gate.quantized() &&
      ops_.dense_fraction() > 0.0) {
    // ReGLU: h = relu(gate·x + b) ⊙ (up·x + b) is 0 wherever the gate is silent, so up is
    // computed only for the neurons whose gate fired for some token (up's rows are contiguous
    // per neuron) when few enough did: the same bits as the whole product for those, exact 0
    // for the others (the whole product gives 0 · u there: the same unless u is infinite or
    // NaN while the gate is not, i.e. for an infinite input).
    BackendStats& counters = ops_.counters();
    ops_.Run(MatrixOp{&f.gate, nullptr, DirectBias(f.gate_bias, s.gate_bias)}, c, in, in_stride,
             gate_, hs, ctx, false)
        .IgnoreError();
    uint32_t* rows = ops_.active();
    const size_t n = ActiveNeurons(gate_, c, hs, ff, rows, /*before_relu=*/true);
    if (ReadListed(n, ff, ops_.dense_fraction())) {
      RunDirectListed(ops_.kernels(), f.up, DirectBias(f.up_bias, s.up_bias), c, in, in_stride,
                      hidden_, hs, rows, n, ctx, false);
      counters.up_rows_read += n;
      for (size_t t = 0; t < c; ++t) {
        float* h = hidden_ + t * hs;
        const float* g = gate_ + t * hs;
        // relu(g) · u on the listed neurons (the reference's relu), 0 on the others: one pass.
        for (size_t i = 0, j = 0; i < ff; ++i) {
          const bool listed = j < n && rows[j] == i;
          h[i] = listed ? (g[i] > 0.0f ? g[i] : 0.0f) * h[i] : 0.0f;
          j += listed;
        }
      }
    } else {
      ops_.Run(MatrixOp{&f.up, nullptr, DirectBias(f.up_bias, s.up_bias)}, c, in, in_stride,
               hidden_, hs, ctx, false)
          .IgnoreError();
      counters.up_rows_read += ff;
      act.gate = gate_;
      act.Apply(hidden_, hs, 0, c, 0, ff);
    }
    counters.up_rows_total += ff;
    if (act.gate == nullptr) Epilogue{nullptr, nullptr, scale}.Apply(hidden_, hs, 0, c, 0, ff);
    ops_.Run(down, c, hidden_, hs, out, d, ctx, last).IgnoreError();
    return;
  }
  // The activation rides on the up product (gate first when gated), as in RunPacked: the
  // quantised engine applies it on each thread's rows, the direct kernel after the product.
  GateUp(f, nullptr, nullptr, DirectBias(f.gate_bias, s.gate_bias),
         DirectBias(f.up_bias, s.up_bias), c, in, in_stride, hs, ctx, act)
      .IgnoreError();
  ops_.Run(down, c, hidden_, hs, out, d, ctx, last).IgnoreError();
}

void FfnRunner::RunQuantHere(const Kernels& kernels, const FileFfn& s, size_t c,
                             const float* in, size_t in_stride, float* gate, float* hidden,
                             float* out, const float* scale, QuantEngine& quant) {
  const FfnView& f = *s.view;
  const size_t hs = DirectStride(f.d_ff_padded);
  const EngineContext here;  // no pool: the calling thread
  QuantGateUp(quant, f, DirectBias(f.gate_bias, s.gate_bias), DirectBias(f.up_bias, s.up_bias),
              c, in, in_stride, gate, hidden, hs, here,
              Epilogue{ActivationOf(kernels, f), nullptr, scale});
  quant.Run(f.down, DirectBias(f.down_bias, s.down_bias), c, hidden, hs, out, f.d_model, here,
            /*last=*/false, {});
}

}  // namespace fflite
