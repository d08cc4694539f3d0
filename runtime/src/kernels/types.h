// The kernels' own small ids for what they multiply and apply, so that nothing in kernels/ depends
// on the file format: format/dtype.h maps each stored dtype onto these (one table), the CPU
// backend maps the activations.
#ifndef FFLITE_RUNTIME_SRC_KERNELS_TYPES_H_
#define FFLITE_RUNTIME_SRC_KERNELS_TYPES_H_

#include <cstddef>
#include <cstdint>

namespace fflite {

// Float weights as the float kernels read them: each element as stored, widened to f32 exactly.
enum class FloatType : uint8_t { kF32, kF16, kBF16 };
inline constexpr size_t FloatTypeBytes(FloatType t) { return t == FloatType::kF32 ? 4 : 2; }

// Block-quantised weights as the quantised kernels read them (kernels/quant_types.h: their
// traits).
// kQ6KP, kQ5KP: GGUF's Q6_K and Q5_K at their own sizes (values in bit planes, quant_types.h).
// kIQ4X, kIQ4N: GGUF's IQ4_XS and IQ4_NL at their sizes (level indices in nibbles).
// kQ3KP: GGUF's Q3_K at its size (Q6K's scales, 3-bit values in bit planes).
// kQ2KP: GGUF's Q2_K at its size (Q6K's scales, 2-bit values, a min per 16 values).
// kMXF4: MXFP4 (E2M1 codes in nibbles, Q8's f16 scale per 32).
enum class QuantType : uint8_t {
  kQ8, kQ4, kQ4K, kQ6K, kQ5K, kQ6KP, kQ5KP, kIQ4X, kIQ4N, kQ3KP, kQ2KP, kMXF4
};
inline constexpr size_t kQuantTypeCount = 12;

// The element-wise activations.
enum class ActKind : uint8_t { kRelu, kGeluErf, kGeluTanh, kSilu, kSigmoid, kSwigluOai };

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_KERNELS_TYPES_H_
