// One FFN over matrix ops (matrix_op.h), a dense layer's or an expert's:
//   out = down( s ⊙ act(gate·x + b_gate) ⊙ (up·x + b_up) ) + b_down     (gated)
//   out = down( s ⊙ act(up·x + b_up) ) + b_down                          (plain)
// on its packed form (many tokens) or its file form (few tokens; quantised weights always), with
// the neuron edits s, the hidden activations left in the runner's `hidden` rows (for a capture),
// and ReGLU's listed path: up computed only for the neurons whose gate fired.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_FFN_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_FFN_H_

#include <cstddef>

#include "absl/status/status.h"
#include "backends/cpu/engines.h"
#include "backends/cpu/ffn_forms.h"
#include "backends/cpu/matrix_op.h"
#include "backends/cpu/quant_engine.h"

namespace fflite {

class FfnRunner {
 public:
  // gate, hidden: the session's [chunk, max(d_ff_padded, DirectStride(d_ff_padded))] rows (the
  // hidden activations stay in `hidden` after a run).
  FfnRunner(MatrixOps& ops, float* gate, float* hidden)
      : ops_(ops), gate_(gate), hidden_(hidden) {}

  // out[n, d] = FFN(in[n, d] + kXnnTailBytes) on its packed form (quantised matrices from the
  // file); hidden [n, d_ff_padded]. The gemm engine's FFNs with many tokens per thread run split
  // by tokens (SplitTokens). scale: neuron edits [d_ff_padded] or nullptr.
  absl::Status RunPacked(const PackedFfn& f, size_t n, const float* in, float* out,
                         const EngineContext& ctx, bool last, const float* scale);

  // out[c, d] = FFN(in[c rows of in_stride]) on its file form (the direct kernel and the
  // quantised engine); hidden [c, DirectStride(d_ff_padded)]. Cannot fail (no packed operator).
  void RunFile(const FileFfn& s, size_t c, const float* in, size_t in_stride, float* out,
               const EngineContext& ctx, bool last, const float* scale);

  // A quantised FFN on the calling thread alone, by `quant` into the caller's buffers: RunFile's
  // products, the same bits. in [c, in_stride]; gate and hidden [c, DirectStride(d_ff)]; out
  // [c, d_model].
  static void RunQuantHere(const Kernels& kernels, const FileFfn& s, size_t c, const float* in,
                           size_t in_stride, float* gate, float* hidden, float* out,
                           const float* scale, QuantEngine& quant);

  // Whether f runs n tokens split among the threads (RunGemmFfnByTokens): many tokens, every
  // matrix on the gemm engine. *whole: its matrices.
  static bool SplitTokens(const PackedFfn& f, size_t n, const EngineContext& ctx,
                          GemmFfn* whole) {
    return WholeGemm(f, whole) && GemmFfnByTokens(*whole, n, ctx);
  }
  // Whether every matrix of f is on the gemm engine as one FFN (GemmFfnWhole); *whole: them.
  static bool WholeGemm(const PackedFfn& f, GemmFfn* whole);

  // The row stride of the hidden rows after RunFile (file) or RunPacked of an FFN of
  // d_ff_padded.
  static size_t HiddenStride(bool file, size_t d_ff_padded) {
    return file ? DirectStride(d_ff_padded) : d_ff_padded;
  }
  const float* hidden() const { return hidden_; }
  float* gate() { return gate_; }

 private:
  // hidden[n, stride] = act(gate) ⊙ up (gated) or act(up), then the epilogue's neuron edits, of
  // x[n, x_stride]: gate's product into gate_ first, the activation riding on up's. Quantised
  // alike, the two are one pass of the quantised engine (QuantGateUp).
  absl::Status GateUp(const FfnView& v, const PackedMatrix* gate_packed,
                      const PackedMatrix* up_packed, const float* gate_bias, const float* up_bias,
                      size_t n, const float* x, size_t x_stride, size_t stride,
                      const EngineContext& ctx, Epilogue act);

  MatrixOps& ops_;
  float* gate_;
  float* hidden_;
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_FFN_H_
