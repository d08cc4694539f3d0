// Writes Hugging Face style checkpoints for converter tests: safetensors files (single or sharded
// with model.safetensors.index.json) and config.json, written from scratch here, independently of
// the converter's reader, plus raw byte-level writers for malformed files.
#ifndef FFLITE_TESTS_TESTING_CHECKPOINT_WRITER_H_
#define FFLITE_TESTS_TESTING_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "testing/model_builder.h"

namespace fflite {
namespace testing {

// Rounds `v` to what a tensor of safetensors dtype "F32", "F16" or "BF16" stores.
float RoundToDType(const std::string& dtype, float v);

class CheckpointWriter {
 public:
  // Adds a tensor in checkpoint order. Values are rounded to `dtype`; the stored (rounded) values
  // are returned so that the test's own computation uses exactly what the file holds.
  const std::vector<float>& Add(const std::string& name, std::vector<uint64_t> shape,
                                std::vector<float> values, const std::string& dtype = "");
  // Uniform values in center ± scale.
  const std::vector<float>& AddRandom(const std::string& name, std::vector<uint64_t> shape,
                                      Rng& rng, float scale, const std::string& dtype = "",
                                      float center = 0.0f);
  // An entry of another dtype (e.g. "I8", "I64", "U8"), with `bytes` (zeros when empty).
  void AddRaw(const std::string& name, const std::string& dtype, size_t element_size,
              std::vector<uint64_t> shape, std::vector<uint8_t> bytes = {});
  const std::vector<float>& Get(const std::string& name) const;
  // The dtype used when Add is given none ("F32" unless set).
  void set_default_dtype(const std::string& dtype) { default_dtype_ = dtype; }

  // Writes `dir`/config.json and the tensors: model.safetensors when shards == 1, else
  // model-0000i-of-0000n.safetensors (tensors dealt round-robin) plus the index.
  absl::Status Write(const std::string& dir, const std::string& config_json, int shards = 1) const;

 private:
  struct Entry {
    std::string name, dtype;
    size_t element_size = 0;
    std::vector<uint64_t> shape;
    std::vector<float> values;  // empty for raw entries
    std::vector<uint8_t> raw;   // a raw entry's bytes (empty: zeros)
  };
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::string default_dtype_ = "F32";
};

// A safetensors file from its parts: the 8-byte little-endian length (the header's size unless
// `declared_length` is given), the header text, then `data`.
absl::Status WriteSafetensorsRaw(const std::string& path, const std::string& header,
                                 const std::string& data,
                                 std::optional<uint64_t> declared_length = std::nullopt);
absl::Status WriteTextFile(const std::string& path, const std::string& text);
absl::Status ReadFileBytes(const std::string& path, std::string* out);
// A new empty folder under the test temporary directory.
std::string MakeTempDir();
// The names in `dir` (not "." or ".."), sorted.
std::vector<std::string> ListDir(const std::string& dir);

}  // namespace testing
}  // namespace fflite

#endif  // FFLITE_TESTS_TESTING_CHECKPOINT_WRITER_H_
