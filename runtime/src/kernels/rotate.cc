// The rotated layout's transform (rotate.h).
#include "kernels/rotate.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/quant_types.h"

namespace fflite {

namespace {

// One stage of the transform below, its butterfly span a constant: for spans of 4 and more the
// compiler turns the inner loop into vector adds of neighbouring elements.
template <int kLen, typename T>
void FwhtStage(T* v) {
  for (int i = 0; i < 32; i += 2 * kLen) {
    for (int j = 0; j < kLen; ++j) {
      const T a = v[i + j], b = v[i + j + kLen];
      v[i + j] = a + b;
      v[i + j + kLen] = a - b;
    }
  }
}

// In-place unnormalised fast Walsh-Hadamard transform of 32 values (Sylvester order).
template <typename T>
void Fwht32(T* v) {
  FwhtStage<1>(v);
  FwhtStage<2>(v);
  FwhtStage<4>(v);
  FwhtStage<8>(v);
  FwhtStage<16>(v);
}

template <typename T>
void ApplySigns(T* v) {
  for (int j = 0; j < 32; ++j) {
    if ((kHadamardSigns >> j) & 1u) v[j] = -v[j];
  }
}

// The sign bit of element j when D negates it.
struct SignBits {
  uint32_t bit[32];
  constexpr SignBits() : bit() {
    for (int j = 0; j < 32; ++j) bit[j] = ((kHadamardSigns >> j) & 1u) != 0 ? 0x80000000u : 0u;
  }
};
constexpr SignBits kSignBits;

}  // namespace

QuantGeometry QuantMatrixGeometry(QuantType type, uint64_t rows, uint64_t k) {
  return WithQuantTraits(type, [&](auto q) { return GeometryOf<decltype(q)>(rows, k); });
}

// The activations' rotation, once per block of every quantised product's input: the sign flips
// as an xor, which vectorises (with Fwht32's constant spans, 4.5x faster than the loops they
// replace: 2.5 ms against 11-13 ms for a 128-token Llama FFN's three rotations, g++ 12 -O3,
// SSE2; the same operations in the same order, so the same bits).
void Rotate32(float* v) {
  uint32_t bits[32];
  std::memcpy(bits, v, sizeof(bits));
  for (int j = 0; j < 32; ++j) bits[j] ^= kSignBits.bit[j];
  std::memcpy(v, bits, sizeof(bits));
  Fwht32(v);
  const float norm = 0.17677669529663688f;  // 1 / sqrt(32)
  for (int j = 0; j < 32; ++j) v[j] *= norm;
}

void Rotate32(double* v) {
  ApplySigns(v);
  Fwht32(v);
  for (int j = 0; j < 32; ++j) v[j] /= std::sqrt(32.0);
}

void Unrotate32(double* v) {
  Fwht32(v);
  for (int j = 0; j < 32; ++j) v[j] /= std::sqrt(32.0);
  ApplySigns(v);
}

}  // namespace fflite
