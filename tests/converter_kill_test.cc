// Kills the real fflite-convert with SIGKILL at points spread over a conversion and checks that
// the output folder never holds a partial output or a temporary file, and that the model already
// at the destination is left byte for byte as it was until a conversion has renamed its complete
// output into place.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "converter/example_checkpoint.h"
#include "format/model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/checkpoint_writer.h"
#include "testing/status_matchers.h"

#ifndef FFLITE_CONVERT_BIN
#error "FFLITE_CONVERT_BIN must name the fflite-convert binary"
#endif

namespace fflite {
namespace {

using Clock = std::chrono::steady_clock;

// Starts `fflite-convert --quiet args...` with stdout to /dev/null; returns its pid.
pid_t StartConvert(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {FFLITE_CONVERT_BIN, "--quiet"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid`; returns its wait status.
int Wait(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Runs a conversion to completion; returns its wall time in seconds (negative on failure).
double RunConvert(const std::vector<std::string>& args) {
  const Clock::time_point start = Clock::now();
  const int status = Wait(StartConvert(args));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "fflite-convert " << absl::StrJoin(args, " ") << ": wait status " << status;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? seconds : -1.0;
}

std::string ReadAll(const std::string& path) {
  std::string bytes;
  EXPECT_OK(testing::ReadFileBytes(path, &bytes));
  return bytes;
}

class ConverterKillTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::MakeTempDir(); }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  std::string root_;
};

TEST_F(ConverterKillTest, KilledConversionLeavesDestinationUntouched) {
  if (std::getenv("FFLITE_UNDER_QEMU") != nullptr) {
    GTEST_SKIP() << "FFLITE_UNDER_QEMU is set: a conversion of tens of MB takes tens of seconds "
                    "under emulation, and the test needs ~10 of them (covered by native runs)";
  }
  // About 75 MB of FFN weights (plus attention and embeddings the converter skips): long enough
  // (~50-150 ms natively) that kills land inside reading, writing, syncing and verifying.
  converter::ExampleOptions example;
  example.arch = "llama";
  example.layers = 8;
  example.hidden_size = 512;
  example.intermediate_size = 1536;
  example.vocab_size = 64;
  example.shards = 2;
  const std::string ckpt = root_ + "/ckpt", out = root_ + "/out", full_dir = root_ + "/full";
  ASSERT_OK(converter::MakeExampleCheckpoint(ckpt, example));
  std::filesystem::create_directories(out);
  std::filesystem::create_directories(full_dir);
  const std::string dest = out + "/model.fflite";

  // The good file already at the destination: a different (smaller) model from the same source.
  ASSERT_GT(RunConvert({ckpt, dest, "--layers=0", "--dtype=bf16"}), 0.0);
  const std::string good = ReadAll(dest);
  ASSERT_FALSE(good.empty());

  // What a whole run writes, and how long it takes (the faster of two runs: the first one reads
  // the checkpoint cold).
  const std::string full_path = full_dir + "/model.fflite";
  const double t1 = RunConvert({ckpt, full_path});
  const double t2 = RunConvert({ckpt, full_path});
  ASSERT_GT(t1, 0.0);
  ASSERT_GT(t2, 0.0);
  const double duration = std::min(t1, t2);
  const std::string full = ReadAll(full_path);
  ASSERT_NE(full, good);
  std::filesystem::remove_all(full_dir);

  // 10 kills spread over the run: the i-th at a fixed-seed point in [i/10, (i+1)/10) of it. A
  // run that beats its kill (timing on a loaded machine varies) replaces the file, which must then
  // hold the whole model; the estimate shrinks and the point is tried again, 20 runs at most.
  std::mt19937 rng(20240607);
  std::uniform_real_distribution<double> within(0.05, 0.95);
  int killed = 0, runs = 0, replaced_before_kill = 0;
  double estimate = duration;
  std::string expected = good;
  while (killed < 10 && runs < 20) {
    ++runs;
    const double at = estimate * (killed + within(rng)) / 10.0;
    const pid_t pid = StartConvert({ckpt, dest});
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::duration<double>(at));
    ::kill(pid, SIGKILL);
    const int status = Wait(pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++killed;
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
      expected = full;
      estimate *= 0.8;
    }
    EXPECT_THAT(testing::ListDir(out), ::testing::ElementsAre("model.fflite"))
        << "after a kill at " << at * 1e3 << " ms of " << duration * 1e3 << " ms";
    // The file before the run, or (a kill that landed between the rename and the exit) the
    // whole new model: never anything in between.
    const std::string now = ReadAll(dest);
    if (now != expected && now == full) {
      ++replaced_before_kill;
      expected = full;
    }
    EXPECT_TRUE(now == expected)
        << "the destination is neither the previous file nor the whole new model after a kill at "
        << at * 1e3 << " ms of " << duration * 1e3 << " ms";
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GE(killed, 5) << "only " << killed << " of " << runs << " kills landed inside a run ("
                       << duration * 1e3 << " ms)";

  // An uninterrupted run then replaces the file with the whole model, and nothing else is left.
  ASSERT_GT(RunConvert({ckpt, dest}), 0.0);
  EXPECT_THAT(testing::ListDir(out), ::testing::ElementsAre("model.fflite"));
  EXPECT_TRUE(ReadAll(dest) == full) << "the completed run did not write the whole model";
  EXPECT_OK(Model::LoadFile(dest).status());
  std::printf("conversion %.0f ms; %d of %d kills landed inside a run (%d after its rename)\n",
              duration * 1e3, killed, runs, replaced_before_kill);
}

}  // namespace
}  // namespace fflite
