// The device layout of I8/I4 matrices (cuda_quant.h), host side: plain C++, built and tested
// whether or not the cuda backend is.
#include "backends/cuda/cuda_quant.h"

#include <cstring>

#include "format/model.h"
#include "format/quant_layout.h"
#include "kernels/quant_types.h"

namespace fflite {
namespace cuda {

namespace {

uint64_t Blocks(uint64_t cols) { return (cols + kQBlock - 1) / kQBlock; }

// Row r's values of block b (32, the file's padding past cols included) from the panel layout.
template <typename Q>
void BlockValues(const uint8_t* data, const QuantGeometry& g, uint64_t r, uint64_t b,
                 int (&v)[kQBlock]) {
  const uint8_t* blk = data + r / kQuantPanelRows * g.panel_bytes + g.scale_bytes +
                       b * g.block_panel_bytes;
  for (uint32_t j = 0; j < kQBlock; ++j) v[j] = Q::Value(blk, r % kQuantPanelRows, j);
}

}  // namespace

bool KeepsQuantisedOnDevice(const TensorView& t, QKind* kind) {
  if (!t.present() || t.shape.size() != 2 || t.layout != Layout::PANEL16_K4) return false;
  if (t.dtype == DType::I8) {
    *kind = QKind::kQ8;
  } else if (t.dtype == DType::I4) {
    *kind = QKind::kQ4;
  } else {
    return false;
  }
  return true;
}

uint64_t DeviceCodeBytes(QKind kind, uint64_t rows, uint64_t cols) {
  return rows * RowBytes(kind, Blocks(cols));
}

uint64_t DeviceScaleBytes(uint64_t rows, uint64_t cols) { return rows * Blocks(cols) * 2; }

void RelayForDevice(const TensorView& t, QKind kind, uint8_t* codes, uint16_t* scales) {
  const uint64_t rows = t.shape[0], cols = t.shape[1], blocks = Blocks(cols);
  const QuantGeometry g = QuantMatrixGeometry(t.dtype, rows, cols);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* panel = t.data + r / kQuantPanelRows * g.panel_bytes;
    uint8_t* row = codes + r * RowBytes(kind, blocks);
    for (uint64_t b = 0; b < blocks; ++b) {
      scales[r * blocks + b] = PanelScale(panel, r % kQuantPanelRows, b);
      int v[kQBlock];
      if (kind == QKind::kQ8) {
        BlockValues<Q8>(t.data, g, r, b, v);
        for (uint32_t j = 0; j < kQBlock; ++j) {
          row[kQBlock * b + j] = static_cast<uint8_t>(static_cast<int8_t>(v[j]));
        }
      } else {
        BlockValues<Q4>(t.data, g, r, b, v);
        for (uint32_t i = 0; i < 16; ++i) {
          row[16 * b + i] = static_cast<uint8_t>((v[i] + 8) | ((v[16 + i] + 8) << 4));
        }
      }
    }
  }
}

}  // namespace cuda
}  // namespace fflite
