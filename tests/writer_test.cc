// The writer: atomic file replacement (a failed write leaves the old file and no temporary),
// spec errors naming the tensor, dtype conversion, expert records (alignment, contiguity),
// progress reports.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
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
  // With expert_alignment too, the larger of the two (page_align_experts: the data alignment).
  options.data_alignment = 64;
  options.expert_alignment = 4096;
  ASSERT_OK_AND_ASSIGN(built, testing::BuildModel(spec, options));
  for (const FfnView& e : built.model->layers()[0].moe.experts) {
    EXPECT_EQ(built.model->FileOffset(e.up) % 4096, 0u);
  }
  options.page_align_experts = false;
  options.data_alignment = 8192;
  options.expert_alignment = 256;
  ASSERT_OK_AND_ASSIGN(built, testing::BuildModel(spec, options));
  const auto& experts = built.model->layers()[0].moe.experts;
  EXPECT_EQ(experts[0].up.offset % 256, 0u);
  EXPECT_LT(experts[1].up.offset - experts[0].up.offset, 8192u) << "256, not the data alignment";
}

// An MoE layer with biases and a shared expert: every tensor kind an expert record holds.
ModelSpec MoeSpec(uint32_t seed) {
  ModelSpec spec;
  spec.d_model = 8;
  testing::Rng rng(seed);
  testing::MoeParams mp;
  mp.expert.d_model = 8;
  mp.expert.d_ff = 10;
  mp.expert.bias = true;
  mp.num_experts = 5;
  mp.num_shared = 1;
  mp.shared_d_ff = 12;
  mp.shared_gate = true;
  for (int i = 0; i < 2; ++i) {
    LayerSpec l;
    l.kind = LayerKind::kMoe;
    l.moe = testing::RandomMoe(mp, rng);
    l.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, 8, rng);
    spec.layers.push_back(std::move(l));
  }
  return spec;
}

// An expert's tensors in file order: up, gate, down, then its biases.
std::vector<const TensorView*> RecordTensors(const FfnView& f) {
  std::vector<const TensorView*> out;
  for (const TensorView* t : {&f.up, &f.gate, &f.down, &f.up_bias, &f.gate_bias, &f.down_bias}) {
    if (t->present()) out.push_back(t);
  }
  return out;
}

// Each routed and shared expert is one record: its first tensor at a multiple of the alignment
// in the file (whatever data_alignment is), the others each at the next 64-byte boundary after
// the last; the bytes are those of the unaligned file.
TEST_F(WriterTest, AlignsExpertRecords) {
  const ModelSpec spec = MoeSpec(9);
  ASSERT_OK_AND_ASSIGN(auto packed, testing::BuildModel(spec, WriteOptions()));
  for (uint64_t alignment : {uint64_t{256}, uint64_t{4096}, uint64_t{65536}}) {
    for (uint64_t data_alignment : {uint64_t{64}, kDataAlignment}) {
      SCOPED_TRACE(::testing::Message() << "expert_alignment " << alignment << ", data_alignment "
                                        << data_alignment);
      WriteOptions options;
      options.expert_alignment = alignment;
      options.data_alignment = data_alignment;
      ASSERT_OK_AND_ASSIGN(auto built, testing::BuildModel(spec, options));
      const Model& m = *built.model;
      for (size_t l = 0; l < m.layers().size(); ++l) {
        const MoeView& moe = m.layers()[l].moe;
        const MoeView& want = packed.model->layers()[l].moe;
        std::vector<std::pair<const FfnView*, const FfnView*>> experts;
        for (size_t e = 0; e < moe.experts.size(); ++e) {
          experts.emplace_back(&moe.experts[e], &want.experts[e]);
        }
        experts.emplace_back(&moe.shared_experts[0], &want.shared_experts[0]);
        for (const auto& [f, g] : experts) {
          const std::vector<const TensorView*> got = RecordTensors(*f), ref = RecordTensors(*g);
          ASSERT_EQ(got.size(), 6u);
          ASSERT_EQ(ref.size(), got.size());
          EXPECT_EQ(m.FileOffset(*got[0]) % alignment, 0u);
          for (size_t i = 0; i < got.size(); ++i) {
            if (i > 0) {
              const uint64_t end = got[i - 1]->offset + got[i - 1]->size;
              EXPECT_EQ(got[i]->offset, (end + kTensorAlignment - 1) / kTensorAlignment *
                                            kTensorAlignment) << "tensor " << i;
            }
            ASSERT_EQ(got[i]->size, ref[i]->size);
            EXPECT_EQ(std::memcmp(got[i]->data, ref[i]->data, got[i]->size), 0) << "tensor " << i;
          }
        }
        // Consecutive experts one stride apart: the smallest multiple that holds a record.
        const TensorView& last = *RecordTensors(moe.experts[0]).back();
        const uint64_t record = last.offset + last.size - moe.experts[0].up.offset;
        EXPECT_EQ(moe.experts[1].up.offset - moe.experts[0].up.offset,
                  (record + alignment - 1) / alignment * alignment);
      }
    }
  }
}

// 0 and 64 add no padding (the layout of files written before expert_alignment), and a model
// without MoE layers is unchanged byte for byte whatever the alignment.
TEST_F(WriterTest, ExpertAlignmentNoneAndDenseModelsAddNoPadding) {
  ASSERT_OK_AND_ASSIGN(auto packed, WriteModelBuffer(MoeSpec(10), WriteOptions()));
  for (uint64_t none : {uint64_t{0}, kTensorAlignment}) {
    WriteOptions options;
    options.expert_alignment = none;
    ASSERT_OK_AND_ASSIGN(auto bytes, WriteModelBuffer(MoeSpec(10), options));
    EXPECT_EQ(bytes, packed) << "expert_alignment " << none;
  }
  ASSERT_OK_AND_ASSIGN(auto loaded, testing::BuildModel(MoeSpec(10), WriteOptions()));
  const MoeView& moe = loaded.model->layers()[0].moe;
  const TensorView& last = *RecordTensors(moe.experts[0]).back();
  EXPECT_EQ(moe.experts[1].up.offset, (last.offset + last.size + 63) / 64 * 64);
  ASSERT_OK_AND_ASSIGN(auto dense, WriteModelBuffer(Spec(11), WriteOptions()));
  for (uint64_t alignment : {uint64_t{4096}, uint64_t{1} << 20}) {
    WriteOptions options;
    options.expert_alignment = alignment;
    ASSERT_OK_AND_ASSIGN(auto bytes, WriteModelBuffer(Spec(11), options));
    EXPECT_EQ(bytes, dense) << "expert_alignment " << alignment;
  }
}

TEST_F(WriterTest, RefusesBadExpertAlignments) {
  for (uint64_t bad : {uint64_t{1}, uint64_t{32}, uint64_t{100}, uint64_t{4095},
                       uint64_t{3} << 12, kMaxExpertAlignment * 2}) {
    WriteOptions options;
    options.expert_alignment = bad;
    EXPECT_THAT(WriteModelFile(MoeSpec(12), options, dir_ + "/m.fflite"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("expert_alignment: " + std::to_string(bad) +
                                   " must be 0 (none) or a power of two in [64, 1073741824]")));
    EXPECT_THAT(CheckExpertAlignment(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expert_alignment")));
  }
  EXPECT_TRUE(Files().empty());
  for (uint64_t good : {uint64_t{0}, uint64_t{64}, uint64_t{4096}, kMaxExpertAlignment}) {
    EXPECT_OK(CheckExpertAlignment(good));
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
