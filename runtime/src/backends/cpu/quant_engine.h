// The quantised matrix engine of the CPU backend: I8/I4 weights multiplied straight from the
// model's mapping (no packing, no copy), float activations for few tokens, int8 for many.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_QUANT_ENGINE_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_QUANT_ENGINE_H_

#include <cstddef>

#include "backends/cpu/engines.h"
#include "base/aligned_buffer.h"
#include "format/model.h"
#include "kernels/quant_kernels.h"

namespace fflite {

class QuantEngine {
 public:
  // gemv: the float-activation kernel; gemm: the int8-activation pair. Calls with at least
  // `gemm_min_tokens` tokens use gemm (0: never; kQuantGemmTokensAuto: per dtype, as
  // DefaultQuantGemmMinTokens says for this pair).
  QuantEngine(const QGemvKernel& gemv, const QGemmKernel& gemm, size_t gemm_min_tokens);

  // Sizes the scratch for up to `max_tokens` tokens a call and reductions of up to `max_k`.
  // Returns false when the allocation fails. Run allocates nothing.
  bool Reserve(size_t max_tokens, size_t max_k);
  // Bytes of that scratch.
  size_t scratch_bytes() const {
    return rotated_.size() * sizeof(float) + xq_.size() * sizeof(QActBlock);
  }

  // y[c, y_stride] = x[c, x_stride] · Wᵀ + bias, then `epilogue` on y, W the quantised
  // [rows, k] tensor as mapped. c <= max_tokens; bias: [rows] f32 or nullptr. With a pool, the
  // rows are shared among its threads at panel boundaries, each thread applying the epilogue to
  // its own (results do not depend on the split). `last` as for every engine (engines.h).
  void Run(const TensorView& w, const float* bias, size_t c, const float* x, size_t x_stride,
           float* y, size_t y_stride, const EngineContext& ctx, bool last,
           const Epilogue& epilogue = {});

  // The two products of a GLU over the same input, gate and up, which RunPair takes together:
  // both quantised alike (dtype, layout) and of the same shape.
  static bool CanPair(const TensorView& gate_w, const TensorView& up_w) {
    return gate_w.quantized() && gate_w.dtype == up_w.dtype && gate_w.layout == up_w.layout &&
           gate_w.shape == up_w.shape;
  }

  // gate[c, y_stride] = x · Gᵀ + gate_bias, then y[c, y_stride] = x · Uᵀ + up_bias and `epilogue`
  // on y, whose gate must be `gate`: the same bits as Run for gate then Run for up with the
  // epilogue, but the activations are rotated and quantised once for both, and each thread
  // computes both products for its rows before their epilogue, in one parallel pass (one wait
  // for the slowest thread instead of two). CanPair(gate_w, up_w) must hold.
  void RunPair(const TensorView& gate_w, const float* gate_bias, float* gate,
               const TensorView& up_w, const float* up_bias, size_t c, const float* x,
               size_t x_stride, float* y, size_t y_stride, const EngineContext& ctx, bool last,
               const Epilogue& epilogue);

  // One product of RunProducts: y = x · Wᵀ + bias.
  struct Product {
    const uint8_t* w;
    const float* bias;
    float* y;
  };

  // Whether a call of c tokens over weights of `type` takes the int8 path (gemm) or the float
  // one.
  bool UsesGemm(QuantType type, size_t c) const {
    const size_t min = gemm_min_tokens_[static_cast<size_t>(type)];
    return min != 0 && c >= min;
  }
  const QGemvKernel& gemv() const { return gemv_; }
  const QGemmKernel& gemm() const { return gemm_; }

 private:
  // The `count` products over x (their matrices alike: w's dtype, layout and shape), then
  // `epilogue` on the last one's y, with the activations prepared once.
  void RunProducts(const TensorView& w, const Product* products, size_t count, size_t c,
                   const float* x, size_t x_stride, size_t y_stride, const EngineContext& ctx,
                   bool last, const Epilogue& epilogue);

  const QGemvKernel& gemv_;
  const QGemmKernel& gemm_;
  size_t gemm_min_tokens_[kQuantTypeCount];  // per QuantType
  size_t max_tokens_ = 0, max_k_ = 0;
  AlignedBuffer<float> rotated_;  // [max_tokens, max_k rounded up to 32]: R·x per block
  AlignedBuffer<QActBlock> xq_;   // [max_tokens, max_k / 32]: quantised activations
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_QUANT_ENGINE_H_
