// Float-activation product over quantised panels, portable C++: the twin of the SIMD kernels.
#include <cstring>

#include "base/half.h"
#include "kernels/quant_types.h"
#include "kernels/quant_kernels.h"

namespace fflite {

namespace {

template <typename Q>
void QGemvScalarOf(size_t c, size_t k, size_t rows, const uint8_t* w, const float* bias,
                   const float* x, size_t x_stride, float* y, size_t y_stride) {
  const QuantGeometry g = GeometryOf<Q>(rows, k);
  for (size_t p = 0; p < g.panels; ++p) {
    const uint8_t* panel = w + p * g.panel_bytes;
    const size_t r0 = p * kQuantPanelRows;
    const size_t n = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
    for (size_t t = 0; t < c; ++t) {
      const float* xt = x + t * x_stride;
      float acc[kQuantPanelRows] = {};
      for (size_t b = 0; b < g.k_blocks; ++b) {
        const uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
        float part[kQuantPanelRows] = {};
        float part_hi[kQuantPanelRows] = {};  // Q6K: the block's last 16 values (own scales)
        float sum_x = 0.0f;  // Q4K: for the mins, Σ_j (s·n_j - m)·x_j = s·Σ n_j·x_j - m·Σ x_j
        for (size_t jj = 0; jj < kQuantBlock; ++jj) {
          const size_t j = b * kQuantBlock + jj;
          if (j >= k) break;
          sum_x += xt[j];
          float* into = HasHalfScales<Q>() && jj >= 16 ? part_hi : part;
          for (size_t r = 0; r < kQuantPanelRows; ++r) {
            into[r] += static_cast<float>(Q::Value(blk, r, jj)) * xt[j];
          }
        }
        for (size_t r = 0; r < kQuantPanelRows; ++r) {
          if constexpr (HasHalfScales<Q>()) {
            const float d = F16ToF32(HalfSuper<Q>(panel, r, b));
            acc[r] += d * static_cast<float>(HalfScale<Q>(panel, r, b, 0)) * part[r] +
                      d * static_cast<float>(HalfScale<Q>(panel, r, b, 1)) * part_hi[r];
          } else if constexpr (HasMin<Q>()) {
            const float scale = F16ToF32(KSuper(panel, r, b, false)) *
                                static_cast<float>(KCode(panel, r, b, false));
            const float min = F16ToF32(KSuper(panel, r, b, true)) *
                              static_cast<float>(KCode(panel, r, b, true));
            acc[r] += scale * part[r] - min * sum_x;
          } else {
            const float s = HasE8m0Scales<Q>() ? E8m0Scale(PanelE8m0(panel, r, b))
                                               : F16ToF32(PanelScale(panel, r, b));
            acc[r] += s * part[r];
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

void QGemvScalar(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                 const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride) {
  WithQuantTraits(type, [&](auto q) {
    QGemvScalarOf<decltype(q)>(c, k, rows, w, bias, x, x_stride, y, y_stride);
  });
  if (type == QuantType::kQ2KP) SubtractQ2KMins(c, k, rows, w, x, x_stride, y, y_stride, false);
}

}  // namespace fflite
