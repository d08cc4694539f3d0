// fflite-bench: what it times (sessions made as users make them, or the plain-XNNPACK baseline)
// and how: every layer in turn, the sets of runners alternating, medians and paired ratios.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_TIMING_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_TIMING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "backends/backend.h"
#include "format/model.h"
#include "session/session.h"

namespace fflite {
namespace bench {

struct Stats {
  double median = 0, min = 0, max = 0;  // seconds
};
Stats Summarise(std::vector<double> t);

// Something that runs a model's layers and reports its counters.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual absl::Status Run(size_t layer, const float* x, size_t n, float* y) = 0;
  virtual BackendStats Stats() const = 0;
};

// A session, made as users make one (Session::Create).
class SessionRunner : public Runner {
 public:
  explicit SessionRunner(std::unique_ptr<Session> session) : session_(std::move(session)) {}
  absl::Status Run(size_t layer, const float* x, size_t n, float* y) override {
    return session_->Run(layer, x, n, y);
  }
  BackendStats Stats() const override { return session_->Stats(); }
  Session& session() { return *session_; }

 private:
  std::unique_ptr<Session> session_;
};

// A backend of the bench's own (the plain-XNNPACK baseline).
class BackendRunner : public Runner {
 public:
  explicit BackendRunner(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {}
  absl::Status Run(size_t layer, const float* x, size_t n, float* y) override {
    return backend_->Run(layer, x, n, y);
  }
  BackendStats Stats() const override { return backend_->Stats(); }

 private:
  std::unique_ptr<Backend> backend_;
};

using RunnerSet = std::vector<std::unique_ptr<Runner>>;

// What Time measured: per set, the call's time over the repetitions; with two sets, the median
// over repetitions of the second's time over the first's in the same repetition; and the first
// set's routed experts (per call: time, bytes of the forms their batches read; over the timed
// calls: batches, and how many ran many at once).
struct Timing {
  std::vector<Stats> stats;
  double paired = 0.0;
  Stats routed;
  double routed_bytes = 0.0;
  uint64_t routed_batches = 0, routed_batches_together = 0;
};

// Runs every layer in turn (each layer's output is the next one's input), on runner `r % n` of
// each set. With two sets (ours, a baseline) the runs alternate, so that the load of a shared
// machine falls on both alike, and so does the order within a repetition. With `vary`, each
// repetition takes the next of 64 random inputs (made before timing). Every runner's first call
// is untimed (it may prepare weights).
absl::Status Time(const std::vector<RunnerSet*>& sets, const Model& model, size_t tokens,
                  int warmup, int reps, bool vary, Timing* timing);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_TIMING_H_
