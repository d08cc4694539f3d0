// A Hugging Face config.json with typed accessors whose errors name the file, the key, the value
// and what was expected. Absent keys and JSON null both mean "not set" (HF writes nulls freely).
#ifndef FFLITE_CONVERTER_CONFIG_H_
#define FFLITE_CONVERTER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace fflite {
namespace converter {

// Dimensions accepted from a config (the runtime's own limit on d_model and d_ff).
inline constexpr int64_t kMaxConfigDim = int64_t{1} << 20;
inline constexpr size_t kMaxConfigBytes = 16u << 20;

class HfConfig {
 public:
  HfConfig() = default;
  HfConfig(nlohmann::json root, std::string path) : root_(std::move(root)), path_(std::move(path)) {}
  // Reads and parses `path`; the root must be a JSON object. Errors: see ReadJsonFile.
  static absl::StatusOr<HfConfig> Load(const std::string& path);

  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return root_; }
  bool Has(const std::string& key) const;

  // Required values: InvalidArgument when absent or of the wrong type.
  absl::StatusOr<std::string> String(const std::string& key) const;
  absl::StatusOr<int64_t> Int(const std::string& key) const;
  // Optional values: `fallback` when absent or null; InvalidArgument when of the wrong type.
  absl::StatusOr<std::string> String(const std::string& key, const std::string& fallback) const;
  absl::StatusOr<int64_t> Int(const std::string& key, int64_t fallback) const;
  absl::StatusOr<double> Float(const std::string& key, double fallback) const;
  absl::StatusOr<bool> Bool(const std::string& key, bool fallback) const;
  // A norm epsilon, stored as a float32: a number in [0, FLT_MAX], or `fallback` when absent.
  absl::StatusOr<double> Epsilon(const std::string& key, double fallback) const;
  // A model dimension: a required integer in [1, kMaxConfigDim].
  absl::StatusOr<uint32_t> Dim(const std::string& key) const;
  // A count in [lo, hi] (e.g. layers, experts), required or with a fallback.
  absl::StatusOr<uint32_t> Count(const std::string& key, int64_t lo, int64_t hi) const;
  absl::StatusOr<uint32_t> Count(const std::string& key, int64_t lo, int64_t hi,
                                 int64_t fallback) const;
  // An InvalidArgument error about `key` (for checks the accessors cannot make).
  absl::Status Error(const std::string& key, const std::string& problem) const;

 private:
  const nlohmann::json* Get(const std::string& key) const;  // nullptr when absent or null
  nlohmann::json root_;
  std::string path_;
};

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_CONFIG_H_
