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

// The panels keep a row's 4 values of each group g of a block at blk + 64g + 4r (kernels/
// quant_types.h: Q8's byte per value; Q4's byte holding value 4g + i in its low nibble and
// 16 + 4g + i in its high one, g < 4), which are the device row's bytes 4g .. 4g + 3 of that block
// in both layouts: the relay copies 4 bytes at a time.
void RelayForDevice(const TensorView& t, QKind kind, uint8_t* codes, uint16_t* scales) {
  const uint64_t rows = t.shape[0], cols = t.shape[1], blocks = Blocks(cols);
  const QuantGeometry g = QuantMatrixGeometry(t.dtype, rows, cols);
  const uint64_t block_bytes = RowBytes(kind, 1), groups = block_bytes / 4;
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* panel = t.data + r / kQuantPanelRows * g.panel_bytes;
    const uint64_t pr = r % kQuantPanelRows;
    uint8_t* row = codes + r * RowBytes(kind, blocks);
    for (uint64_t b = 0; b < blocks; ++b) {
      scales[r * blocks + b] = PanelScale(panel, pr, b);
      const uint8_t* blk = panel + g.scale_bytes + b * g.block_panel_bytes;
      for (uint64_t q = 0; q < groups; ++q) {
        std::memcpy(row + b * block_bytes + 4 * q, blk + 64 * q + 4 * pr, 4);
      }
    }
  }
}

}  // namespace cuda
}  // namespace fflite
