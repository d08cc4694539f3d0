// Writes GGUF files for the converter's tests and the fuzzer's seeds, from the GGUF specification
// (ggml's docs/gguf.md), independently of the converter's reader: typed key-values, tensor infos
// and an aligned data section, plus the two simple block types' quantisers and dequantisers
// (Q8_0: an f16 scale d and 32 int8 values, x = q·d; Q4_0: an f16 d and 32 nibbles n, byte j
// holding elements j (low) and j + 16 (high), x = (n - 8)·d). Every byte can be bent for
// malformed-file tests (version, counts, raw key-values, raw tensor infos).
#ifndef FFLITE_TESTS_TESTING_GGUF_WRITER_H_
#define FFLITE_TESTS_TESTING_GGUF_WRITER_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/half.h"

namespace fflite {
namespace testing {

// GGUF value types and the ggml type ids the tests use.
enum GgufValueType : uint32_t {
  kGgufU8 = 0, kGgufI8 = 1, kGgufU16 = 2, kGgufI16 = 3, kGgufU32 = 4, kGgufI32 = 5,
  kGgufF32 = 6, kGgufBool = 7, kGgufString = 8, kGgufArray = 9, kGgufU64 = 10, kGgufI64 = 11,
  kGgufF64 = 12,
};
enum GgmlTypeId : uint32_t { kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ8_0 = 8,
                             kGgmlQ4_K = 12, kGgmlQ6_K = 14, kGgmlBF16 = 30 };

class GgufWriter {
 public:
  // Little-endian appends.
  template <typename T>
  static void Put(std::vector<uint8_t>* out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out->insert(out->end(), b, b + sizeof(T));
  }
  static void PutString(std::vector<uint8_t>* out, const std::string& s) {
    Put<uint64_t>(out, s.size());
    out->insert(out->end(), s.begin(), s.end());
  }

  // A key-value with its value's bytes as given (after the type).
  void RawKv(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    PutString(&kvs_, key);
    Put<uint32_t>(&kvs_, type);
    kvs_.insert(kvs_.end(), value.begin(), value.end());
    ++n_kv_;
  }
  void U32(const std::string& key, uint32_t v) { RawKv(key, kGgufU32, Bytes(v)); }
  void F32(const std::string& key, float v) { RawKv(key, kGgufF32, Bytes(v)); }
  void Bool(const std::string& key, bool v) { RawKv(key, kGgufBool, {static_cast<uint8_t>(v ? 1 : 0)}); }
  void Str(const std::string& key, const std::string& v) {
    std::vector<uint8_t> b;
    PutString(&b, v);
    RawKv(key, kGgufString, b);
  }
  void StrArray(const std::string& key, const std::vector<std::string>& v) {
    std::vector<uint8_t> b;
    Put<uint32_t>(&b, kGgufString);
    Put<uint64_t>(&b, v.size());
    for (const std::string& s : v) PutString(&b, s);
    RawKv(key, kGgufArray, b);
  }
  void U32Array(const std::string& key, const std::vector<uint32_t>& v) {
    std::vector<uint8_t> b;
    Put<uint32_t>(&b, kGgufU32);
    Put<uint64_t>(&b, v.size());
    for (uint32_t x : v) Put(&b, x);
    RawKv(key, kGgufArray, b);
  }

  // A tensor: ne[0] innermost; `data` its bytes (placed at the next aligned offset, or at
  // `offset` when given, for malformed files).
  void Tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
              const std::vector<uint8_t>& data, int64_t offset = -1) {
    tensors_.push_back({name, ne, type, data, offset});
  }
  // A float tensor of HF shape [rows, cols] (ne = [cols, rows]) stored as F32, F16 or BF16,
  // Q8_0 or Q4_0; returns the values the file holds (what its dequantisation gives).
  std::vector<float> Matrix(const std::string& name, const std::vector<uint64_t>& ne,
                            uint32_t type, const std::vector<float>& values) {
    std::vector<uint8_t> bytes;
    std::vector<float> held(values.size());
    for (size_t i = 0; i < values.size();) {
      if (type == kGgmlF32) {
        Put(&bytes, values[i]);
        held[i] = values[i];
        ++i;
      } else if (type == kGgmlF16) {
        const uint16_t h = F32ToF16(values[i]);
        Put(&bytes, h);
        held[i] = F16ToF32(h);
        ++i;
      } else if (type == kGgmlBF16) {
        const uint16_t h = F32ToBf16(values[i]);
        Put(&bytes, h);
        held[i] = Bf16ToF32(h);
        ++i;
      } else {  // Q8_0, Q4_0: 32 at a time
        const std::vector<uint8_t> blk = type == kGgmlQ8_0 ? QuantizeQ8_0(&values[i])
                                                           : QuantizeQ4_0(&values[i]);
        bytes.insert(bytes.end(), blk.begin(), blk.end());
        for (size_t j = 0; j < 32; ++j) {
          held[i + j] = type == kGgmlQ8_0 ? DequantQ8_0(blk.data(), j) : DequantQ4_0(blk.data(), j);
        }
        i += 32;
      }
    }
    Tensor(name, ne, type, bytes);
    return held;
  }

  uint32_t version = 3;
  uint32_t alignment = 32;         // the data section's and each tensor's
  int64_t tensor_count = -1;       // >= 0: written instead of the real count
  int64_t kv_count = -1;

  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    Put<uint32_t>(&out, version);
    Put<uint64_t>(&out, tensor_count >= 0 ? static_cast<uint64_t>(tensor_count) : tensors_.size());
    Put<uint64_t>(&out, kv_count >= 0 ? static_cast<uint64_t>(kv_count) : n_kv_);
    out.insert(out.end(), kvs_.begin(), kvs_.end());
    std::vector<uint64_t> offsets;
    uint64_t cursor = 0;
    for (const auto& t : tensors_) {
      cursor = (cursor + alignment - 1) / alignment * alignment;
      offsets.push_back(t.offset >= 0 ? static_cast<uint64_t>(t.offset) : cursor);
      cursor = offsets.back() + t.data.size();
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      PutString(&out, tensors_[i].name);
      Put<uint32_t>(&out, static_cast<uint32_t>(tensors_[i].ne.size()));
      for (uint64_t n : tensors_[i].ne) Put(&out, n);
      Put<uint32_t>(&out, tensors_[i].type);
      Put<uint64_t>(&out, offsets[i]);
    }
    const size_t data_start = (out.size() + alignment - 1) / alignment * alignment;
    out.resize(data_start, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const size_t at = data_start + offsets[i];
      if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size(), 0);
      std::copy(tensors_[i].data.begin(), tensors_[i].data.end(), out.begin() + static_cast<long>(at));
    }
    return out;
  }
  bool Write(const std::string& path) const {
    const std::vector<uint8_t> b = Bytes();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return static_cast<bool>(f);
  }

  // Q8_0 from the specification: d = max|x| / 127, q = round(x / d).
  static std::vector<uint8_t> QuantizeQ8_0(const float* x) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    std::vector<uint8_t> b;
    Put(&b, F32ToF16(d));
    for (int j = 0; j < 32; ++j) {
      Put(&b, static_cast<int8_t>(std::lround(x[j] * id)));
    }
    return b;
  }
  // Q4_0: the element of largest magnitude maps to -8: d = max / -8, n = clamp(x/d + 8.5, 0, 15).
  static std::vector<uint8_t> QuantizeQ4_0(const float* x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    std::vector<uint8_t> b;
    Put(&b, F32ToF16(d));
    auto nib = [&](float v) {
      return static_cast<uint8_t>(std::min(15, static_cast<int>(v * id + 8.5f)));
    };
    for (int j = 0; j < 16; ++j) Put(&b, static_cast<uint8_t>(nib(x[j]) | (nib(x[j + 16]) << 4)));
    return b;
  }
  static float DequantQ8_0(const uint8_t* blk, size_t j) {
    uint16_t d;
    std::memcpy(&d, blk, 2);
    return static_cast<float>(static_cast<int8_t>(blk[2 + j])) * F16ToF32(d);
  }
  static float DequantQ4_0(const uint8_t* blk, size_t j) {
    uint16_t d;
    std::memcpy(&d, blk, 2);
    const uint8_t byte = blk[2 + j % 16];
    const int n = j < 16 ? (byte & 0xf) : (byte >> 4);
    return static_cast<float>(n - 8) * F16ToF32(d);
  }

 private:
  template <typename T>
  static std::vector<uint8_t> Bytes(T v) {
    std::vector<uint8_t> b;
    Put(&b, v);
    return b;
  }
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<uint8_t> data;
    int64_t offset;
  };
  std::vector<uint8_t> kvs_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
};

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_TESTING_GGUF_WRITER_H_
