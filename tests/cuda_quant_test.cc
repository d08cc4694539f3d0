// The cuda backend's device layout of I8/I4 matrices (backends/cuda/cuda_quant.h), on the CPU: the
// same element functions the kernels read it with, against the file's own reading of each value
// (QuantValueAt, the panel layout) and its dequantisation (DequantizeRows), bit for bit. Built
// and run everywhere, with or without the cuda backend: the layout is host code.
#include "backends/cuda/cuda_quant.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "format/dtype.h"
#include "format/model.h"
#include "format/quant_layout.h"
#include "gtest/gtest.h"

namespace fflite {
namespace {

using cuda::QKind;

struct Stored {
  DType dtype;
  uint64_t rows, cols;
  std::vector<uint8_t> bytes;
  TensorView view;
};

// A stored [rows, cols] matrix of random values over the whole range (row 0 at the extremes) and
// random f16 scales of both signs, one of them 0.
Stored RandomStored(DType dtype, uint64_t rows, uint64_t cols, std::mt19937& gen) {
  Stored m{dtype, rows, cols, {}, {}};
  const int lo = dtype == DType::I8 ? -127 : -8, hi = dtype == DType::I8 ? 127 : 7;
  std::uniform_int_distribution<int> qdist(lo, hi);
  std::vector<int8_t> q(rows * cols);
  for (int8_t& v : q) v = static_cast<int8_t>(qdist(gen));
  for (uint64_t j = 0; j < cols; ++j) q[j] = static_cast<int8_t>(gen() & 1 ? hi : lo);
  const uint64_t blocks = (cols + 31) / 32;
  std::vector<uint16_t> scales(rows * blocks);
  std::uniform_real_distribution<float> sdist(-0.02f, 0.02f);
  for (uint16_t& s : scales) s = F32ToF16(sdist(gen));
  scales[scales.size() / 2] = 0;
  const QuantGeometry g = QuantMatrixGeometry(dtype, rows, cols);
  m.bytes.resize(g.bytes());
  PackQuantMatrix(dtype, rows, cols, q.data(), scales.data(), m.bytes.data());
  m.view.dtype = dtype;
  m.view.shape = {rows, cols};
  m.view.layout = Layout::PANEL16_K4;
  m.view.size = m.bytes.size();
  m.view.data = m.bytes.data();
  return m;
}

template <QKind K>
void CheckLayout(const Stored& m) {
  const uint64_t rows = m.rows, cols = m.cols, blocks = (cols + 31) / 32;
  std::vector<uint8_t> codes(cuda::DeviceCodeBytes(K, rows, cols), 0xa5);
  std::vector<uint16_t> scales(cuda::DeviceScaleBytes(rows, cols) / 2, 0xa5a5);
  ASSERT_EQ(codes.size(), rows * cuda::RowBytes(K, blocks));
  ASSERT_EQ(scales.size(), rows * blocks);
  cuda::RelayForDevice(m.view, K, codes.data(), scales.data());

  const QuantGeometry g = QuantMatrixGeometry(m.dtype, rows, cols);
  std::vector<float> deq(rows * cols);
  DequantizeRows(m.dtype, Layout::PANEL16_K4, rows, cols, m.bytes.data(), 0, rows, deq.data());
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> xdist(-1.0f, 1.0f);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* row = codes.data() + r * cuda::RowBytes(K, blocks);
    for (uint64_t b = 0; b < blocks; ++b) {
      ASSERT_EQ(scales[r * blocks + b], QuantScaleAt(g, m.bytes.data(), r, b))
          << "row " << r << " block " << b;
    }
    for (uint32_t j = 0; j < blocks * 32; ++j) {
      // Past cols: the padding values are 0.
      const int want = j < cols ? QuantValueAt(m.dtype, g, m.bytes.data(), r, j) : 0;
      ASSERT_EQ(cuda::ValueAt<K>(row, j), want) << "row " << r << " value " << j;
      if (j < cols) {
        const float w = cuda::WeightAt<K>(codes.data(), scales.data(),
                                          static_cast<uint32_t>(blocks),
                                          static_cast<uint32_t>(r), j);
        ASSERT_EQ(std::memcmp(&w, &deq[r * cols + j], 4), 0)
            << "row " << r << " value " << j << ": " << w << " vs " << deq[r * cols + j];
      }
    }
    // A lane's 16 bytes: its values in order, times x, summed as the kernels do.
    const uint32_t per = cuda::ValuesPer16Bytes(K);
    for (uint64_t c = 0; c < cuda::RowBytes(K, blocks) / 16; ++c) {
      uint32_t w[4];
      std::memcpy(w, row + 16 * c, 16);
      std::vector<float> x(per);
      for (float& v : x) v = xdist(gen);
      float want = 0.0f;
      for (uint32_t i = 0; i < per; ++i) {
        const uint64_t j = c * per + i;
        const int q = j < cols ? QuantValueAt(m.dtype, g, m.bytes.data(), r, j) : 0;
        want += static_cast<float>(q) * x[i];
      }
      for (uint32_t i = 0; i < per; ++i) {
        const float v = cuda::ValueF32Of16<K>(w, static_cast<int>(i));
        const int value = cuda::ValueAt<K>(row, static_cast<uint32_t>(c * per + i));
        ASSERT_EQ(v, static_cast<float>(value))
            << "row " << r << " chunk " << c << " value " << i;
      }
      const float got = cuda::DotOf16<K>(w, x.data());
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "row " << r << " chunk " << c;
    }
  }
}

TEST(CudaQuantLayoutTest, EveryValueScaleAndWeightAsTheFileHasThem) {
  std::mt19937 gen(3);
  for (uint64_t rows : {1, 16, 37}) {
    for (uint64_t cols : {32, 45, 96, 200}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
      CheckLayout<QKind::kQ8>(RandomStored(DType::I8, rows, cols, gen));
      CheckLayout<QKind::kQ4>(RandomStored(DType::I4, rows, cols, gen));
    }
  }
}

TEST(CudaQuantLayoutTest, OnlyPlainI8AndI4MatricesStayQuantised) {
  std::mt19937 gen(4);
  Stored m = RandomStored(DType::I4, 16, 64, gen);
  QKind kind = QKind::kQ8;
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(m.view, &kind));
  EXPECT_EQ(kind, QKind::kQ4);
  Stored m8 = RandomStored(DType::I8, 16, 64, gen);
  EXPECT_TRUE(cuda::KeepsQuantisedOnDevice(m8.view, &kind));
  EXPECT_EQ(kind, QKind::kQ8);
  TensorView rotated = m.view;  // its kernels multiply rotated activations
  rotated.layout = Layout::PANEL16_K4_HADAMARD32;
  EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(rotated, &kind));
  TensorView other = m.view;  // k-quants, MXFP4, ...: dequantised on upload for now
  other.dtype = DType::Q4_K;
  EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(other, &kind));
  TensorView absent;
  EXPECT_FALSE(cuda::KeepsQuantisedOnDevice(absent, &kind));
}

}  // namespace
}  // namespace fflite
