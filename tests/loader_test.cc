// Loader rejections, each asserting its specific message: truncation at many points, wrong
// identifier, newer version, offsets past the end, overlapping or misaligned tensors, shape and
// size mismatches, bad enums, zero dimensions, bad MoE parameters, experts of different shapes;
// plus single-byte corruption of the metadata, which must never crash. Quantised scales are
// checked on first use (Model::CheckScales), not at load: a bad one fails the runs that read it,
// and loading a file reads only its metadata.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "fflite/fflite.h"
#include "flatbuffers/flatbuffers.h"
#include "format/model.h"
#include "format/quant_layout.h"
#include "format/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "session/session.h"
#include "testing/model_builder.h"
#include "testing/testers.h"
#include "testing/status_matchers.h"

namespace fflite {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;
constexpr auto kDataLoss = absl::StatusCode::kDataLoss;

// Layer 0: gated dense FFN with biases and a pre RMSNorm. Layer 1: MoE, 4 experts in 2 groups,
// top-2, correction bias, one shared expert with its gate, post LayerNorm.
ModelSpec BaseSpec() {
  testing::Rng rng(42);
  ModelSpec spec;
  spec.d_model = 8;
  testing::FfnParams fp;
  fp.d_model = 8;
  fp.d_ff = 12;
  fp.bias = true;
  LayerSpec dense;
  dense.name = "dense";
  dense.ffn = testing::RandomFfn(fp, rng);
  dense.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::PRE, 8, rng);
  dense.residual = true;
  spec.layers.push_back(std::move(dense));
  testing::MoeParams mp;
  mp.expert = fp;
  mp.expert.bias = false;
  mp.num_experts = 4;
  mp.top_k = 2;
  mp.n_group = 2;
  mp.topk_group = 1;
  mp.score_correction_bias = true;
  mp.num_shared = 1;
  mp.shared_gate = true;
  LayerSpec moe;
  moe.name = "moe";
  moe.kind = LayerKind::kMoe;
  moe.moe = testing::RandomMoe(mp, rng);
  moe.norm = testing::RandomNorm(NormKind::LAYER_NORM, NormPlacement::POST, 8, rng);
  spec.layers.push_back(std::move(moe));
  return spec;
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto bytes = WriteModelBuffer(BaseSpec(), WriteOptions());
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    bytes_ = std::move(*bytes);
  }
  schema::Model* Root() { return schema::GetMutableSizePrefixedModel(bytes_.data()); }
  schema::Layer* Layer(int i) { return Root()->mutable_layers()->GetMutableObject(i); }
  schema::Ffn* DenseFfn() { return static_cast<schema::Ffn*>(Layer(0)->mutable_body()); }
  schema::Moe* Moe() { return static_cast<schema::Moe*>(Layer(1)->mutable_body()); }
  schema::Ffn* Expert(int i) { return Moe()->mutable_experts()->GetMutableObject(i); }
  absl::Status Load() { return Model::LoadBuffer(bytes_.data(), bytes_.size()).status(); }

  std::vector<uint8_t> bytes_;
};

TEST_F(LoaderTest, ValidModelLoads) {
  auto model = Model::LoadBuffer(bytes_.data(), bytes_.size());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  EXPECT_EQ(m.d_model(), 8u);
  ASSERT_EQ(m.layers().size(), 2u);
  EXPECT_EQ(m.layers()[0].name, "dense");
  EXPECT_EQ(m.layers()[0].ffn.d_ff, 12u);
  EXPECT_EQ(m.layers()[0].ffn.d_ff_padded, 64u);
  EXPECT_EQ(m.layers()[1].moe.experts.size(), 4u);
  EXPECT_EQ(m.version_major(), kFormatVersionMajor);
  // Layout promises of the format.
  const uint64_t data_offset = Root()->data_offset();
  EXPECT_EQ(data_offset % kDataAlignment, 0u);
  for (const FfnView* f : {&m.layers()[0].ffn, &m.layers()[1].moe.experts[3]}) {
    EXPECT_EQ(f->up.offset % kTensorAlignment, 0u);
    EXPECT_EQ(f->down.offset % kTensorAlignment, 0u);
  }
}

TEST_F(LoaderTest, TruncatedAtManyPoints) {
  const uint32_t fb_size = flatbuffers::ReadScalar<uint32_t>(bytes_.data());
  const size_t data_offset = static_cast<size_t>(Root()->data_offset());  // small test file
  const std::vector<size_t> cuts = {0, 1, 4, 8, 11, 12, 13, 40, fb_size / 2, fb_size, fb_size + 3,
                                    data_offset, data_offset + 1, bytes_.size() / 2 + 7,
                                    bytes_.size() - 64, bytes_.size() - 1};
  for (size_t cut : cuts) {
    ASSERT_LT(cut, bytes_.size());
    // A copy of exactly `cut` bytes, so ASan sees any read past the end.
    std::vector<uint8_t> prefix(bytes_.begin(), bytes_.begin() + cut);
    const absl::Status st =
        Model::LoadBuffer(cut == 0 ? bytes_.data() : prefix.data(), cut).status();
    EXPECT_EQ(st.code(), kDataLoss) << "cut at " << cut << ": " << st;
    if (cut < 12) {
      EXPECT_THAT(st, StatusIs(kDataLoss, HasSubstr("too small for an fflite header")));
    } else if (cut < fb_size + 4u) {
      EXPECT_THAT(st, StatusIs(kDataLoss, HasSubstr("metadata: size")));
    } else {
      EXPECT_THAT(st, StatusIs(kDataLoss, HasSubstr("exceeds file of")));
    }
  }
}

TEST_F(LoaderTest, WrongIdentifier) {
  std::memcpy(bytes_.data() + 8, "GGUF", 4);
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("not an fflite file: identifier 'GGUF'")));
}

TEST_F(LoaderTest, GgufFileIsNamedWithTheConverterCommand) {
  std::memcpy(bytes_.data(), "GGUF", 4);
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("GGUF file (llama.cpp's format): convert it "
                                                    "first with `fflite-convert")));
}

TEST_F(LoaderTest, NewerMajorVersionIsRefusedWithBothVersions) {
  ASSERT_TRUE(Root()->mutate_version_major(kFormatVersionMajor + 1));
  ASSERT_TRUE(Root()->mutate_version_minor(3));
  EXPECT_THAT(Load(), StatusIs(absl::StatusCode::kUnimplemented,
                               HasSubstr(absl::StrFormat("file format version 2.3 is newer "
                                                         "than this fflite reads (1.%d)",
                                                         kFormatVersionMinor))));
}

TEST_F(LoaderTest, NewerMinorVersionIsAccepted) {
  ASSERT_TRUE(Root()->mutate_version_minor(kFormatVersionMinor + 5));
  EXPECT_THAT(Load(), testing::IsOk());
}

TEST_F(LoaderTest, VersionZeroIsRefused) {
  ASSERT_TRUE(Root()->mutate_version_major(0));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("version_major: 0")));
}

TEST_F(LoaderTest, BigEndianHostIsRefused) {
  EXPECT_THAT(CheckHostByteOrder(false),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("big-endian")));
  EXPECT_THAT(CheckHostByteOrder(true), testing::IsOk());
}

TEST_F(LoaderTest, TensorOffsetPastTheEnd) {
  const uint64_t data_size = Root()->data_size();
  ASSERT_TRUE(DenseFfn()->mutable_up()->mutate_offset(data_size));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up: offset")));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("exceeds data section of")));
}

TEST_F(LoaderTest, TensorOffsetOverflowIsCaught) {
  ASSERT_TRUE(Expert(2)->mutable_down()->mutate_offset(~uint64_t{0} - 63));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.experts[2].down: offset")));
}

TEST_F(LoaderTest, OverlappingTensors) {
  const uint64_t up = DenseFfn()->up()->offset();
  ASSERT_TRUE(DenseFfn()->mutable_gate()->mutate_offset(up));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("overlap")));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up")));
}

TEST_F(LoaderTest, MisalignedTensor) {
  const uint64_t off = Expert(1)->up()->offset();
  ASSERT_TRUE(Expert(1)->mutable_up()->mutate_offset(off + 4));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.experts[1].up: offset")));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("is not a multiple of 64")));
}

TEST_F(LoaderTest, MisalignedDataSection) {
  ASSERT_TRUE(Root()->mutate_data_offset(Root()->data_offset() - 32));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("data_offset: 65504 must be a multiple of 64")));
}

TEST_F(LoaderTest, DataSectionInsideTheMetadata) {
  ASSERT_TRUE(Root()->mutate_data_offset(64));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("at or after the metadata's end")));
}

// Readers accept a compact file whose data section starts on any 64-byte boundary.
TEST(LoaderCompactTest, CompactDataAlignmentLoads) {
  WriteOptions options;
  options.data_alignment = 64;
  ASSERT_OK_AND_ASSIGN(auto built, testing::BuildModel(BaseSpec(), options));
  EXPECT_LT(built.bytes.size(), kDataAlignment);
  options.data_alignment = 96;
  EXPECT_THAT(WriteModelBuffer(BaseSpec(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data_alignment: 96")));
}

TEST_F(LoaderTest, SizeMismatch) {
  const uint64_t size = DenseFfn()->down()->size();
  ASSERT_TRUE(DenseFfn()->mutable_down()->mutate_size(size - 4));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.down: size")));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("does not match shape [8, 64]")));
}

TEST_F(LoaderTest, ShapeMismatch) {
  DenseFfn()->mutable_up()->mutable_shape()->Mutate(0, 63);
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up: shape [63, 8] does not "
                                                    "match the expected [64, 8]")));
}

TEST_F(LoaderTest, NormShapeMismatch) {
  Layer(1)->mutable_norm()->mutable_weight()->mutable_shape()->Mutate(0, 7);
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].norm.weight: shape [7]")));
}

TEST_F(LoaderTest, BadDtype) {
  ASSERT_TRUE(DenseFfn()->mutable_up_bias()->mutate_dtype(static_cast<schema::DType>(16)));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up_bias: dtype 16 is not a "
                                                    "known dtype")));
}

TEST_F(LoaderTest, BadActivation) {
  ASSERT_TRUE(DenseFfn()->mutate_activation(static_cast<schema::Activation>(17)));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.activation: value 17")));
  ASSERT_TRUE(DenseFfn()->mutate_activation(schema::Activation::INVALID));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.activation: value 0")));
}

TEST_F(LoaderTest, BadNormEnums) {
  ASSERT_TRUE(Layer(0)->mutable_norm()->mutate_kind(schema::NormKind::INVALID));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].norm.kind: value 0")));
  SetUp();
  ASSERT_TRUE(Layer(0)->mutable_norm()->mutate_placement(static_cast<schema::NormPlacement>(4)));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].norm.placement: value 4 is not a "
                                                    "known placement")));
  SetUp();
  ASSERT_TRUE(Layer(0)->mutable_norm()->mutate_placement(schema::NormPlacement::SANDWICH));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].output_norm: missing (the norm's "
                                                    "placement is sandwich)")));
  SetUp();
  ASSERT_TRUE(Layer(0)->mutable_norm()->mutate_eps(-1.0f));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].norm.eps")));
}

// A sandwich layer (format 1.5) needs its norm and its output norm, both SANDWICH.
TEST(LoaderSandwichTest, BothNormsOrNeither) {
  testing::Rng rng(43);
  ModelSpec spec;
  spec.d_model = 8;
  testing::FfnParams fp;
  fp.d_model = 8;
  fp.d_ff = 12;
  LayerSpec l;
  l.name = "sandwich";
  l.ffn = testing::RandomFfn(fp, rng);
  l.norm = testing::RandomNorm(NormKind::RMS_NORM, NormPlacement::SANDWICH, 8, rng);
  l.output_norm = testing::RandomNorm(NormKind::LAYER_NORM, NormPlacement::SANDWICH, 8, rng);
  l.residual = true;
  spec.layers.push_back(l);
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> bytes, WriteModelBuffer(spec, WriteOptions()));
  auto load = [&] { return Model::LoadBuffer(bytes.data(), bytes.size()).status(); };
  ASSERT_OK(load());
  schema::Layer* layer =
      schema::GetMutableSizePrefixedModel(bytes.data())->mutable_layers()->GetMutableObject(0);
  ASSERT_TRUE(layer->mutable_output_norm()->mutate_placement(schema::NormPlacement::PRE));
  EXPECT_THAT(load(), StatusIs(kDataLoss, HasSubstr("layers[0].output_norm.placement: value 1, "
                                                    "must be sandwich (3)")));
  ASSERT_TRUE(layer->mutable_output_norm()->mutate_placement(schema::NormPlacement::SANDWICH));
  ASSERT_TRUE(layer->mutable_norm()->mutate_placement(schema::NormPlacement::PRE));
  EXPECT_THAT(load(), StatusIs(kDataLoss, HasSubstr("layers[0].output_norm: present, but the "
                                                    "layer's norm is not a sandwich")));
  ASSERT_TRUE(layer->mutable_norm()->mutate_placement(schema::NormPlacement::SANDWICH));
  layer->mutable_output_norm()->mutable_weight()->mutable_shape()->Mutate(0, 7);
  EXPECT_THAT(load(), StatusIs(kDataLoss, HasSubstr("layers[0].output_norm.weight: shape [7]")));
  // The writer refuses a spec with one of the two.
  spec.layers[0].output_norm.reset();
  EXPECT_THAT(WriteModelBuffer(spec, WriteOptions()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output_norm: missing")));
}

TEST_F(LoaderTest, BadScoringEnum) {
  ASSERT_TRUE(Moe()->mutate_scoring(static_cast<schema::Scoring>(5)));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.scoring: value 5")));
}

TEST_F(LoaderTest, UnknownBodyType) {
  auto* table = reinterpret_cast<flatbuffers::Table*>(Layer(0));
  ASSERT_TRUE(table->SetField<uint8_t>(schema::Layer::VT_BODY_TYPE, 7, 0));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].body: missing or unknown body "
                                                    "type 7")));
}

TEST_F(LoaderTest, ZeroDimensions) {
  ASSERT_TRUE(Root()->mutate_d_model(0));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("d_model: 0 must be in [1, 1048576]")));
  SetUp();
  ASSERT_TRUE(DenseFfn()->mutate_d_ff(0));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.d_ff: must be at least 1")));
  SetUp();
  ASSERT_TRUE(DenseFfn()->mutate_d_ff_padded(11));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.d_ff_padded: 11 must be in "
                                                    "[d_ff = 12")));
}

TEST_F(LoaderTest, LayerDModelDiffersFromModel) {
  ASSERT_TRUE(DenseFfn()->mutate_d_model(9));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.d_model: 9 differs")));
}

TEST_F(LoaderTest, TopKOutOfRange) {
  ASSERT_TRUE(Moe()->mutate_top_k(0));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.top_k: 0 must be in [1, "
                                                    "num_experts = 4]")));
  ASSERT_TRUE(Moe()->mutate_top_k(5));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.top_k: 5 must be in")));
  // Within the expert count but above what the kept groups hold (1 group of 2).
  ASSERT_TRUE(Moe()->mutate_top_k(3));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.top_k: 3 exceeds the 2 "
                                                    "experts in topk_group")));
}

TEST_F(LoaderTest, BadGroups) {
  ASSERT_TRUE(Moe()->mutate_n_group(3));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.n_group: 3 must divide "
                                                    "num_experts = 4")));
  SetUp();
  ASSERT_TRUE(Moe()->mutate_topk_group(3));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.topk_group: 3")));
  SetUp();
  ASSERT_TRUE(Moe()->mutate_group_scoring(static_cast<schema::GroupScoring>(0)));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.group_scoring: value 0")));
}

TEST_F(LoaderTest, NumExpertsDisagreesWithExperts) {
  ASSERT_TRUE(Moe()->mutate_num_experts(0));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.num_experts: 0")));
  SetUp();
  ASSERT_TRUE(Moe()->mutate_num_experts(6));
  // The router's shape is checked against num_experts first.
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.router: shape [4, 8]")));
}

TEST_F(LoaderTest, BadRoutedScalingFactor) {
  ASSERT_TRUE(Moe()->mutate_routed_scaling_factor(0.0f));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("routed_scaling_factor: 0")));
}

TEST_F(LoaderTest, ExpertsOfDifferentShapes) {
  ASSERT_TRUE(Expert(3)->mutate_d_ff(10));  // d_ff_padded (64) stays: tensors still match
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.experts[3]: shape differs "
                                                    "from experts[0] (d_ff 10 vs 12)")));
  SetUp();
  ASSERT_TRUE(Expert(1)->mutate_activation(schema::Activation::RELU));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.experts[1]: shape differs "
                                                    "from experts[0] (activation relu vs silu)")));
}

TEST_F(LoaderTest, GatedFlagWithoutGateTensor) {
  ASSERT_TRUE(Moe()->mutable_shared_experts()->GetMutableObject(0)->mutate_gated(false));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.shared_experts[0].gate: "
                                                    "present but the FFN is not gated")));
}

TEST_F(LoaderTest, DataSectionPastTheFile) {
  ASSERT_TRUE(Root()->mutate_data_size(Root()->data_size() + 1));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("data section: offset")));
}

// Every single-byte corruption of the metadata is either accepted or refused with DataLoss or
// Unimplemented; none crashes (the sanitizer build checks for reads out of bounds).
TEST_F(LoaderTest, SingleByteCorruptionNeverCrashes) {
  const uint32_t fb_size = flatbuffers::ReadScalar<uint32_t>(bytes_.data());
  const std::vector<uint8_t> good = bytes_;
  int refused = 0;
  for (uint32_t i = 0; i < fb_size + 4; ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      bytes_ = good;
      bytes_[i] ^= flip;
      const absl::Status st = Load();
      if (!st.ok()) {
        ++refused;
        EXPECT_TRUE(st.code() == kDataLoss || st.code() == absl::StatusCode::kUnimplemented)
            << "byte " << i << ": " << st;
      }
    }
  }
  EXPECT_GT(refused, 100);
}

TEST(LoaderFileTest, MissingFile) {
  EXPECT_THAT(Model::LoadFile("/nonexistent/dir/model.fflite").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/dir/model.fflite")));
}

TEST(LoaderFileTest, DirectoryIsNotAModel) {
  EXPECT_THAT(Model::LoadFile("/").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
}

TEST(LoaderFileTest, ModelWithoutLayersIsRefusedByTheWriter) {
  ModelSpec spec;
  spec.d_model = 4;
  EXPECT_THAT(WriteModelBuffer(spec, WriteOptions()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no layers")));
}

}  // namespace
}  // namespace fflite

namespace fflite {
namespace {

TEST(LoaderBufferTest, MisalignedBufferIsRefused) {
  auto bytes = WriteModelBuffer(BaseSpec(), WriteOptions());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::vector<uint8_t> shifted(bytes->size() + 1);
  std::memcpy(shifted.data() + 1, bytes->data(), bytes->size());
  EXPECT_THAT(Model::LoadBuffer(shifted.data() + 1, bytes->size()).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                ::testing::HasSubstr("is not 8-byte aligned")));
}


// --- Quantised weights (format 1.1): layout, scales, which tensors may be quantised. ---

class QuantLoaderTest : public LoaderTest {
 protected:
  void SetUp() override {
    WriteOptions options;
    options.dtype = DType::F32;
    options.matrix_dtype = [](const std::string&, DType) { return DType::I4; };
    auto bytes = WriteModelBuffer(BaseSpec(), options);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    bytes_ = std::move(*bytes);
  }
  uint8_t* Data(const schema::Tensor* t) {
    return bytes_.data() + Root()->data_offset() + t->offset();
  }
};

TEST_F(QuantLoaderTest, QuantisedModelLoadsWithItsLayout) {
  auto model = Model::LoadBuffer(bytes_.data(), bytes_.size());
  ASSERT_TRUE(model.ok()) << model.status();
  const FfnView& f = (*model)->layers()[0].ffn;
  EXPECT_EQ(f.up.dtype, DType::I4);
  EXPECT_EQ(f.up.layout, Layout::PANEL16_K4);
  EXPECT_EQ(f.up_bias.dtype, DType::F32);
  EXPECT_EQ((*model)->layers()[1].moe.router.dtype, DType::F32);
  EXPECT_EQ((*model)->version_minor(), kFormatVersionMinor);
  // [64, 8]: 4 panels of (64 bytes of scales + one block of 256 bytes).
  EXPECT_EQ(f.up.size, 4u * (64 + 256));
}

// A quantised matrix's scales are checked on its first use, not at load (which reads no weight
// byte): a NaN or Inf scale loads, and then fails every run of its layer with DataLoss
// (FFLITE_STATUS_INVALID_MODEL) naming the matrix, row and block, on every backend that takes the
// model and on both of the xnnpack dense paths (one token: the float-activation kernels; many:
// the int8 ones); the session stays usable for the other layers, which give the bits of a clean
// model's session.
TEST_F(QuantLoaderTest, NanOrInfScaleFailsTheFirstRunOfItsLayerByPosition) {
  auto clean = Model::LoadBuffer(bytes_.data(), bytes_.size());
  ASSERT_TRUE(clean.ok()) << clean.status();
  // The scales of panel 0 come first: f16 [block][16 rows]; row 3 of block 0.
  uint8_t* scales = Data(DenseFfn()->up());
  for (const uint16_t bad : {uint16_t{0x7e00}, uint16_t{0x7c00}}) {  // NaN, +Inf
    SCOPED_TRACE(bad == 0x7e00 ? "NaN" : "Inf");
    std::memcpy(scales + 3 * 2, &bad, 2);
    auto model = Model::LoadBuffer(bytes_.data(), bytes_.size());
    ASSERT_TRUE(model.ok()) << model.status();
    constexpr size_t kTokens = 16;
    std::vector<float> x(kTokens * 8), y(kTokens * 8), want(kTokens * 8);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
    for (const char* backend : {"reference", "xnnpack"}) {
      SCOPED_TRACE(backend);
      SessionOptions options;
      options.backend = backend;
      options.max_tokens = kTokens;
      auto session = Session::Create(**model, options);
      ASSERT_TRUE(session.ok()) << session.status();
      for (const size_t n : {size_t{1}, kTokens, size_t{1}}) {  // not remembered: fails again
        EXPECT_THAT((*session)->Run(0, x.data(), n, y.data()),
                    StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up: the scale of row 3, block 0 "
                                                  "(columns [0, 32)) is not finite")))
            << n << " tokens";
      }
      auto good = Session::Create(**clean, options);
      ASSERT_TRUE(good.ok()) << good.status();
      ASSERT_TRUE((*good)->Run(1, x.data(), kTokens, want.data()).ok());
      ASSERT_TRUE((*session)->Run(1, x.data(), kTokens, y.data()).ok());
      EXPECT_EQ(y, want);
    }
  }
  // Through the C API: INVALID_MODEL, naming the matrix.
  fflite_model* c_model = nullptr;
  ASSERT_EQ(fflite_model_load_buffer(bytes_.data(), bytes_.size(), &c_model), FFLITE_STATUS_OK);
  fflite_session* c_session = nullptr;
  ASSERT_EQ(fflite_session_create(c_model, nullptr, &c_session), FFLITE_STATUS_OK);
  std::vector<float> x(8, 0.5f), y(8);
  EXPECT_EQ(fflite_session_run(c_session, 0, x.data(), 1, y.data()), FFLITE_STATUS_INVALID_MODEL);
  EXPECT_THAT(fflite_last_error_message(), HasSubstr("layers[0].ffn.up: the scale of row 3"));
  EXPECT_EQ(fflite_session_run(c_session, 1, x.data(), 1, y.data()), FFLITE_STATUS_OK);
  fflite_session_free(c_session);
  fflite_model_free(c_model);
}

// The shared experts are packed at xnnpack session creation, so a bad scale there fails the
// creation, naming it; the reference fails the MoE layer's runs. A routed expert's scale fails
// the runs that choose it.
TEST_F(QuantLoaderTest, NanScaleOfAnExpertFailsWhereItIsRead) {
  const uint16_t nan = 0x7e00;
  std::vector<float> x(8, 0.5f), y(8);
  SessionOptions options;
  options.max_tokens = 4;
  {
    auto shared = Moe()->mutable_shared_experts()->GetMutableObject(0);
    uint8_t* scales = Data(shared->down());
    const std::vector<uint8_t> saved(scales, scales + 2 * kQuantPanelRows);
    std::memcpy(scales + 5 * 2, &nan, 2);  // down: [8, 64], row 5 of block 0
    auto model = Model::LoadBuffer(bytes_.data(), bytes_.size());
    ASSERT_TRUE(model.ok()) << model.status();
    const char* message = "layers[1].moe.shared_experts[0].down: the scale of row 5, block 0";
    options.backend = "xnnpack";
    EXPECT_THAT(Session::Create(**model, options).status(),
                StatusIs(kDataLoss, HasSubstr(message)));
    options.backend = "reference";
    auto session = Session::Create(**model, options);
    ASSERT_TRUE(session.ok()) << session.status();
    EXPECT_THAT((*session)->Run(1, x.data(), 1, y.data()), StatusIs(kDataLoss, HasSubstr(message)));
    EXPECT_TRUE((*session)->Run(0, x.data(), 1, y.data()).ok());
    std::memcpy(scales, saved.data(), saved.size());
  }
  // Every routed expert's up gets a bad scale (row 7, block 0), so whichever the routing picks
  // fails: on the reference, on xnnpack (its expert store checks the bytes its kernels read: the
  // mapping, or with a budget on a file-backed model the expert's slot), twice in a row.
  for (int e = 0; e < 4; ++e) std::memcpy(Data(Expert(e)->up()) + 7 * 2, &nan, 2);
  const std::string path = ::testing::TempDir() + "/nan_expert_scale.fflite";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes_.data(), 1, bytes_.size(), f), bytes_.size());
    std::fclose(f);
  }
  auto from_file = Model::LoadFile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  auto model = Model::LoadBuffer(bytes_.data(), bytes_.size());
  ASSERT_TRUE(model.ok()) << model.status();
  for (const std::string backend : {"reference", "xnnpack"}) {
    for (const bool file : {false, true}) {
      for (const uint64_t budget : {uint64_t{0}, uint64_t{1}}) {
        if (backend == "reference" && (file || budget != 0)) continue;
        SCOPED_TRACE(backend + (file ? ", file-backed" : "") + (budget ? ", budget" : ""));
        options.backend = backend;
        options.expert_budget_bytes = budget;
        auto session = Session::Create(file ? **from_file : **model, options);
        ASSERT_TRUE(session.ok()) << session.status();
        for (int call = 0; call < 2; ++call) {
          const absl::Status st = (*session)->Run(1, x.data(), 1, y.data());
          EXPECT_THAT(st, StatusIs(kDataLoss, HasSubstr("layers[1].moe.experts[")));
          EXPECT_THAT(st, StatusIs(kDataLoss, HasSubstr("].up: the scale of row 7, block 0 "
                                                        "(columns [0, 32)) is not finite")));
        }
        EXPECT_TRUE((*session)->Run(0, x.data(), 1, y.data()).ok());
      }
    }
  }
}

// Model::CheckScales on its own: by the view's bytes or a copy's; a success is remembered (a bad
// copy then passes: its bytes were the model's when they were checked), a failure is not (the
// good bytes pass after it); float tensors pass at once.
TEST_F(QuantLoaderTest, CheckScalesRemembersSuccessOnly) {
  auto model = Model::LoadBuffer(bytes_.data(), bytes_.size());
  ASSERT_TRUE(model.ok()) << model.status();
  const FfnView& f = (*model)->layers()[0].ffn;
  EXPECT_TRUE((*model)->CheckScales(f.up_bias).ok());
  // down: [8, 64], 2 blocks per row; a panel's scales are f16 [block][16 rows].
  std::vector<uint8_t> copy(f.down.data, f.down.data + f.down.size);
  const uint16_t inf = 0xfc00;  // -Inf
  std::memcpy(copy.data() + (16 + 2) * 2, &inf, 2);  // block 1, row 2
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT((*model)->CheckScales(f.down, copy.data()),
                StatusIs(kDataLoss, HasSubstr("layers[0].ffn.down: the scale of row 2, block 1 "
                                              "(columns [32, 64)) is not finite")));
  }
  EXPECT_TRUE((*model)->CheckScales(f.down).ok());
  EXPECT_TRUE((*model)->CheckScales(f.down, copy.data()).ok());
  // A view made by hand (not the model's) is checked every time, unnamed.
  TensorView by_hand = f.up;
  by_hand.quant_id = kNoQuantId;
  std::vector<uint8_t> bad_up(f.up.data, f.up.data + f.up.size);
  std::memcpy(bad_up.data(), &inf, 2);
  by_hand.data = bad_up.data();
  EXPECT_TRUE((*model)->CheckScales(f.up).ok());
  EXPECT_THAT((*model)->CheckScales(by_hand),
              StatusIs(kDataLoss, HasSubstr("a quantised matrix: the scale of row 0, block 0")));
}

// Sessions on several threads check the same matrices at once (TSan: no race), and all get the
// same answer: OK for the good ones, DataLoss for the bad one, every time.
TEST_F(QuantLoaderTest, CheckScalesFromManyThreadsAtOnce) {
  const uint16_t nan = 0x7e00;
  std::memcpy(Data(Expert(2)->down()) + 9 * 2, &nan, 2);
  auto model = Model::LoadBuffer(bytes_.data(), bytes_.size());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  std::atomic<int> failures{0}, successes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m, &failures, &successes] {
      for (int i = 0; i < 50; ++i) {
        for (const FfnView& f : m.layers()[1].moe.experts) {
          const absl::Status st = m.CheckFfnScales(f);
          if (st.ok()) {
            ++successes;
          } else if (absl::IsDataLoss(st) &&
                     absl::StrContains(st.message(), "layers[1].moe.experts[2].down: the scale "
                                                     "of row 9, block 0")) {
            ++failures;
          }
        }
        if (m.CheckFfnScales(m.layers()[0].ffn).ok()) ++successes;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 4 * 50);
  EXPECT_EQ(successes.load(), 4 * 50 * 4);
  EXPECT_THAT(m.CheckAllScales(), StatusIs(kDataLoss, HasSubstr("experts[2].down")));
}

// Loading a file reads only its metadata: of the mapping, only the pages before the data section
// are resident after LoadFile (the old loader read every scale, which touched every page of the
// quantised matrices). Then the first run of the dense layer reads them.
TEST(QuantLoaderFileTest, LoadingReadsNoWeights) {
  // qemu-user does not show the guest's mappings in smaps (skipped before quantising: slow there).
  if (std::getenv("FFLITE_UNDER_QEMU") != nullptr) GTEST_SKIP() << "no smaps under qemu";
  testing::Rng rng(7);
  ModelSpec spec;
  spec.d_model = 512;
  testing::FfnParams fp;
  fp.d_model = 512;
  fp.d_ff = 1024;
  for (int l = 0; l < 2; ++l) {
    LayerSpec dense;
    dense.ffn = testing::RandomFfn(fp, rng);
    spec.layers.push_back(std::move(dense));
  }
  WriteOptions options;
  options.matrix_dtype = [](const std::string&, DType) { return DType::I4; };
  const std::string path = ::testing::TempDir() + "/loader_reads_no_weights.fflite";
  ASSERT_TRUE(WriteModelFile(spec, options, path).ok());
  auto model = Model::LoadFile(path);
  std::remove(path.c_str());
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const uint64_t metadata = m.file_size() - m.data_size();
  ASSERT_GE(m.data_size(), 1u << 20);  // 2 layers of 3 i4 matrices of 512K weights
  const int64_t rss = testing::MappingRssBytes(m.layers()[0].ffn.up.data);
  ASSERT_GE(rss, 0) << "the model's mapping is not in /proc/self/smaps";
  // Slack: one fault-around window (64 KiB, aligned: the data section starts on one) past the
  // metadata.
  EXPECT_LE(rss, static_cast<int64_t>(metadata) + 65536);
  SessionOptions so;
  so.backend = "xnnpack";
  so.max_tokens = 1;
  auto session = Session::Create(m, so);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> x(512, 0.25f), y(512);
  ASSERT_TRUE((*session)->Run(0, x.data(), 1, y.data()).ok());
  EXPECT_GE(testing::MappingRssBytes(m.layers()[0].ffn.up.data),
            static_cast<int64_t>(m.data_size() / 2 - 65536));
}

TEST_F(QuantLoaderTest, LayoutMustMatchTheDtype) {
  ASSERT_TRUE(DenseFfn()->mutable_down()->mutate_layout(Layout::ROW_MAJOR));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.down: layout 1 (row_major) is "
                                                    "not a layout of dtype i4")));
  ASSERT_TRUE(DenseFfn()->mutable_down()->mutate_layout(static_cast<Layout>(7)));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layout 7 (invalid)")));
  ASSERT_TRUE(DenseFfn()->mutable_down()->mutate_layout(Layout::PANEL16_K4));
  ASSERT_TRUE(DenseFfn()->mutable_up_bias()->mutate_layout(Layout::PANEL16_K4));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up_bias: layout 2")));
}

TEST_F(QuantLoaderTest, OnlyWeightMatricesMayBeQuantised) {
  ASSERT_TRUE(Moe()->mutable_router()->mutate_dtype(DType::I8));
  ASSERT_TRUE(Moe()->mutable_router()->mutate_layout(Layout::PANEL16_K4));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.router: dtype i8 is only "
                                                    "allowed for the up, gate and down matrices")));
}

TEST_F(QuantLoaderTest, SizeCountsBlocksAndPanels) {
  ASSERT_TRUE(DenseFfn()->mutable_up()->mutate_size(DenseFfn()->up()->size() - 64));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up: size 1216 bytes does not "
                                                    "match shape [64, 8] of i4 (1280 bytes)")));
  // An i8 matrix is twice the block bytes: the same size no longer fits the dtype.
  ASSERT_TRUE(DenseFfn()->mutable_up()->mutate_size(1280));
  ASSERT_TRUE(DenseFfn()->mutable_up()->mutate_dtype(DType::I8));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("of i8 (2304 bytes)")));
}

TEST_F(QuantLoaderTest, ExpertsShareTheirLayout) {
  ASSERT_TRUE(Expert(2)->mutable_gate()->mutate_layout(Layout::PANEL16_K4_HADAMARD32));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("gate layout panel16_k4_hadamard32 vs "
                                                    "panel16_k4")));
}

// --- Value rows (format 1.2): a float down matrix stored transposed, nothing else. ---

TEST_F(LoaderTest, ValueRowsLoadAndReadBackAsTheMatrix) {
  WriteOptions options;
  options.down_value_rows = [](const std::string& path, const FfnSpec&) {
    return path == "layers[0].ffn" || path.find(".experts[") != std::string::npos;
  };
  auto bytes = WriteModelBuffer(BaseSpec(), options);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto rows = Model::LoadBuffer(bytes->data(), bytes->size());
  auto plain = Model::LoadBuffer(bytes_.data(), bytes_.size());
  ASSERT_TRUE(rows.ok() && plain.ok()) << rows.status();
  const FfnView& f = (*rows)->layers()[0].ffn;
  EXPECT_EQ(f.down.layout, Layout::VALUE_ROWS);
  EXPECT_EQ(f.up.layout, Layout::ROW_MAJOR);
  EXPECT_EQ((*rows)->layers()[1].moe.shared_experts[0].down.layout, Layout::ROW_MAJOR);
  EXPECT_EQ((*rows)->version_minor(), kFormatVersionMinor);
  // Same shape and size as row-major; DequantizeRows gives the logical matrix back.
  const TensorView& a = f.down;
  const TensorView& b = (*plain)->layers()[0].ffn.down;
  ASSERT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.size, b.size);
  EXPECT_NE(std::memcmp(a.data, b.data, a.size), 0);
  std::vector<float> ra(a.numel()), rb(b.numel());
  DequantizeRows(a.dtype, a.layout, a.shape[0], a.shape[1], a.data, 0, a.shape[0], ra.data());
  DequantizeRows(b.dtype, b.layout, b.shape[0], b.shape[1], b.data, 0, b.shape[0], rb.data());
  EXPECT_EQ(ra, rb);
  std::vector<uint8_t> storage;
  const TensorView back = RowMajorView(a, &storage);
  EXPECT_EQ(std::memcmp(back.data, b.data, b.size), 0);
}

TEST_F(LoaderTest, ValueRowsOnlyForFloatDownMatrices) {
  ASSERT_TRUE(DenseFfn()->mutable_up()->mutate_layout(Layout::VALUE_ROWS));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up: layout value_rows is only "
                                                    "allowed for down matrices")));
  ASSERT_TRUE(DenseFfn()->mutable_up()->mutate_layout(Layout::ROW_MAJOR));
  ASSERT_TRUE(Moe()->mutable_router()->mutate_layout(Layout::VALUE_ROWS));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[1].moe.router: layout value_rows")));
  ASSERT_TRUE(Moe()->mutable_router()->mutate_layout(Layout::ROW_MAJOR));
  ASSERT_TRUE(Expert(1)->mutable_down()->mutate_layout(Layout::VALUE_ROWS));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("down layout value_rows vs row_major")));
}

TEST_F(QuantLoaderTest, ValueRowsAreNotALayoutOfQuantisedDtypes) {
  ASSERT_TRUE(DenseFfn()->mutable_down()->mutate_layout(Layout::VALUE_ROWS));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.down: layout 4 (value_rows) is "
                                                    "not a layout of dtype i4")));
}

TEST_F(LoaderTest, UnknownDtypeIsRefusedByName) {
  ASSERT_TRUE(DenseFfn()->mutable_up()->mutate_dtype(static_cast<schema::DType>(16)));
  EXPECT_THAT(Load(), StatusIs(kDataLoss, HasSubstr("layers[0].ffn.up: dtype 16 is not a known "
                                                    "dtype (f32=1, f16=2, bf16=3, i8=4, i4=5, "
                                                    "q4_k=6, q6_k_i8=7, q5_k_i8=8, q6_k=9, "
                                                    "q5_k=10, iq4_xs=11, iq4_nl=12, q3_k=13, "
                                                    "q2_k=14, mxfp4=15); "
                                                    "the file may come from a newer fflite")));
}

TEST(QuantWriterTest, QuantisedDtypeForEveryTensorIsRefused) {
  WriteOptions options;
  options.dtype = DType::I8;
  EXPECT_THAT(WriteModelBuffer(BaseSpec(), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("only f32, f16 and bf16 apply to every tensor")));
}

}  // namespace
}  // namespace fflite
