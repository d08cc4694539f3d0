// Typed, checked reads of config.json values.
#include "converter/config.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "converter/json_util.h"

namespace fflite {
namespace converter {

absl::StatusOr<HfConfig> HfConfig::Load(const std::string& path) {
  FFLITE_ASSIGN_OR_RETURN(nlohmann::json root, ReadJsonFile(path, kMaxConfigBytes));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrFormat("'%s': not a JSON object", path));
  }
  return HfConfig(std::move(root), path);
}

const nlohmann::json* HfConfig::Get(const std::string& key) const {
  if (!root_.is_object()) return nullptr;
  auto it = root_.find(key);
  if (it == root_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool HfConfig::Has(const std::string& key) const { return Get(key) != nullptr; }

absl::Status HfConfig::Error(const std::string& key, const std::string& problem) const {
  return absl::InvalidArgumentError(absl::StrFormat("'%s': %s %s", path_, key, problem));
}

absl::StatusOr<std::string> HfConfig::String(const std::string& key) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return Error(key, "is missing (a string is required)");
  if (!v->is_string()) return Error(key, absl::StrFormat("must be a string, got %s", JsonSnippet(*v)));
  return v->get<std::string>();
}

absl::StatusOr<std::string> HfConfig::String(const std::string& key,
                                             const std::string& fallback) const {
  if (Get(key) == nullptr) return fallback;
  return String(key);
}

absl::StatusOr<int64_t> HfConfig::Int(const std::string& key) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return Error(key, "is missing (an integer is required)");
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Error(key, absl::StrFormat("%s is out of range", JsonSnippet(*v)));
    }
    return v->get<int64_t>();
  }
  // Some configs write whole numbers as 2.0.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      return static_cast<int64_t>(d);
    }
  }
  return Error(key, absl::StrFormat("must be an integer, got %s", JsonSnippet(*v)));
}

absl::StatusOr<int64_t> HfConfig::Int(const std::string& key, int64_t fallback) const {
  if (Get(key) == nullptr) return fallback;
  return Int(key);
}

absl::StatusOr<double> HfConfig::Float(const std::string& key, double fallback) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return Error(key, absl::StrFormat("must be a number, got %s", JsonSnippet(*v)));
  const double d = v->get<double>();
  if (!std::isfinite(d)) return Error(key, "must be finite");
  return d;
}

absl::StatusOr<bool> HfConfig::Bool(const std::string& key, bool fallback) const {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    return Error(key, absl::StrFormat("must be true or false, got %s", JsonSnippet(*v)));
  }
  return v->get<bool>();
}

absl::StatusOr<double> HfConfig::Epsilon(const std::string& key, double fallback) const {
  FFLITE_ASSIGN_OR_RETURN(const double v, Float(key, fallback));
  // The format holds eps as a float32 and refuses a negative one; say so here, naming the key.
  if (v < 0.0 || v > std::numeric_limits<float>::max()) {
    return Error(key, absl::StrFormat("%g must be in [0, %g] (a norm epsilon, stored as float32)",
                                      v, std::numeric_limits<float>::max()));
  }
  return v;
}

absl::StatusOr<uint32_t> HfConfig::Dim(const std::string& key) const {
  return Count(key, 1, kMaxConfigDim);
}

absl::StatusOr<uint32_t> HfConfig::Count(const std::string& key, int64_t lo, int64_t hi) const {
  FFLITE_ASSIGN_OR_RETURN(int64_t v, Int(key));
  if (v < lo || v > hi) return Error(key, absl::StrFormat("%d must be in [%d, %d]", v, lo, hi));
  return static_cast<uint32_t>(v);
}

absl::StatusOr<uint32_t> HfConfig::Count(const std::string& key, int64_t lo, int64_t hi,
                                         int64_t fallback) const {
  if (Get(key) == nullptr) {
    if (fallback < lo || fallback > hi) {
      return Error(key, absl::StrFormat("is missing and its default %d is not in [%d, %d]",
                                        fallback, lo, hi));
    }
    return static_cast<uint32_t>(fallback);
  }
  return Count(key, lo, hi);
}

}  // namespace converter
}  // namespace fflite
