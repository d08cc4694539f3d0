#include "bench/kernel_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/half.h"
#include "format/dtype.h"
#include "format/quant_layout.h"
#include "format/quantize.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_types.h"

namespace fflite {
namespace bench {

namespace {

using Clock = std::chrono::steady_clock;

// The row length of a case: a Llama-size d_model, or the longest multiple of 256 (the k-quants)
// for which 16 rows (one panel) fit the case's size.
constexpr uint64_t kK = 4096;

// A [rows, kK] matrix of `info`'s dtype from Gaussian weights: `base_rows` rows made (quantised
// by the converter's quantiser, without the search: only the rate is read), repeated to `rows`
// (the panels of a matrix are independent, so copies of a matrix's panels are a matrix).
bool MakeMatrix(const DTypeInfo& info, uint64_t rows, uint64_t k, AlignedBuffer<uint8_t>* out) {
  const uint64_t base_rows = std::min<uint64_t>(rows, 256);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(base_rows * k);
  for (float& v : w) v = normal(rng);
  const uint64_t base_bytes = TensorBytes(info.dtype, {base_rows, k}, info.layout);
  const uint64_t bytes = TensorBytes(info.dtype, {rows, k}, info.layout);
  if (base_bytes == 0 || bytes == 0 || !out->Allocate(bytes, 64)) return false;
  uint8_t* dst = out->data();
  if (info.dtype == DType::IQ4_XS) {
    // Kept from GGUF only (the quantiser does not write it, nor iq4_nl): random levels and scales.
    std::uniform_int_distribution<int> index(0, 15), scale(-32, 31);
    PackQ6KFromBlocks(
        info.dtype, base_rows, k,
        [&](uint64_t, uint64_t, uint16_t* d, int8_t* scales, int8_t* values) {
          *d = F32ToF16(1e-5f);
          for (int j = 0; j < 16; j += 2) {
            scales[j] = scales[j + 1] = static_cast<int8_t>(scale(rng));
          }
          for (int e = 0; e < 256; ++e) values[e] = kIq4Levels[index(rng)];
        },
        dst);
  } else if (info.dtype == DType::Q2_K_PACKED) {
    // Kept from GGUF only: random GGUF Q2_K blocks (scales, mins and values), small d and dmin.
    std::vector<uint8_t> gguf(base_rows * k / 256 * 84);
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : gguf) b = static_cast<uint8_t>(byte(rng));
    for (size_t i = 0; i < gguf.size(); i += 84) {
      const uint16_t d = F32ToF16(1e-4f), dmin = F32ToF16(1.5e-4f);
      std::memcpy(&gguf[i + 80], &d, 2);
      std::memcpy(&gguf[i + 82], &dmin, 2);
    }
    PackQ2KFromGguf(base_rows, k, gguf.data(), dst);
  } else if (info.dtype == DType::IQ4_NL || info.dtype == DType::MXFP4) {
    // Random levels (MXFP4: E2M1 codes) and one scale.
    const int8_t* levels = info.dtype == DType::MXFP4 ? kMxfp4Levels : kIq4Levels;
    std::uniform_int_distribution<int> index(0, 15);
    std::vector<int8_t> q(base_rows * k);
    std::vector<uint16_t> scales(base_rows * k / kQuantBlock, F32ToF16(1e-4f));
    for (int8_t& v : q) v = levels[index(rng)];
    PackQuantMatrix(info.dtype, base_rows, k, q.data(), scales.data(), dst);
  } else if (info.quantized) {
    QuantizeOptions q;
    q.search = false;
    if (!QuantizeMatrix(info.dtype, base_rows, k, w.data(), q, "bench", dst, nullptr).ok()) {
      return false;
    }
  } else {
    for (uint64_t i = 0; i < base_rows * k; ++i) {
      if (info.float_type == FloatType::kF32) {
        std::memcpy(dst + 4 * i, &w[i], 4);
      } else {
        const uint16_t h = info.float_type == FloatType::kF16 ? F32ToF16(w[i]) : F32ToBf16(w[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
    }
  }
  for (uint64_t at = base_bytes; at < bytes; at += base_bytes) {
    std::memcpy(dst + at, dst, std::min(base_bytes, bytes - at));
  }
  return true;
}

struct Case {
  std::string kernel, isa, dtype;
  int64_t tokens = 0;
  uint64_t rows = 0, k = 0, bytes = 0;
  double seconds = 0;  // median per call
};

}  // namespace

double MeasureCoreClockGhz() {
  // 64 dependent adds per loop pass; the loop's own counter runs beside the chain.
  constexpr int kPasses = 2'000'000;
  std::vector<double> ghz;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t v = 0;
    const uint64_t step = static_cast<uint64_t>(rep) + 1;
    const auto t0 = Clock::now();
    for (int i = 0; i < kPasses; ++i) {
#if defined(__x86_64__) || defined(__i386__)
#define FFLITE_ADD8 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t" \
                    "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
#elif defined(__aarch64__) || defined(__arm__)
#define FFLITE_ADD8 "add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t" \
                    "add %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\tadd %0, %0, %1\n\t"
#endif
#if defined(FFLITE_ADD8)
      __asm__ volatile(FFLITE_ADD8 FFLITE_ADD8 FFLITE_ADD8 FFLITE_ADD8 FFLITE_ADD8 FFLITE_ADD8
                           FFLITE_ADD8 FFLITE_ADD8
                       : "+r"(v)
                       : "r"(step));
#else
      v = v * 3 + 1;  // no assembly for this target: a rough figure
#endif
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    volatile uint64_t sink = v;
    (void)sink;
    ghz.push_back(64.0 * kPasses / s / 1e9);
  }
#undef FFLITE_ADD8
  std::sort(ghz.begin(), ghz.end());
  return ghz[ghz.size() / 2];
}

int RunKernelBench(const KernelBenchOptions& options) {
  const double ghz = MeasureCoreClockGhz();
  const Kernels& kernels = BestKernels();
  const QGemvKernel& qgemv = BestQGemvKernel();
  const QGemmKernel& qgemm = BestQGemmKernel();
  std::vector<Case> cases;
  int64_t max_tokens = 1;
  for (int64_t t : options.tokens) max_tokens = std::max(max_tokens, t);
  std::vector<float> x(static_cast<size_t>(max_tokens) * kK);  // k <= kK
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  std::vector<QActBlock> xq(static_cast<size_t>(max_tokens) * (kK / 32));

  for (const std::string& kernel : options.kernels) {
    if (kernel != "gemv" && kernel != "qgemv" && kernel != "qgemm") {
      std::fprintf(stderr, "--kernels: '%s' is not one of gemv, qgemv, qgemm\n", kernel.c_str());
      return 2;
    }
    for (const std::string& dname : options.dtypes) {
      const DTypeInfo* info = FindDTypeNamed(dname);
      if (info == nullptr) {
        std::fprintf(stderr, "--kernel_dtypes: unknown dtype '%s'\n", dname.c_str());
        return 2;
      }
      if (info->quantized != (kernel != "gemv")) continue;  // each kernel its own dtypes
      for (int64_t kib : options.kib) {
        const uint64_t want = static_cast<uint64_t>(kib) * 1024;
        uint64_t k = kK;
        while (k > 256 && TensorBytes(info->dtype, {16, k}, info->layout) > want) k -= 256;
        const uint64_t panel = TensorBytes(info->dtype, {16, k}, info->layout);
        const uint64_t rows = std::max<uint64_t>(want / panel, 1) * 16;
        AlignedBuffer<uint8_t> w;
        if (!MakeMatrix(*info, rows, k, &w)) {
          std::fprintf(stderr, "cannot make a %s matrix of %llu rows\n", dname.c_str(),
                       static_cast<unsigned long long>(rows));
          return 2;
        }
        std::vector<float> y(static_cast<size_t>(max_tokens) * rows);
        for (int64_t tokens : options.tokens) {
          const size_t c = static_cast<size_t>(tokens);
          if (kernel == "qgemm") qgemm.quantize_activations(c, k, x.data(), k, xq.data());
          const auto call = [&] {
            if (kernel == "gemv") {
              kernels.gemv(c, k, rows, w.data(), info->float_type, nullptr, x.data(), k,
                           y.data(), rows);
            } else if (kernel == "qgemv") {
              qgemv.qgemv(c, k, rows, w.data(), info->quant_type, nullptr, x.data(), k,
                          y.data(), rows);
            } else {
              qgemm.qgemm(c, k, rows, w.data(), info->quant_type, nullptr, xq.data(), y.data(),
                          rows);
            }
          };
          // Calls per timing: enough for about 20 ms.
          call();
          const auto t0 = Clock::now();
          call();
          const double one = std::chrono::duration<double>(Clock::now() - t0).count();
          const int n = std::max(1, static_cast<int>(0.02 / std::max(one, 1e-9)));
          std::vector<double> per_call;
          for (int rep = 0; rep < options.reps; ++rep) {
            const auto s0 = Clock::now();
            for (int i = 0; i < n; ++i) call();
            per_call.push_back(std::chrono::duration<double>(Clock::now() - s0).count() / n);
          }
          std::sort(per_call.begin(), per_call.end());
          Case r;
          r.kernel = kernel;
          r.isa = kernel == "gemv" ? kernels.isa : kernel == "qgemv" ? qgemv.isa : qgemm.isa;
          r.dtype = dname;
          r.tokens = tokens;
          r.k = k;
          r.rows = rows;
          r.bytes = w.size();
          r.seconds = per_call[per_call.size() / 2];
          cases.push_back(r);
        }
      }
    }
  }
  if (options.json) {
    std::printf("{\"core_ghz\": %.3f, \"cases\": [", ghz);
  } else {
    std::printf("core clock (dependent adds): %.2f GHz\n", ghz);
    std::printf("%-6s %-10s %-5s %6s %10s %8s %6s %11s %9s %9s\n", "kernel", "isa", "dtype",
                "tokens", "KiB", "rows", "k", "us/call", "GB/s", "cyc/32w");
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& r = cases[i];
    const double weights = static_cast<double>(r.rows) * static_cast<double>(r.k);
    const double cyc32 = r.seconds * ghz * 1e9 * 32.0 / weights;
    const double gbs = static_cast<double>(r.bytes) / r.seconds / 1e9;
    if (options.json) {
      std::printf("%s{\"kernel\": \"%s\", \"isa\": \"%s\", \"dtype\": \"%s\", \"tokens\": %lld, "
                  "\"bytes\": %llu, \"rows\": %llu, \"k\": %llu, \"seconds\": %.9g, "
                  "\"gbs\": %.4g, \"cycles_per_32\": %.4g}",
                  i ? ", " : "", r.kernel.c_str(), r.isa.c_str(), r.dtype.c_str(),
                  static_cast<long long>(r.tokens), static_cast<unsigned long long>(r.bytes),
                  static_cast<unsigned long long>(r.rows), static_cast<unsigned long long>(r.k),
                  r.seconds, gbs, cyc32);
    } else {
      std::printf("%-6s %-10s %-5s %6lld %10.0f %8llu %6llu %11.2f %9.2f %9.2f\n",
                  r.kernel.c_str(), r.isa.c_str(), r.dtype.c_str(),
                  static_cast<long long>(r.tokens), static_cast<double>(r.bytes) / 1024.0,
                  static_cast<unsigned long long>(r.rows), static_cast<unsigned long long>(r.k),
                  r.seconds * 1e6, gbs, cyc32);
    }
  }
  if (options.json) std::printf("]}\n");
  return 0;
}

}  // namespace bench
}  // namespace fflite
