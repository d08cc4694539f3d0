// Progress reporting for fflite-convert: a live bar on a terminal (tensors and bytes done, rate,
// time left), or a single summary line when stderr is a file or a pipe.
#ifndef FFLITE_CONVERTER_PROGRESS_H_
#define FFLITE_CONVERTER_PROGRESS_H_

#include <chrono>
#include <cstdio>
#include <string>

#include "converter/convert.h"

namespace fflite {
namespace converter {

// "1.5 GiB", "12.0 MiB", "512 B".
std::string HumanBytes(double bytes);

class ProgressReporter {
 public:
  // Writes to `out` (not owned). `interactive`: redraw a bar in place (use isatty(fileno(out))).
  ProgressReporter(FILE* out, bool interactive);

  // Call after each tensor; redraws at most 10 times a second (and at the end).
  void Update(const ConvertProgress& p);
  // Ends the bar, or prints the one-line summary: "wrote PATH: N tensors, X in Ys (Z/s)".
  void Finish(const std::string& output, const ConvertResult& result);
  // Clears a partially drawn bar before an error message is printed.
  void Abort();

  // The bar's text for `p` after `seconds` (exposed for tests).
  static std::string FormatBar(const ConvertProgress& p, double seconds, int width);

 private:
  double Seconds() const;
  FILE* out_;
  bool interactive_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  ConvertProgress last_;
};

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_PROGRESS_H_
