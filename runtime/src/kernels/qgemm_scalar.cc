// Int8-activation product over quantised panels, portable C++: the twin of the SIMD kernels.
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kernels/quant_types.h"
#include "kernels/rotate.h"
#include "kernels/quant_kernels.h"

namespace fflite {

void RotateBlocksScalar(size_t blocks, const float* x, float* y) {
  for (size_t b = 0; b < blocks; ++b) {
    if (x != y) std::memcpy(y + b * kQuantBlock, x + b * kQuantBlock, kQuantBlock * sizeof(float));
    Rotate32(y + b * kQuantBlock);
  }
}

void QuantizeActivationsScalar(size_t c, size_t k, const float* x, size_t x_stride,
                               QActBlock* xq) {
  const size_t kb = (k + kQuantBlock - 1) / kQuantBlock;
  for (size_t t = 0; t < c; ++t) {
    for (size_t b = 0; b < kb; ++b) {
      QActBlock& out = xq[t * kb + b];
      float v[kQuantBlock] = {};
      float amax = 0.0f;
      for (size_t j = 0; j < kQuantBlock && b * kQuantBlock + j < k; ++j) {
        v[j] = x[t * x_stride + b * kQuantBlock + j];
        amax = std::fmax(amax, std::fabs(v[j]));
      }
      out.d = amax >= kQuantActMinAbsMax ? amax / 127.0f : 0.0f;
      const float inv = amax >= kQuantActMinAbsMax ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (size_t j = 0; j < kQuantBlock; ++j) {
        const int q = static_cast<int>(std::nearbyint(v[j] * inv));
        out.q[j] = static_cast<int8_t>(q);
        sum += q;
      }
      out.sum = sum;
    }
  }
}

namespace {

template <typename Q>
void QGemmScalarOf(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                   const QActBlock* xq, float* y, size_t y_stride) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  // The activations have ceil(k / 32) blocks a token; Q4K's geometry has whole super-blocks,
  // which its k (a multiple of 256) makes the same.
  const size_t kb = (k + kQuantBlock - 1) / kQuantBlock;
  for (size_t p = 0; p < g.panels; ++p) {
    const uint8_t* panel = w + p * g.panel_bytes;
    const size_t r0 = p * kQuantPanelRows;
    const size_t n = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
    for (size_t t = 0; t < c; ++t) {
      float acc[kQuantPanelRows] = {};
      for (size_t b = 0; b < kb; ++b) {
        const QActBlock& a = xq[t * kb + b];
        const uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
        for (size_t r = 0; r < kQuantPanelRows; ++r) {
          int32_t dot = 0, dot_hi = 0;  // Q6K: the block's halves, each with its scale
          for (size_t jj = 0; jj < kQuantBlock; ++jj) {
            (HasHalfScales<Q>() && jj >= 16 ? dot_hi : dot) += Q::Value(blk, r, jj) * a.q[jj];
          }
          if constexpr (HasHalfScales<Q>()) {
            const float d = F16ToF32(HalfSuper<Q>(panel, r, b));
            acc[r] += d * static_cast<float>(HalfScale<Q>(panel, r, b, 0)) * a.d *
                          static_cast<float>(dot) +
                      d * static_cast<float>(HalfScale<Q>(panel, r, b, 1)) * a.d *
                          static_cast<float>(dot_hi);
          } else if constexpr (HasMin<Q>()) {
            // Σ_j (s·n_j - m)·d_x·q_j = s·d_x·Σ n_j·q_j - m·d_x·Σ q_j.
            const float scale = F16ToF32(KSuper(panel, r, b, false)) *
                                static_cast<float>(KCode(panel, r, b, false));
            const float min = F16ToF32(KSuper(panel, r, b, true)) *
                              static_cast<float>(KCode(panel, r, b, true));
            acc[r] += scale * a.d * static_cast<float>(dot) -
                      min * a.d * static_cast<float>(a.sum);
          } else {
            const float s = HasE8m0Scales<Q>() ? E8m0Scale(PanelE8m0(panel, r, b))
                                               : F16ToF32(PanelScale(panel, r, b));
            acc[r] += s * a.d * static_cast<float>(dot);
          }
        }
      }
      for (size_t r = 0; r < n; ++r) {
        y[t * y_stride + r0 + r] = acc[r] + (bias != nullptr ? bias[r0 + r] : 0.0f);
      }
    }
  }
}

}  // namespace

void QGemmScalar(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                 const float* bias, const QActBlock* xq, float* y, size_t y_stride) {
  WithQuantTraits(type, [&](auto q) {
    QGemmScalarOf<decltype(q)>(c, k, rows, w, bias, xq, y, y_stride);
  });
  if (type == QuantType::kQ2KP) SubtractQ2KMinsQ(c, k, rows, w, xq, y, y_stride, false);
}

}  // namespace fflite
