// The writer: atomic file replacement (a failed write leaves the old file and no temporary),
// spec errors naming the tensor, dtype conversion, expert page alignment, progress reports.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "base/half.h"
#include "format/model.h"
#include "format/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/model_builder.h"
#include "testing/status_matchers.h"

namespace fflite {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

class WriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fflite_writer_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : Files()) std::remove((dir_ + "/" + f).c_str());
    rmdir(dir_.c_str());
  }
  std::set<std::string> Files() const {
    std::set<std::string> names;
    DIR* d = opendir(dir_.c_str());
    if (d == nullptr) return names;
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.insert(n);
    }
    closedir(d);
    return names;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static ModelSpec Spec(uint32_t seed) {
    testing::Rng rng(seed);
    ModelSpec spec;
    spec.d_model = 8;
    LayerSpec l;
    testing::FfnParams fp;
    fp.d_model = 8;
    fp.d_ff = 10;
    l.ffn = testing::RandomFfn(fp, rng);
    spec.layers.push_back(std::move(l));
    spec.metadata = {{"source.architecture", "test"}};
    return spec;
  }
  std::string dir_;
};

TEST_F(WriterTest, WritesALoadableFile) {
  const std::string path = dir_ + "/m.fflite";
  ASSERT_OK(WriteModelFile(Spec(1), WriteOptions(), path));
  EXPECT_EQ(Files(), std::set<std::string>{"m.fflite"});
  auto model = Model::LoadFile(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->metadata()[0].second, "test");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~[] { mode_t m = umask(0); umask(m); return m; }());
}

TEST_F(WriterTest, FailedWriteLeavesExistingFileAndNoTemporary) {
  const std::string path = dir_ + "/m.fflite";
  ASSERT_OK(WriteModelFile(Spec(1), WriteOptions(), path));
  const std::string good = Read(path);
  // A tensor whose producer fails halfway through the data section.
  ModelSpec bad = Spec(2);
  bad.layers[0].ffn.down.fill = [](uint8_t*, uint64_t) {
    return absl::DataLossError("checkpoint.safetensors: tensor 'w2' is truncated");
  };
  EXPECT_THAT(WriteModelFile(bad, WriteOptions(), path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("tensor 'w2' is truncated")));
  EXPECT_EQ(Read(path), good);
  EXPECT_EQ(Files(), std::set<std::string>{"m.fflite"});
}

// A writer killed between linking its temporary file and the rename leaves
// "<path>.tmp-<pid>-<n>"; the next write of that path removes it once its process is gone.
TEST_F(WriterTest, RemovesTemporariesOfDeadWriters) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);  // `child` is now a pid with no process
  const std::string stale = dir_ + "/m.fflite.tmp-" + std::to_string(child) + "-0";
  const std::string live = dir_ + "/m.fflite.tmp-" + std::to_string(getppid()) + "-0";
  const std::string other = dir_ + "/other.fflite.tmp-" + std::to_string(child) + "-0";
  for (const std::string& f : {stale, live, other}) std::ofstream(f) << "partial";
  ASSERT_OK(WriteModelFile(Spec(1), WriteOptions(), dir_ + "/m.fflite"));
  const std::set<std::string> expected = {"m.fflite", "m.fflite.tmp-" + std::to_string(getppid()) + "-0",
                                          "other.fflite.tmp-" + std::to_string(child) + "-0"};
  EXPECT_EQ(Files(), expected);
}

TEST_F(WriterTest, InvalidSpecLeavesNothing) {
  ModelSpec bad = Spec(3);
  bad.layers[0].ffn.up = TensorFromF32({10, 7}, std::vector<float>(70));
  EXPECT_THAT(WriteModelFile(bad, WriteOptions(), dir_ + "/m.fflite"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers[0].ffn.up: shape [10, 7] does not match the expected "
                                 "[10, 8]")));
  // A spec the loader refuses (top_k above the expert count) is refused before the rename.
  ModelSpec moe;
  moe.d_model = 8;
  testing::Rng rng(4);
  testing::MoeParams mp;
  mp.expert.d_model = 8;
  mp.num_experts = 2;
  mp.top_k = 3;
  LayerSpec l;
  l.kind = LayerKind::kMoe;
  l.moe = testing::RandomMoe(mp, rng);
  moe.layers.push_back(std::move(l));
  EXPECT_THAT(WriteModelFile(moe, WriteOptions(), dir_ + "/m.fflite"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers[0].moe.top_k: 3 must be in [1, num_experts = 2]")));
  EXPECT_TRUE(Files().empty());
}

TEST_F(WriterTest, MissingDirectoryIsAnError) {
  EXPECT_THAT(WriteModelFile(Spec(1), WriteOptions(), dir_ + "/no/such/dir/m.fflite"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no/such/dir")));
}

TEST_F(WriterTest, ConvertsDtypesWithRoundToNearestEven) {
  // 1 + 2^-11 rounds to 1 in f16; 1 + 3·2^-11 rounds up to 1 + 2^-9.
  ModelSpec spec = Spec(5);
  std::vector<float> up(10 * 8, 0.0f);
  up[0] = 1.0f + std::ldexp(1.0f, -11);
  up[1] = 1.0f + 3.0f * std::ldexp(1.0f, -11);
  up[2] = 65504.0f;
  spec.layers[0].ffn.up = TensorFromF32({10, 8}, up);
  WriteOptions options;
  options.dtype = DType::F16;
  ASSERT_OK_AND_ASSIGN(auto built, testing::BuildModel(spec, options));
  const TensorView& t = built.model->layers()[0].ffn.up;
  ASSERT_EQ(t.dtype, DType::F16);
  uint16_t h[3];
  std::memcpy(h, t.data, sizeof(h));
  EXPECT_EQ(h[0], 0x3c00);
  EXPECT_EQ(h[1], 0x3c02);
  EXPECT_EQ(h[2], 0x7bff);
}

TEST_F(WriterTest, PadsDffWithZeros) {
  ModelSpec spec = Spec(6);
  ASSERT_OK_AND_ASSIGN(auto built, testing::BuildModel(spec, WriteOptions()));
  const FfnView& f = built.model->layers()[0].ffn;
  ASSERT_EQ(f.d_ff_padded, 64u);
  const float* up = reinterpret_cast<const float*>(f.up.data);      // [64, 8]
  const float* down = reinterpret_cast<const float*>(f.down.data);  // [8, 64]
  for (int r = 10; r < 64; ++r) {
    for (int c = 0; c < 8; ++c) EXPECT_EQ(up[r * 8 + c], 0.0f);
  }
  for (int r = 0; r < 8; ++r) {
    for (int c = 10; c < 64; ++c) EXPECT_EQ(down[r * 64 + c], 0.0f);
    EXPECT_NE(down[r * 64 + 9], 0.0f);
  }
}

TEST_F(WriterTest, PageAlignsExpertsOnRequest) {
  ModelSpec spec;
  spec.d_model = 8;
  testing::Rng rng(7);
  testing::MoeParams mp;
  mp.expert.d_model = 8;
  mp.num_experts = 3;
  LayerSpec l;
  l.kind = LayerKind::kMoe;
  l.moe = testing::RandomMoe(mp, rng);
  spec.layers.push_back(std::move(l));
  WriteOptions options;
  options.page_align_experts = true;
  ASSERT_OK_AND_ASSIGN(auto built, testing::BuildModel(spec, options));
  for (const FfnView& e : built.model->layers()[0].moe.experts) {
    EXPECT_EQ(e.up.offset % kDataAlignment, 0u);
  }
}

TEST_F(WriterTest, ReportsProgress) {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  WriteOptions options;
  options.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  ASSERT_OK(WriteModelFile(Spec(8), options, dir_ + "/m.fflite"));
  ASSERT_EQ(calls.size(), 3u);  // up, gate, down
  EXPECT_LT(calls[0].first, calls[1].first);
  EXPECT_LE(calls.back().first, calls.back().second);
}

}  // namespace
}  // namespace fflite
