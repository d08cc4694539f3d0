// Round to nearest, ties to even, for the offline quantisers.
#ifndef FFLITE_RUNTIME_SRC_FORMAT_ROUND_NEAREST_H_
#define FFLITE_RUNTIME_SRC_FORMAT_ROUND_NEAREST_H_

namespace fflite {

// For |v| < 2^22: adding 1.5·2^23 leaves no fraction bits, so the FPU's rounding does the work.
// Unlike std::nearbyint this vectorises on baseline x86-64 (SSE2 has no roundps); it relies on
// strict IEEE evaluation (no -ffast-math, which this project does not use).
inline float RoundNearest(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_ROUND_NEAREST_H_
