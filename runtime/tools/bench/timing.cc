// fflite-bench's timing (timing.h).
#include "bench/timing.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "base/status_macros.h"

namespace fflite {
namespace bench {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Stats Summarise(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), t.back()};
}

absl::Status Time(const std::vector<RunnerSet*>& sets, const Model& model, size_t tokens,
                  int warmup, int reps, bool vary, Timing* timing) {
  const size_t d = model.d_model();
  std::vector<std::vector<float>> inputs(vary ? 64 : 1, std::vector<float>(tokens * d));
  std::vector<float> a, b(tokens * d);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& input : inputs) {
    for (float& v : input) v = dist(gen);
  }
  std::vector<std::vector<double>> times(sets.size());
  std::vector<double> routed_times;  // the first set's, per call
  double routed_read = 0;            // the first set's bytes read by routed experts, all calls
  uint64_t batches = 0, together = 0;  // the first set's routed batches, all calls
  for (const RunnerSet* set : sets) warmup = std::max(warmup, static_cast<int>(set->size()));
  for (int r = 0; r < warmup + reps; ++r) {
    for (size_t k = 0; k < sets.size(); ++k) {
      // Which set goes first alternates too: on this class of machine the first of two
      // back-to-back runs measured ~10-20% slower in an A/A test (ours against ours).
      const size_t s = (k + static_cast<size_t>(r)) % sets.size();
      Runner& runner = *(*sets[s])[static_cast<size_t>(r) % sets[s]->size()];
      a = inputs[static_cast<size_t>(r) % inputs.size()];
      const BackendStats before = runner.Stats();
      const double t = Now();
      for (size_t l = 0; l < model.layers().size(); ++l) {
        FFLITE_RETURN_IF_ERROR(runner.Run(l, a.data(), tokens, b.data()));
        std::swap(a, b);
      }
      if (r >= warmup) times[s].push_back(Now() - t);
      if (r >= warmup && s == 0) {
        const BackendStats after = runner.Stats();
        routed_times.push_back(after.routed_seconds - before.routed_seconds);
        routed_read += static_cast<double>(after.routed_expert_bytes - before.routed_expert_bytes);
        batches += after.routed_batches - before.routed_batches;
        together += after.routed_batches_together - before.routed_batches_together;
      }
    }
  }
  timing->stats.clear();
  for (auto& t : times) timing->stats.push_back(Summarise(t));
  // With two sets: the median over repetitions of the second's time over the first's in the
  // same repetition (a spell of a shared machine falls on both sides of a pair alike).
  std::vector<double> ratios;
  for (size_t r = 0; times.size() == 2 && r < times[0].size(); ++r) {
    ratios.push_back(times[1][r] / times[0][r]);
  }
  timing->paired = ratios.empty() ? 0.0 : Summarise(ratios).median;
  timing->routed = Summarise(routed_times);
  timing->routed_bytes =
      routed_times.empty() ? 0.0 : routed_read / static_cast<double>(routed_times.size());
  timing->routed_batches = batches;
  timing->routed_batches_together = together;
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace fflite
