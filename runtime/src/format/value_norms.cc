// ‖vᵢ‖ of an FFN's value vectors (down's columns), for every stored dtype and layout.
#include "format/value_norms.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "format/dtype.h"

namespace fflite {

absl::Status ValueNorms(const FfnView& f, std::vector<double>* norms) {
  if (norms == nullptr) return absl::InvalidArgumentError("ValueNorms: norms is null");
  const TensorView& down = f.down;
  if (!down.present() || down.shape.size() != 2) {
    return absl::InvalidArgumentError("ValueNorms: the FFN has no down matrix");
  }
  if (!LayoutValidFor(down.dtype, down.layout)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ValueNorms: down has dtype %s (%d) in layout %s (%d), which this build cannot read",
        DTypeName(down.dtype), static_cast<int>(down.dtype), LayoutName(down.layout),
        static_cast<int>(down.layout)));
  }
  const uint64_t d_ff = f.d_ff;
  std::vector<double> sum(d_ff, 0.0);  // [d_ff]: Σ over the value vector's elements of v²

  const uint64_t rows = down.shape[0], cols = down.shape[1];
  if (cols < d_ff) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ValueNorms: down has %d columns, fewer than d_ff %d", cols, d_ff));
  }
  if (down.value_rows()) {
    // Stored transposed ([d_ff_padded][d_model], float): vᵢ is stored row i.
    std::vector<float> v(rows);
    for (uint64_t i = 0; i < d_ff; ++i) {
      DequantizeRows(down.dtype, Layout::ROW_MAJOR, cols, rows, down.data, i, 1, v.data());
      for (const float x : v) sum[i] += static_cast<double>(x) * x;
    }
    norms->resize(d_ff);
    for (uint64_t i = 0; i < d_ff; ++i) (*norms)[i] = std::sqrt(sum[i]);
    return absl::OkStatus();
  }

  // down: [d_model, d_ff_padded], row-major for float dtypes, a panel layout (quant_layout.h) for
  // I8/I4. Row r holds element r of every value vector, so the norms are column sums of
  // squares. DequantizeRows reads every dtype and layout through the dtype table (f16/bf16
  // converted exactly by base/half.h, I8/I4 as q · scale, rotated back), one row at a time.
  std::vector<float> row(cols);  // [d_ff_padded]: one row of down as f32
  for (uint64_t r = 0; r < rows; ++r) {
    DequantizeRows(down.dtype, down.layout, rows, cols, down.data, r, 1, row.data());
    for (uint64_t i = 0; i < d_ff; ++i) {
      const double v = row[i];
      sum[i] += v * v;
    }
  }
  norms->resize(d_ff);
  for (uint64_t i = 0; i < d_ff; ++i) (*norms)[i] = std::sqrt(sum[i]);
  return absl::OkStatus();
}

}  // namespace fflite
