// Bounded JSON parsing for untrusted files (safetensors headers, config.json, index files):
// a size cap, a nesting-depth cap, and errors as Status instead of exceptions.
#ifndef FFLITE_CONVERTER_JSON_UTIL_H_
#define FFLITE_CONVERTER_JSON_UTIL_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace fflite {
namespace converter {

// Deepest nesting accepted: real headers and configs nest a few levels; the cap keeps the parser's
// recursion bounded on hostile input.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as JSON. `what` names the source in errors ("'dir/config.json'"). Errors:
// DataLoss for text that is not JSON or nests deeper than kMaxJsonDepth.
absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& what);

// Reads a whole (small) file and parses it; files over `max_bytes` are refused. Errors: NotFound /
// Unavailable for I/O, DataLoss for bad JSON, InvalidArgument for a file over the cap.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path, size_t max_bytes);

// A short, printable rendering of a JSON value for error messages (at most ~60 characters).
std::string JsonSnippet(const nlohmann::json& value);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_JSON_UTIL_H_
