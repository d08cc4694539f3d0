// The dtype table: one row per weight dtype (name, block, bytes per block, layout, dequantisation,
// the kernels' id of it), consulted by the loader, writer, backends, C API and tools instead of
// switches of their own. A quantised dtype's layout is its traits' (kernels/quant_types.h).
#ifndef FFLITE_RUNTIME_SRC_FORMAT_DTYPE_H_
#define FFLITE_RUNTIME_SRC_FORMAT_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fflite/schema/fflite_generated.h"
#include "kernels/types.h"

namespace fflite {

using DType = schema::DType;
using Layout = schema::Layout;

// One dtype. Sizes are counted per block: a block is `block_elems` consecutive elements of a row
// (1 for float dtypes) stored in `block_bytes` bytes including its scale; 4-bit data has no
// bytes-per-element.
struct DTypeInfo {
  DType dtype;
  const char* name;        // "f32", "f16", "bf16", "i8", "i4"
  uint32_t block_elems;    // elements per block along a row
  uint32_t block_bytes;    // bytes per block, scale included
  bool quantized;          // I8/I4: only weight matrices, in a panel layout
  Layout layout;           // the layout a writer uses for this dtype (quantised: not rotated)
  // Converts `n` elements starting at element `first` of a ROW_MAJOR float tensor to f32.
  // nullptr for quantised dtypes (see DequantizeRows).
  void (*to_f32)(const uint8_t* data, uint64_t first, uint64_t n, float* out);
  // What the kernels call it: a float type (float dtypes) or a quantised type (quantised ones).
  FloatType float_type;
  QuantType quant_type;
};


// The row for `dtype`, or nullptr for a value this build does not know (a file from a newer fflite
// or a corrupted one): nothing falls through to f32.
const DTypeInfo* FindDType(DType dtype);
// Name of a dtype ("invalid" for unknown values).
const char* DTypeName(DType dtype);
// The row whose name is `name` ("q4_k"), or nullptr: the one lookup of a dtype by name, for the
// tools' flags.
const DTypeInfo* FindDTypeNamed(const std::string& name);
// The table's names, "f32=1, f16=2, ...", for error messages.
const char* KnownDTypesString();
// Bits per weight as stored (scales included): 32, 16, 8.5, 4.5.
double DTypeBitsPerWeight(DType dtype);
// Whether `layout` is one a tensor of `dtype` may use (VALUE_ROWS: float dtypes; the loader allows
// it on down matrices only).
bool LayoutValidFor(DType dtype, Layout layout);
const char* LayoutName(Layout layout);

// Bytes a tensor of `dtype`, `shape` and `layout` takes, or 0 when the combination is invalid (an
// unknown dtype, a layout the dtype does not use, a quantised tensor that is not a matrix).
// Float tensors: product(shape) · element size; quantised matrices [rows, k]: see quant_layout.h.
uint64_t TensorBytes(DType dtype, const std::vector<uint64_t>& shape, Layout layout);

// dst[cols, rows] = the transpose of src[rows, cols], elements of `elem` bytes (1, 2, 4).
void TransposeElements(const uint8_t* src, uint64_t rows, uint64_t cols, size_t elem,
                       uint8_t* dst);

// Rows [first_row, first_row + n) of a matrix [rows, k] of any dtype and layout as f32 values
// out[n, k], exactly (quantised: q · scale; rotated layouts are rotated back in double, so the
// result is the logical matrix up to f32 rounding; VALUE_ROWS is transposed back). For float
// tensors of rank 1 pass rows = 1.
void DequantizeRows(DType dtype, Layout layout, uint64_t rows, uint64_t k, const uint8_t* data,
                    uint64_t first_row, uint64_t n, float* out);

// The kernels' ids of a dtype the table knows (FloatType for float dtypes, QuantType for
// quantised ones).
inline FloatType FloatTypeOf(DType dtype) { return FindDType(dtype)->float_type; }
inline QuantType QuantTypeOf(DType dtype) { return FindDType(dtype)->quant_type; }

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_DTYPE_H_
