// For the command-line tools (fflite-bench, fflite-neurons, fflite-convert, fflite-inspect,
// fflite-make-example): make `--help` list the tool's own flags.
#ifndef FFLITE_RUNTIME_SRC_BASE_TOOL_FLAGS_H_
#define FFLITE_RUNTIME_SRC_BASE_TOOL_FLAGS_H_

#include <string>

#include "absl/flags/usage_config.h"
#include "absl/strings/string_view.h"

namespace fflite {

inline absl::string_view BaseName(absl::string_view path) {
  const size_t slash = path.find_last_of("/\\");
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// Abseil's --help lists the flags of files named like the program ("fflite-bench.cc",
// "fflite-bench-main.cc"); ours are named fflite_bench.cc or convert_main.cc, so --help said "No
// flags matched". Call before absl::ParseCommandLine with the file that defines the flags
// (__FILE__), as recorded by ABSL_FLAG in the same file.
// Files are compared by their base names (Abseil normalises the recorded paths).
inline void HelpListsFlagsOf(const char* source_file) {
  static std::string name;
  name = std::string(BaseName(source_file));
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) { return BaseName(file) == name; };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_TOOL_FLAGS_H_
