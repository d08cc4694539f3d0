// fflite-bench --storage (storage_bench.h).
#include "c_status.h"
#include "bench/storage_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/backend.h"
#include "session/session.h"

namespace fflite {
namespace bench {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Drops the file's pages from the page cache (every process's view of it), written back first
// (a file just written is dirty, and dirty pages are not dropped).
bool DropPages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ::fdatasync(fd);
  const bool ok = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

// Sequential reads of the first `limit` bytes of the file in 8 MiB pieces, direct where the file
// system allows (else buffered, after dropping its pages): bytes per second, and how. Without
// `drop`: buffered reads that leave the file in the page cache.
double StorageBandwidth(const std::string& path, uint64_t limit, bool* direct, bool drop = true) {
  if (drop) DropPages(path);
  int fd = drop ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
  *direct = fd >= 0;
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0.0;
  constexpr size_t kPiece = size_t{8} << 20;
  void* buf = nullptr;
  if (::posix_memalign(&buf, 4096, kPiece) != 0) {
    ::close(fd);
    return 0.0;
  }
  uint64_t done = 0;
  const double t = Now();
  while (done < limit) {
    const ssize_t r = ::pread(fd, buf, kPiece, static_cast<off_t>(done));
    if (r <= 0) break;
    done += static_cast<uint64_t>(r);
  }
  const double s = Now() - t;
  std::free(buf);
  ::close(fd);
  if (drop) DropPages(path);
  return s > 0 ? static_cast<double>(done) / s : 0.0;
}

// A memory cgroup with `limit` bytes that this process joins (v2 where the machine has it, else
// v1); left on destruction (the process back in its parent group, the group removed).
class MemoryCgroup {
 public:
  bool Enter(uint64_t limit, std::string* error) {
    const std::string name = absl::StrFormat("fflite-bench-%d", static_cast<int>(::getpid()));
    std::ifstream controllers("/sys/fs/cgroup/cgroup.controllers");
    std::string line;
    if (controllers.good() && std::getline(controllers, line) &&
        line.find("memory") != std::string::npos) {
      dir_ = "/sys/fs/cgroup/" + name;
      parent_ = "/sys/fs/cgroup";
      limit_file_ = "memory.max";
    } else {
      dir_ = "/sys/fs/cgroup/memory/" + name;
      parent_ = "/sys/fs/cgroup/memory";
      limit_file_ = "memory.limit_in_bytes";
    }
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      *error = absl::StrFormat("cannot make the memory cgroup %s: %s (root and a memory "
                               "controller, v1 or v2, are needed)", dir_, std::strerror(errno));
      dir_.clear();
      return false;
    }
    if (!Write(dir_ + "/" + limit_file_, absl::StrCat(limit)) ||
        !Write(dir_ + "/cgroup.procs", absl::StrCat(::getpid()))) {
      *error = absl::StrFormat("cannot limit or join the memory cgroup %s: %s", dir_,
                               std::strerror(errno));
      Leave();
      return false;
    }
    return true;
  }
  // The group's peak memory (page cache included), or 0 where the kernel does not say.
  uint64_t PeakBytes() const {
    for (const char* f : {"memory.peak", "memory.max_usage_in_bytes"}) {
      std::ifstream in(dir_ + "/" + f);
      uint64_t v = 0;
      if (in >> v) return v;
    }
    return 0;
  }
  void Leave() {
    if (dir_.empty()) return;
    Write(parent_ + "/cgroup.procs", absl::StrCat(::getpid()));
    ::rmdir(dir_.c_str());
    dir_.clear();
  }
  ~MemoryCgroup() { Leave(); }

 private:
  static bool Write(const std::string& file, const std::string& value) {
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
    const int err = errno;
    ::close(fd);
    errno = err;
    return ok;
  }
  std::string dir_, parent_, limit_file_;
};

double RssMb() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1e6;
}

struct RunResult {
  bool ok = false;
  double decode_ms = 0.0;   // median per token (every layer)
  double prefill_s = 0.0;   // one call per layer of the prefill tokens
  BackendStats decode_stats, prefill_stats;  // counters over each part
  double rss_mb = 0.0;
};

BackendStats Minus(const BackendStats& a, const BackendStats& b) {
  BackendStats d = a;
  d.expert_hits -= b.expert_hits;
  d.expert_misses -= b.expert_misses;
  d.expert_reads -= b.expert_reads;
  d.expert_read_buffered_bytes -= b.expert_read_buffered_bytes;
  d.expert_read_direct_bytes -= b.expert_read_direct_bytes;
  d.expert_read_wait_seconds -= b.expert_read_wait_seconds;
  d.expert_prefetches_used -= b.expert_prefetches_used;
  d.expert_prefetches_wasted -= b.expert_prefetches_wasted;
  d.routed_expert_bytes -= b.routed_expert_bytes;
  return d;
}

// Decode steps (one token through every layer, each layer's output the next one's input) and a
// prefill (prefill_tokens through every layer), on a session with `budget`.
RunResult Measure(const StorageBench& b, uint64_t budget, int steps, size_t prefill,
                  bool warm = false) {
  RunResult r;
  // A model of its own: its mapping goes with it, so that pages one phase mapped in do not stay
  // in the page cache for the next (the kernel drops no page a process maps).
  absl::StatusOr<std::unique_ptr<Model>> loaded = Model::LoadFile(b.path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", fflite::StatusText(loaded.status()).c_str());
    return r;
  }
  const Model& model = **loaded;
  const size_t d = model.d_model(), layers = model.layers().size();
  SessionOptions so;
  so.backend = "xnnpack";
  so.num_threads = b.threads;
  so.max_tokens = std::max<size_t>(1, prefill);
  so.expert_budget_bytes = budget;
  so.cpu_options = &b.options;
  absl::StatusOr<std::unique_ptr<Session>> session = Session::Create(model, so);
  if (!session.ok()) {
    std::fprintf(stderr, "session: %s\n", fflite::StatusText(session.status()).c_str());
    return r;
  }
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(so.max_tokens * d), y(so.max_tokens * d);
  std::vector<double> times;
  if (warm) {
    // Every expert's pages mapped in first (a call of max_tokens tokens through every layer
    // routes to about all of them), so that the timed steps pay no page faults.
    for (float& v : a) v = dist(gen);
    for (size_t l = 0; l < layers; ++l) {
      if (!(*session)->Run(l, a.data(), so.max_tokens, y.data()).ok()) return r;
    }
  }
  BackendStats before = (*session)->Stats();
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < d; ++i) a[i] = dist(gen);
    const double t = Now();
    for (size_t l = 0; l < layers; ++l) {
      const absl::Status st = (*session)->Run(l, a.data(), 1, y.data());
      if (!st.ok()) {
        std::fprintf(stderr, "decode: %s\n", fflite::StatusText(st).c_str());
        return r;
      }
      std::swap(a, y);
    }
    times.push_back(Now() - t);
  }
  r.decode_stats = Minus((*session)->Stats(), before);
  std::sort(times.begin(), times.end());
  r.decode_ms = times.empty() ? 0.0 : 1e3 * times[times.size() / 2];
  if (prefill > 0) {
    for (float& v : a) v = dist(gen);
    before = (*session)->Stats();
    const double t = Now();
    for (size_t l = 0; l < layers; ++l) {
      const absl::Status st = (*session)->Run(l, a.data(), prefill, y.data());
      if (!st.ok()) {
        std::fprintf(stderr, "prefill: %s\n", fflite::StatusText(st).c_str());
        return r;
      }
      std::swap(a, y);
    }
    r.prefill_s = Now() - t;
    r.prefill_stats = Minus((*session)->Stats(), before);
  }
  r.rss_mb = RssMb();
  r.ok = true;
  return r;
}

// `calls`: how many of the timed units (tokens, or one prefill) the counters cover.
void PrintStreamed(const char* what, const RunResult& r, const BackendStats& s, double seconds,
                   double bandwidth, double resident_s, int calls) {
  const double read = static_cast<double>(s.expert_read_buffered_bytes +
                                          s.expert_read_direct_bytes) / calls;
  const double bound = read / bandwidth + resident_s;
  std::printf(
      "  %s: %.2f ms (median); each read %.1f MB from the file (of all %d: %.1f MB direct, "
      "%.1f MB through the page cache, %" PRIu64 " reads, %.1f ms waited for them); bound = "
      "read / storage bandwidth + resident = %.2f ms: %.2fx the bound\n",
      what, 1e3 * seconds, read / 1e6, calls, s.expert_read_direct_bytes / 1e6,
      s.expert_read_buffered_bytes / 1e6, s.expert_reads, 1e3 * s.expert_read_wait_seconds,
      1e3 * bound, bound > 0 ? seconds / bound : 0.0);
  std::printf("    hits %" PRIu64 ", misses %" PRIu64 ", guesses at the next layer used %" PRIu64
              ", wasted %" PRIu64 " (%.0f%% right)\n",
              s.expert_hits, s.expert_misses, s.expert_prefetches_used,
              s.expert_prefetches_wasted,
              s.expert_prefetches_used + s.expert_prefetches_wasted == 0
                  ? 0.0
                  : 100.0 * s.expert_prefetches_used /
                        (s.expert_prefetches_used + s.expert_prefetches_wasted));
  (void)r;
}

}  // namespace

int RunStorageBench(const StorageBench& b) {
  const Model& model = *b.model;
  uint64_t expert_bytes = 0, experts = 0;
  for (const LayerView& l : model.layers()) {
    for (const FfnView& f : l.moe.experts) {
      for (const TensorView* t : {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias,
                                  &f.down_bias}) {
        if (t->present()) expert_bytes += t->size;
      }
      ++experts;
    }
  }
  if (experts == 0) {
    std::fprintf(stderr, "--storage: the model has no routed experts\n");
    return 2;
  }
  const uint64_t budget = static_cast<uint64_t>(b.budget_fraction * expert_bytes);
  std::printf("storage: %s, %.1f MB of routed experts (%" PRIu64 "), budget %.1f MB (%.3g, %s), "
              "memory limit %s, %d thread(s)\n",
              b.path.c_str(), expert_bytes / 1e6, experts, budget / 1e6, b.budget_fraction,
              b.options.expert_policy == ResidencyPolicy::kLru ? "lru" : "frequency-aware",
              b.memory_limit_mib > 0 ? absl::StrFormat("%d MiB", b.memory_limit_mib).c_str()
                                     : "none",
              b.threads);
  bool direct = false;
  const double bandwidth = StorageBandwidth(b.path, uint64_t{2} << 30, &direct);
  std::printf("storage read bandwidth (cold, sequential 8 MiB reads, %s): %.2f GB/s\n",
              direct ? "O_DIRECT" : "buffered after dropping the pages", bandwidth / 1e9);
  if (bandwidth <= 0) {
    std::fprintf(stderr, "--storage: cannot read %s\n", b.path.c_str());
    return 1;
  }
  const size_t prefill = static_cast<size_t>(std::max(0, b.prefill_tokens));
  RunResult resident;
  if (b.resident_run) {
    // All resident: the file read once into the page cache, then the timed steps.
    bool ignored = false;
    StorageBandwidth(b.path, model.file_size(), &ignored, /*drop=*/false);
    resident = Measure(b, 0, b.decode_steps, prefill, /*warm=*/true);
    if (!resident.ok) return 1;
    std::printf("all resident (no budget, the file in the page cache): decode %.2f ms per token,"
                " prefill of %zu tokens %.3f s\n",
                resident.decode_ms, prefill, resident.prefill_s);
  }
  MemoryCgroup cgroup;
  if (b.memory_limit_mib > 0) {
    std::string error;
    if (!cgroup.Enter(static_cast<uint64_t>(b.memory_limit_mib) << 20, &error)) {
      std::fprintf(stderr, "--memory_limit_mib: %s\n", error.c_str());
      return 2;
    }
  }
  DropPages(b.path);
  const RunResult streamed = Measure(b, std::max<uint64_t>(budget, 1), b.decode_steps, prefill);
  if (!streamed.ok) return 1;
  std::printf("streamed (budget %.1f MB, the file's pages dropped first):\n", budget / 1e6);
  PrintStreamed("decode per token", streamed, streamed.decode_stats,
                streamed.decode_ms / 1e3, bandwidth, resident.decode_ms / 1e3, b.decode_steps);
  if (prefill > 0) {
    PrintStreamed(absl::StrFormat("prefill of %zu tokens", prefill).c_str(), streamed,
                  streamed.prefill_stats, streamed.prefill_s, bandwidth, resident.prefill_s, 1);
  }
  std::printf("  RSS after %.1f MB; cgroup peak (page cache included) %.1f MB\n",
              streamed.rss_mb, cgroup.PeakBytes() / 1e6);
  if (b.mmap_baseline) {
    DropPages(b.path);
    const RunResult mapped = Measure(b, 0, std::max(2, b.decode_steps / 2), 0);
    if (mapped.ok) {
      std::printf("mapped without a budget under the same limit: decode %.2f ms per token: "
                  "streamed is %.2fx faster\n",
                  mapped.decode_ms, streamed.decode_ms > 0 ? mapped.decode_ms /
                                                                 streamed.decode_ms : 0.0);
    }
  }
  return 0;
}

}  // namespace bench
}  // namespace fflite
