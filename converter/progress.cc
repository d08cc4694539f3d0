// The converter's progress bar and summary line.
#include "converter/progress.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace fflite {
namespace converter {

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, units[u]);
}

namespace {

std::string Clock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long s = std::lround(seconds);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%02d:%02d", s / 60, s % 60);
}

}  // namespace

ProgressReporter::ProgressReporter(FILE* out, bool interactive)
    : out_(out), interactive_(interactive), start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

double ProgressReporter::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressReporter::FormatBar(const ConvertProgress& p, double seconds, int width) {
  const double frac = p.bytes_total == 0 ? 1.0
                                         : static_cast<double>(p.bytes_done) /
                                               static_cast<double>(p.bytes_total);
  const int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(width), ' ');
  for (int i = 0; i < filled && i < width; ++i) bar[static_cast<size_t>(i)] = '=';
  if (filled < width) bar[static_cast<size_t>(filled)] = '>';
  const double rate = seconds > 0 ? static_cast<double>(p.bytes_done) / seconds : 0.0;
  const double left = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : NAN;
  return absl::StrFormat("[%s] %3.0f%%  %d/%d tensors  %s/%s  %s/s  ETA %s", bar, frac * 100.0,
                         p.tensors_done, p.tensors_total, HumanBytes(p.bytes_done),
                         HumanBytes(p.bytes_total), HumanBytes(rate), Clock(left));
}

void ProgressReporter::Update(const ConvertProgress& p) {
  last_ = p;
  if (!interactive_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = p.tensors_done == p.tensors_total;
  if (!last && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::fprintf(out_, "\r%s\x1b[K", FormatBar(p, Seconds(), 30).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressReporter::Finish(const std::string& output, const ConvertResult& result) {
  const double s = Seconds();
  if (drawn_) std::fprintf(out_, "\n");
  drawn_ = false;
  const double rate = s > 0 ? static_cast<double>(result.data_bytes) / s : 0.0;
  std::fprintf(out_, "fflite-convert: wrote %s: %s, %d of %d FFN sublayers, %d tensors, %s in "
                     "%.1f s (%s/s)\n",
               output.c_str(), result.model_type.c_str(), static_cast<int>(result.sublayers_written),
               static_cast<int>(result.sublayers_total), static_cast<int>(result.tensors),
               HumanBytes(static_cast<double>(result.data_bytes)).c_str(), s,
               HumanBytes(rate).c_str());
  std::fflush(out_);
}

void ProgressReporter::Abort() {
  if (drawn_) std::fprintf(out_, "\n");
  drawn_ = false;
}

}  // namespace converter
}  // namespace fflite
