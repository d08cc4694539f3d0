// One weight matrix as the CPU backend multiplies it, whichever engine holds it, behind one
// calling convention:   y[n, y_stride] = x[n, x_stride] · Wᵀ + b, then an epilogue on y.
// The engine (engines.h) follows from the matrix: the quantised engine for I8/I4 (the file's
// panels), the packed operators where the matrix is packed, value rows for a VALUE_ROWS down
// matrix (only the rows of the neurons that fire), else the direct kernel on the file's rows.
#ifndef FFLITE_RUNTIME_SRC_BACKENDS_CPU_MATRIX_OP_H_
#define FFLITE_RUNTIME_SRC_BACKENDS_CPU_MATRIX_OP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "backends/backend.h"
#include "backends/cpu/engines.h"
#include "backends/cpu/quant_engine.h"
#include "format/model.h"
#include "kernels/kernels.h"

namespace fflite {

struct MatrixOp {
  const TensorView* w = nullptr;         // the file's [rows, k] tensor
  const PackedMatrix* packed = nullptr;  // its packed form, or nullptr / empty: not packed
  const float* bias = nullptr;           // [rows] f32, or nullptr
};

// The session's engines behind MatrixOp: its kernels, its quantised engine, the value-row
// setting, and the counters of value rows read (BackendStats). One thread at a time.
class MatrixOps {
 public:
  MatrixOps(const Kernels& kernels, QuantEngine& quant, double value_rows_dense_fraction)
      : kernels_(kernels), quant_(quant), dense_fraction_(value_rows_dense_fraction) {}

  // Sizes the value rows' scratch for matrices of up to max_k inputs.
  void Reserve(size_t max_k) { active_.resize(max_k); }

  // y[n, y_stride] = x[n, x_stride] · Wᵀ + b by the engine that holds m, then `epilogue` on y.
  // A packed matrix reads x and writes y at its own strides (packed->in, packed->out) with
  // kXnnTailBytes of slack after x. Errors: XNNPACK's (only for its packed operators).
  absl::Status Run(const MatrixOp& m, size_t n, const float* x, size_t x_stride, float* y,
                   size_t y_stride, const EngineContext& ctx, bool last,
                   const Epilogue& epilogue = {});

  // The neurons that fired in the last call of ListFired (scratch [max_k]).
  uint32_t* active() { return active_.data(); }
  const Kernels& kernels() const { return kernels_; }
  QuantEngine& quant() { return quant_; }
  double dense_fraction() const { return dense_fraction_; }
  // Value rows read and held so far, and the ReGLU up rows (ffn.cc counts those).
  BackendStats& counters() { return counters_; }
  const BackendStats& counters() const { return counters_; }

 private:
  const Kernels& kernels_;
  QuantEngine& quant_;
  double dense_fraction_;
  std::vector<uint32_t> active_;  // [max d_ff_padded]: the neurons that fired (value rows)
  BackendStats counters_;         // value_rows_* and up_rows_* only
};

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BACKENDS_CPU_MATRIX_OP_H_
