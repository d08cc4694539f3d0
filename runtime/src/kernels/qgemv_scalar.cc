// Float-activation product over quantised panels, portable C++: the twin of the SIMD kernels.
#include <cstring>

#include "base/half.h"
#include "kernels/quant_types.h"
#include "kernels/quant_kernels.h"

namespace fflite {

void QGemvScalar(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                 const float* bias, const float* x, size_t x_stride, float* y, size_t y_stride) {
  const QuantGeometry g = QuantMatrixGeometry(type, rows, k);
  const bool i4 = type == QuantType::kQ4;
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
        for (size_t jj = 0; jj < kQuantBlock; ++jj) {
          const size_t j = b * kQuantBlock + jj;
          if (j >= k) break;
          const size_t group = jj / 4, i = jj % 4;
          for (size_t r = 0; r < kQuantPanelRows; ++r) {
            int q;
            if (!i4) {
              q = static_cast<int8_t>(blk[group * 64 + 4 * r + i]);
            } else {
              const uint8_t byte = blk[(group % 4) * 64 + 4 * r + i];
              q = (group < 4 ? (byte & 0xf) : (byte >> 4)) - 8;
            }
            part[r] += static_cast<float>(q) * xt[j];
          }
        }
        for (size_t r = 0; r < kQuantPanelRows; ++r) {
          uint16_t s;
          std::memcpy(&s, panel + (b * kQuantPanelRows + r) * 2, 2);
          acc[r] += F16ToF32(s) * part[r];
        }
      }
      for (size_t r = 0; r < n; ++r) {
        y[t * y_stride + r0 + r] = acc[r] + (bias != nullptr ? bias[r0 + r] : 0.0f);
      }
    }
  }
}

}  // namespace fflite
