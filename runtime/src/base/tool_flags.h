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
// The tool's own flags are then listed under `tool`, its name ("Flags from fflite-inspect:"), not
// the path of its source file on the machine that built it.
inline void HelpListsFlagsOf(const char* source_file, const char* tool) {
  static std::string name, tool_name;
  name = std::string(BaseName(source_file));
  tool_name = tool;
  absl::FlagsUsageConfig config;
  config.normalize_filename = [](absl::string_view file) -> std::string {
    if (BaseName(file) == name) return tool_name;
    // Another library's flag (Abseil's own): its path without the leading '/'.
    while (!file.empty() && file.front() == '/') file.remove_prefix(1);
    return std::string(file);
  };
  config.contains_help_flags = [](absl::string_view file) {
    return file == tool_name || BaseName(file) == name;
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_BASE_TOOL_FLAGS_H_
