// GGUF tensors as the writer's tensor sources: a weight matrix of a type fflite keeps (Q4_0 as i4,
// the k-quants at GGUF's sizes, IQ4_XS and IQ4_NL as their level indices, Q8_0 and Q5_0 as i8,
// and MXFP4 as its codes and E8M0 scale bytes, where a tensor's scales fit) is re-laid once into
// fflite's panels (kernels/quant_types.h), its bits kept; F32, F16 and BF16 are copied as they
// are; any other type is dequantised exactly as the specification defines and stored as f32. The
// mapping of architectures onto layers is gguf_convert.h's.
#ifndef FFLITE_CONVERTER_GGUF_RELAY_H_
#define FFLITE_CONVERTER_GGUF_RELAY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "converter/gguf.h"
#include "converter/gguf_types.h"
#include "format/dtype.h"
#include "format/writer.h"

namespace fflite {
namespace converter {

// A [rows, cols] view of rows [first_row, first_row + rows) of a tensor whose ne[0] is cols (a
// 2-D matrix, one expert of a 3-D one, a half of a fused one, or a vector with rows = 1).
struct GgufView {
  std::shared_ptr<const GgufFile> file;
  const GgufTensor* t = nullptr;
  uint64_t first_row = 0, rows = 0, cols = 0;
  uint64_t RowBytes() const { return cols / t->type->block_elems * t->type->block_bytes; }
  const uint8_t* Begin() const { return file->Data(*t) + first_row * RowBytes(); }
  std::string Describe() const {
    return absl::StrFormat("'%s': tensor \"%s\"", file->path(), t->name);
  }
};

// F32, F16 and BF16's dtypes (INVALID for any other type).
DType FloatDType(GgmlType t);

// The dtype a native conversion keeps a matrix of `type` in with its bits, re-laid (INVALID:
// none; the integer types i8 takes are a per-tensor answer, GgufScalesFitInt8): Q4_0 as i4, the
// k-quants at GGUF's sizes (Q2_K, Q3_K and Q6_K in Q6_K's scales), IQ4_XS and IQ4_NL as their
// level indices. (MXFP4 is kept as dtype mxfp4 where a tensor's scales fit, as the I8 types.)
DType KeptDType(GgmlType type);

// The source of a view: as stored (float types; the kept types when `native` and `matrix`, and the
// I8 types when also `int8_ok`: the whole tensor's scales fit, so that every expert of a 3-D
// tensor gets one dtype), or dequantised to f32. Its fill checks what the loader would refuse
// (non-finite d or dmin, Q8_0's -128) and names the tensor, row and block.
TensorSource GgufSource(const GgufView& v, std::vector<uint64_t> shape, bool matrix, bool native,
                        bool int8_ok);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_GGUF_RELAY_H_
