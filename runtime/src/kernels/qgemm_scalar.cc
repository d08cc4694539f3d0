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

void QGemmScalar(size_t c, size_t k, size_t rows, const uint8_t* w, QuantType type,
                 const float* bias, const QActBlock* xq, float* y, size_t y_stride) {
  const QuantGeometry g = QuantMatrixGeometry(type, rows, k);
  const bool i4 = type == QuantType::kQ4;
  for (size_t p = 0; p < g.panels; ++p) {
    const uint8_t* panel = w + p * g.panel_bytes;
    const size_t r0 = p * kQuantPanelRows;
    const size_t n = rows - r0 < kQuantPanelRows ? rows - r0 : kQuantPanelRows;
    for (size_t t = 0; t < c; ++t) {
      float acc[kQuantPanelRows] = {};
      for (size_t b = 0; b < g.k_blocks; ++b) {
        const QActBlock& a = xq[t * g.k_blocks + b];
        const uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
        for (size_t r = 0; r < kQuantPanelRows; ++r) {
          int32_t dot = 0;
          for (size_t jj = 0; jj < kQuantBlock; ++jj) {
            const size_t group = jj / 4, i = jj % 4;
            int q;
            if (!i4) {
              q = static_cast<int8_t>(blk[group * 64 + 4 * r + i]);
            } else {
              const uint8_t byte = blk[(group % 4) * 64 + 4 * r + i];
              q = (group < 4 ? (byte & 0xf) : (byte >> 4)) - 8;
            }
            dot += q * a.q[jj];
          }
          uint16_t s;
          std::memcpy(&s, panel + (b * kQuantPanelRows + r) * 2, 2);
          acc[r] += F16ToF32(s) * a.d * static_cast<float>(dot);
        }
      }
      for (size_t r = 0; r < n; ++r) {
        y[t * y_stride + r0 + r] = acc[r] + (bias != nullptr ? bias[r0 + r] : 0.0f);
      }
    }
  }
}

}  // namespace fflite
