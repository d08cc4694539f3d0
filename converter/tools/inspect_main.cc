// fflite-inspect: prints what an fflite model file holds (layers, shapes, dtypes, bytes, per-token
// costs, converter metadata), as a table or --json. Loads with the runtime's own loader.
#include <cstdio>
#include <string>
#include <vector>

#include "c_status.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "base/tool_flags.h"
#include "converter/gguf.h"
#include "converter/gguf_convert.h"
#include "converter/inspect.h"
#include "format/model.h"

ABSL_FLAG(bool, json, false, "Print one JSON object instead of the table.");

int main(int argc, char** argv) {
  fflite::HelpListsFlagsOf(__FILE__, "fflite-inspect");
  absl::SetProgramUsageMessage(
      "prints what an fflite model file holds, or what fflite-convert would make of a GGUF "
      "file.\nusage: fflite-inspect MODEL.fflite|MODEL.gguf [--json]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  if (fflite::converter::LooksLikeGguf(args[1])) {
    if (absl::GetFlag(FLAGS_json)) {
      std::fprintf(stderr, "fflite-inspect: --json is for .fflite files; a GGUF file is "
                           "described as text\n");
      return 2;
    }
    auto gguf = fflite::converter::GgufFile::Open(args[1]);
    if (!gguf.ok()) {
      std::fprintf(stderr, "fflite-inspect: %s\n", fflite::StatusText(gguf.status()).c_str());
      return 1;
    }
    const std::string text = fflite::converter::DescribeGguf(*gguf);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  auto model = fflite::Model::LoadFile(args[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "fflite-inspect: %s\n", fflite::StatusText(model.status()).c_str());
    return 1;
  }
  const fflite::converter::ModelSummary summary = fflite::converter::Summarize(**model, args[1]);
  const std::string text = absl::GetFlag(FLAGS_json) ? fflite::converter::FormatSummaryJson(summary)
                                                     : fflite::converter::FormatSummaryTable(summary);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
