// Pieces shared by the converter fuzz targets: a per-process scratch folder removed at exit, a
// tiny byte reader that turns fuzz input into choices, and the "a converted model loads and runs"
// check. Header-only so that each target stays one source file.
#ifndef FFLITE_TESTS_FUZZ_FUZZ_UTIL_H_
#define FFLITE_TESTS_FUZZ_FUZZ_UTIL_H_

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "converter/example_checkpoint.h"
#include "format/model.h"
#include "session/session.h"

namespace fflite {
namespace fuzz {

// Stops the run so that libFuzzer (or the standalone runner, through the signal) reports the input.
[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A folder for this process only, removed with everything in it when the process exits normally
// (libFuzzer's -max_total_time and -runs end with exit()); folders of processes that died without
// exiting are removed by the next run. tmpfs (/dev/shm) when there is one:
// the writer fsyncs every output, which is free there and costs milliseconds on a disk.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string base;
    struct stat st;
    if (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK) == 0) {
      base = "/dev/shm";
    } else if (const char* t = ::getenv("TMPDIR"); t != nullptr && *t != '\0') {
      base = t;
    } else {
      base = "/tmp";
    }
    // Runs that libFuzzer stopped with _Exit (a finding, -timeout, Ctrl-C) left their folders:
    // remove those whose process is gone.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = e.path().filename().string();
      long pid = 0;
      if (std::sscanf(name.c_str(), "fflite_fuzz_%ld_", &pid) == 1 && pid > 0 &&
          ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        std::filesystem::remove_all(e.path(), ec);
      }
    }
    std::string tmpl = base + "/fflite_fuzz_" + std::to_string(::getpid()) + "_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) Fail("mkdtemp " + tmpl + ": " + std::strerror(errno));
    static std::string to_remove;
    to_remove = tmpl;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(to_remove, ignored);
    });
    return tmpl;
  }();
  return dir;
}

inline void MakeDir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) Fail("mkdir " + path + ": " + ec.message());
}

inline void WriteBytes(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Fail("cannot create " + path);
  const bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  if (std::fclose(f) != 0 || !ok) Fail("cannot write " + path);
}

// The names in `dir`, unsorted.
inline std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

// Turns fuzz bytes into choices; reads zeros once the input is used up, so every input is a
// complete (if boring) program. A hand-rolled FuzzedDataProvider: the standalone (gcc) build has
// no libFuzzer headers.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool Bool() { return (Byte() & 1) != 0; }
  // True with probability about 1/n; false on a used-up input, so that the zeros past its end
  // mean "the usual" rather than "the rare case" everywhere.
  bool OneIn(uint32_t n) { return Byte() % n == n - 1; }
  // Uniform-ish in [lo, hi].
  uint32_t Range(uint32_t lo, uint32_t hi) {
    const uint32_t span = hi - lo + 1;
    uint32_t v = Byte();
    if (span > 256) v = (v << 8) | Byte();
    return lo + v % span;
  }
  template <typename T>
  const T& Pick(const std::vector<T>& options) {
    return options[Range(0, static_cast<uint32_t>(options.size() - 1))];
  }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The example checkpoints behind fuzz_safetensors' fixtures and the seeds of both converter
// targets (make_fuzz_seeds): tiny, so that the fuzzer mutates a few KiB, and F16 for the mapping's
// 2-byte path. `arch` is "llama" or "mixtral".
inline converter::ExampleOptions TinyExample(const std::string& arch, uint32_t shards) {
  converter::ExampleOptions o;
  o.arch = arch;
  o.layers = 2;
  o.hidden_size = 4;
  o.intermediate_size = 6;
  o.experts = 3;
  o.top_k = 2;
  o.vocab_size = 4;
  o.dtype = "F16";
  o.shards = shards;
  o.seed = 7;
  return o;
}

// A refused conversion must be refused by the converter's own checks, which name the config key
// or tensor at fault: the writer's final check with the loader (whose message names layers of a
// temporary file) is only a backstop, and reaching it means a config value went unchecked.
// (A prefix match: messages quote input bytes, and libFuzzer soon learns to put the phrase there.)
inline void CheckConversionError(const absl::Status& st) {
  if (absl::StartsWith(st.message(), "the model spec does not make a valid model")) {
    Fail("the converter let through a config the format cannot hold: " + st.ToString());
  }
}

// A model the converter wrote must load, and each of its layers must run one token on the
// reference backend. Anything else is a converter (or writer) bug: the writer verifies the file
// with the loader before it is renamed into place.
inline void CheckModelRuns(const std::string& path) {
  auto model = Model::LoadFile(path);
  if (!model.ok()) Fail("converted model does not load: " + model.status().ToString());
  const Model& m = **model;
  SessionOptions options;
  options.backend = "reference";
  options.max_tokens = 1;
  auto session = Session::Create(m, options);
  if (!session.ok()) Fail("no reference session for a converted model: " + session.status().ToString());
  std::vector<float> x(m.d_model()), y(m.d_model());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  for (size_t layer = 0; layer < m.layers().size(); ++layer) {
    absl::Status st = (*session)->Run(layer, x.data(), 1, y.data());
    if (!st.ok()) Fail("converted model's layer does not run: " + st.ToString());
  }
}

// The invariants of one conversion into `out_dir` (empty before it) whose output was `out`: a
// failure has a status from the converter's own checks and leaves nothing in the folder; a success
// leaves exactly its output, which loads and runs (and is then removed).
inline void CheckConversion(const absl::Status& st, const std::string& out_dir,
                            const std::string& out) {
  const std::vector<std::string> left = Entries(out_dir);
  if (!st.ok()) {
    CheckConversionError(st);
    if (!left.empty()) Fail("a failed conversion left '" + left[0] + "' in the output folder");
    return;
  }
  if (left.size() != 1) Fail("a conversion left more than its output in the output folder");
  CheckModelRuns(out);
  std::filesystem::remove(out);
}

}  // namespace fuzz
}  // namespace fflite

#endif  // FFLITE_TESTS_FUZZ_FUZZ_UTIL_H_
