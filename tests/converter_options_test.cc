// Converter options and tools' library: d_ff padding is exact, layer selection, --no_norm, output
// dtype, expert records (4 KiB by default, page-aligned experts), metadata, progress,
// fflite-inspect's summary and the example checkpoint generator.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "converter/example_checkpoint.h"
#include "converter/inspect.h"
#include "converter/progress.h"
#include "converter_test_util.h"
#include "fflite/fflite.h"

namespace fflite {
namespace testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using converter::ConvertOptions;

constexpr uint64_t kD = 10, kFf = 14, kE = 4;

// A 3-layer Mixtral-style checkpoint (MoE layers exercise experts, router and padding).
json MixtralCheckpoint(CheckpointWriter& w) {
  Rng rng(21);
  for (int l = 0; l < 3; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    w.AddRandom(p + ".block_sparse_moe.gate.weight", {kE, kD}, rng, 1.0f);
    for (size_t e = 0; e < kE; ++e) {
      AddGatedMlp(w, rng, p + ".block_sparse_moe.experts." + std::to_string(e), kD, kFf, "w1",
                  "w3", "w2");
    }
  }
  return {{"model_type", "mixtral"}, {"hidden_size", kD}, {"intermediate_size", kFf},
          {"num_hidden_layers", 3}, {"num_local_experts", kE}, {"num_experts_per_tok", 2}};
}

std::vector<float> RunAll(const Model& m, size_t layer, size_t tokens = 5) {
  Rng rng(5);
  const std::vector<float> input = rng.Vec(tokens * m.d_model(), 1.0f);
  auto out = RunLayer(m, "reference", layer, input, tokens);
  EXPECT_OK(out.status());
  return out.ok() ? *out : std::vector<float>();
}

TEST_F(ConverterTest, PaddingIsExact) {
  CheckpointWriter w;
  const json config = MixtralCheckpoint(w);
  ConvertOptions a1, a64;
  a1.d_ff_alignment = 1;
  a64.d_ff_alignment = 64;
  auto m1 = Convert(w, config, a1, 1, "a1.fflite");
  auto m64 = Convert(w, config, a64, 1, "a64.fflite");
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m64, nullptr);
  EXPECT_EQ(m1->layers()[0].moe.experts[0].d_ff_padded, kFf);
  EXPECT_EQ(m64->layers()[0].moe.experts[0].d_ff_padded, 64u);
  for (size_t l = 0; l < 3; ++l) {
    const std::vector<float> y1 = RunAll(*m1, l), y64 = RunAll(*m64, l);
    ASSERT_EQ(y1.size(), y64.size());
    EXPECT_EQ(std::memcmp(y1.data(), y64.data(), y1.size() * sizeof(float)), 0) << "layer " << l;
  }
}

TEST_F(ConverterTest, LayerSelection) {
  CheckpointWriter w;
  const json config = MixtralCheckpoint(w);
  auto all = Convert(w, config, {}, 1, "all.fflite");
  ConvertOptions o;
  o.layers = "2,0";
  auto some = Convert(w, config, o, 1, "some.fflite");
  ASSERT_NE(all, nullptr);
  ASSERT_NE(some, nullptr);
  ASSERT_EQ(some->layers().size(), 2u);
  EXPECT_EQ(some->layers()[0].name, "model.layers.0.block_sparse_moe");
  EXPECT_EQ(some->layers()[1].name, "model.layers.2.block_sparse_moe");
  EXPECT_EQ(RunAll(*some, 0), RunAll(*all, 0));
  EXPECT_EQ(RunAll(*some, 1), RunAll(*all, 2));
  bool found = false;
  for (const auto& [k, v] : some->metadata()) {
    if (k == "converter.layers") {
      EXPECT_EQ(v, "2,0");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(ParseLayerSelection, AcceptsIndicesAndRanges) {
  ASSERT_OK_AND_ASSIGN(auto v, converter::ParseLayerSelection("0-3,7, 2", 8));
  EXPECT_EQ(v, std::vector<size_t>({0, 1, 2, 3, 7}));
  EXPECT_THAT(converter::ParseLayerSelection("8", 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("index 8 is out of range")));
  EXPECT_THAT(converter::ParseLayerSelection("3-1", 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ends before it starts")));
  EXPECT_THAT(converter::ParseLayerSelection("a", 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"a\" is not an index")));
  EXPECT_THAT(converter::ParseLayerSelection("1,,2", 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty entry")));
  EXPECT_THAT(converter::ParseLayerSelection("-1", 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an index")));
}

TEST_F(ConverterTest, NoNormLeavesTheBareFfn) {
  Rng rng(22);
  CheckpointWriter w;
  const std::string p = "model.layers.0";
  // No norm weight in the checkpoint at all: --no_norm must not need it.
  AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
  const json config = {{"model_type", "llama"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}};
  ConvertOptions o;
  o.include_norm = false;
  auto model = Convert(w, config, o);
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->layers()[0].norm.present);
  EXPECT_FALSE(model->layers()[0].residual);
  ExpectLayer(*model, 0, [&](const Vec& x) { return HfGatedMlp(w, p + ".mlp", "silu", x); });
}

TEST_F(ConverterTest, OutputDTypeRoundsEveryTensor) {
  Rng rng(23);
  CheckpointWriter w;
  const std::string p = "model.layers.0";
  w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
  AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
  const json config = {{"model_type", "llama"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 1}, {"rms_norm_eps", 1e-5}};
  for (const char* dtype : {"BF16", "F16"}) {
    ConvertOptions o;
    ASSERT_OK_AND_ASSIGN(o.dtype, converter::ParseDType(std::string(dtype) == "F16" ? "f16" : "bf16"));
    auto model = Convert(w, config, o, 1, std::string(dtype) + ".fflite");
    ASSERT_NE(model, nullptr);
    EXPECT_EQ(model->layers()[0].ffn.down.dtype, *o.dtype);
    EXPECT_EQ(model->layers()[0].norm.weight.dtype, *o.dtype);
    // The same computation over the weights rounded to the output dtype.
    CheckpointWriter r;
    for (const char* n : {".post_attention_layernorm.weight", ".mlp.gate_proj.weight",
                          ".mlp.up_proj.weight", ".mlp.down_proj.weight"}) {
      r.Add(p + n, {1}, {0.0f});  // placeholder shape; only Get() is used
      const_cast<std::vector<float>&>(r.Get(p + n)) = w.Get(p + n);
      for (float& v : const_cast<std::vector<float>&>(r.Get(p + n))) v = RoundToDType(dtype, v);
    }
    ExpectLayer(*model, 0, [&](const Vec& x) {
      const Vec h = HfRmsNorm(x, r.Get(p + ".post_attention_layernorm.weight"), 1e-5);
      return Add(x, HfGatedMlp(r, p + ".mlp", "silu", h));
    });
  }
  EXPECT_THAT(converter::ParseDType("f64"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not one of f32, f16, bf16")));
}

// --dtype i8|i4: the expert matrices are quantised (the rest f32), --keep rules keep chosen
// matrices at higher precision, every matrix's error is reported, and the quantised model is
// close to the source model (NMSE of the layer's FFN output well under the quantisation step).
TEST_F(ConverterTest, QuantisesMatricesWithKeepRules) {
  CheckpointWriter w;
  const json config = MixtralCheckpoint(w);
  auto source = Convert(w, config, {}, 1, "f32.fflite");
  ASSERT_NE(source, nullptr);
  for (DType dtype : {DType::I8, DType::I4}) {
    ConvertOptions o;
    o.quantize = dtype;
    o.keep = "f16:down@1;bf16:gate@2";
    std::vector<converter::QuantRecord> records;
    auto model = Convert(w, config, o, 1, std::string(DTypeName(dtype)) + ".fflite");
    ASSERT_NE(model, nullptr);
    const MoeView& m0 = model->layers()[0].moe;
    EXPECT_EQ(m0.experts[3].up.dtype, dtype);
    EXPECT_EQ(m0.experts[3].down.dtype, dtype);
    EXPECT_EQ(m0.experts[3].up.layout, Layout::PANEL16_K4_HADAMARD32);  // rotated by default
    EXPECT_EQ(m0.router.dtype, DType::F32);
    EXPECT_EQ(model->layers()[0].norm.weight.dtype, DType::F32);
    EXPECT_EQ(model->layers()[1].moe.experts[2].down.dtype, DType::F16);
    EXPECT_EQ(model->layers()[1].moe.experts[2].up.dtype, dtype);
    EXPECT_EQ(model->layers()[2].moe.experts[0].gate.dtype, DType::BF16);
    for (size_t l = 0; l < 3; ++l) {
      const std::vector<float> want = RunAll(*source, l, 16), got = RunAll(*model, l, 16);
      ASSERT_EQ(want.size(), got.size());
      double err = 0, norm = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        err += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
      }
      // The layer adds the residual: the FFN's error relative to the whole output is small for
      // i8 (~1e-5) and i4 (~1e-2 of the FFN, less of the sum); these bounds are 10x that.
      EXPECT_LT(err / norm, dtype == DType::I8 ? 1e-4 : 2e-2) << DTypeName(dtype) << " layer " << l;
    }
  }
}

// A bare llama checkpoint of `layers` gated MLPs (no norm: the test compares the FFN alone).
json LlamaMlps(CheckpointWriter& w, uint64_t d, uint64_t ff, int layers) {
  Rng rng(23);
  for (int l = 0; l < layers; ++l) {
    AddGatedMlp(w, rng, "model.layers." + std::to_string(l) + ".mlp", d, ff);
  }
  return {{"model_type", "llama"}, {"hidden_size", d}, {"intermediate_size", ff},
          {"num_hidden_layers", layers}};
}

// NMSE of layer `l` of `got` against the same layer of `want` on 8 random tokens (reference).
double LayerNmse(const Model& want, const Model& got, size_t l, const std::string& backend) {
  Rng rng(6);
  const std::vector<float> x = rng.Vec(8 * want.d_model(), 1.0f);
  auto a = RunLayer(want, "reference", l, x, 8);
  auto b = RunLayer(got, backend, l, x, 8);
  EXPECT_OK(a.status());
  EXPECT_OK(b.status());
  if (!a.ok() || !b.ok()) return 1.0;
  double err = 0, norm = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    err += ((*b)[i] - (*a)[i]) * ((*b)[i] - (*a)[i]);
    norm += (*a)[i] * (*a)[i];
  }
  return err / norm;
}

TEST(KMixedMoreBits, PicksLlamaCppsLayersOfQ4KM) {
  // 32 layers (Llama-2/3-8B): the first and last 4, and every third from 6 to 27.
  std::vector<size_t> picked;
  for (size_t l = 0; l < 32; ++l) {
    if (converter::KMixedMoreBits(l, 32)) picked.push_back(l);
  }
  EXPECT_EQ(picked,
            (std::vector<size_t>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  EXPECT_TRUE(converter::KMixedMoreBits(0, 1));  // one layer: the last eighth
}

TEST_F(ConverterTest, KQuantsRecipesAndFallbacks) {
  CheckpointWriter w;
  const json config = LlamaMlps(w, 256, 200, 8);
  ConvertOptions f32;
  f32.include_norm = false;
  auto source = Convert(w, config, f32, 1, "f32.fflite");
  ASSERT_NE(source, nullptr);
  ConvertOptions o = f32;
  o.quantize = DType::Q4_K;
  o.k_mixed = true;
  auto model = Convert(w, config, o, 1, "q4_k_m.fflite");
  ASSERT_NE(model, nullptr);
  for (size_t l = 0; l < 8; ++l) {
    const FfnView& f = model->layers()[l].ffn;
    EXPECT_EQ(f.d_ff_padded, 256u);  // the default 64 rounded up to whole super-blocks
    EXPECT_EQ(f.up.dtype, DType::Q4_K);
    EXPECT_EQ(f.up.layout, Layout::PANEL16_K4);  // never rotated
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    EXPECT_EQ(f.down.dtype, more ? DType::Q6_K_PACKED : DType::Q4_K) << "layer " << l;
    // Measured 5.6e-3 to 9.1e-3 of the FFN's output (uniform weights in ±0.5: q4_k's own
    // error); the bound is 3x the worst. The CPU backend on the same file runs the int8 kernels,
    // which quantise the activations to int8 per block as well (measured 1.0e-4 to 1.2e-4
    // against the reference's float arithmetic; bound 8x).
    EXPECT_LT(LayerNmse(*source, *model, l, "reference"), 3e-2) << "layer " << l;
    EXPECT_LT(LayerNmse(*model, *model, l, "xnnpack"), 1e-3) << "layer " << l;
  }
  // d_model 96 is no multiple of 256: up and gate fall back (q4_k: i4, q6_k: i8); down keeps
  // the k-quant (its in_features is d_ff padded to 256).
  CheckpointWriter narrow;
  const json narrow_config = LlamaMlps(narrow, 96, 200, 1);
  for (DType dtype : {DType::Q4_K, DType::Q6_K_PACKED}) {
    ConvertOptions q = f32;
    q.quantize = dtype;
    auto m = Convert(narrow, narrow_config, q, 1, std::string(DTypeName(dtype)) + "_narrow.fflite");
    ASSERT_NE(m, nullptr);
    const FfnView& f = m->layers()[0].ffn;
    EXPECT_EQ(f.up.dtype, dtype == DType::Q4_K ? DType::I4 : DType::I8);
    EXPECT_EQ(f.gate.dtype, f.up.dtype);
    EXPECT_EQ(f.down.dtype, dtype);
  }
  // The _M recipe needs q4_k or q5_k.
  ConvertOptions bad = f32;
  bad.quantize = DType::I4;
  bad.k_mixed = true;
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/bad.fflite", bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("q4_k and q5_k")));
}

TEST_F(ConverterTest, ImportanceMatrixWeightsTheErrorAndBadOnesAreRefused) {
  CheckpointWriter w;
  const json config = LlamaMlps(w, 256, 200, 2);
  ConvertOptions o;
  o.include_norm = false;
  o.quantize = DType::Q4_K;
  auto plain = Convert(w, config, o, 1, "plain.fflite");
  ASSERT_NE(plain, nullptr);
  // Input columns of very different strength (a few 30x), the hidden layer's alike.
  Rng rng(31);
  std::vector<float> input(256), hidden(200);
  for (size_t j = 0; j < input.size(); ++j) {
    input[j] = j % 37 == 0 ? 900.0f : rng.Uniform(0.5f, 1.5f);
  }
  for (size_t j = 0; j < hidden.size(); ++j) {
    hidden[j] = j % 23 == 0 ? 400.0f : rng.Uniform(0.0f, 1.0f);
  }
  const std::string dir = root_ + "/imatrix";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::function<void(CheckpointWriter&)>& add) {
    CheckpointWriter im;
    add(im);
    EXPECT_OK(im.Write(dir, "{}"));
    return dir + "/model.safetensors";
  };
  o.imatrix = write([&](CheckpointWriter& im) {
    im.Add("layers[0].input", {256}, input);
    im.Add("layers[0].ffn.hidden", {200}, hidden);
  });
  auto weighted = Convert(w, config, o, 1, "weighted.fflite");
  ASSERT_NE(weighted, nullptr);
  // Layer 0's matrices changed, layer 1's (no importance given) did not; the weighted layer is
  // closer to the source on inputs shaped like the importance.
  const FfnView& p0 = plain->layers()[0].ffn;
  const FfnView& w0 = weighted->layers()[0].ffn;
  EXPECT_NE(std::memcmp(p0.up.data, w0.up.data, p0.up.size), 0);
  EXPECT_NE(std::memcmp(p0.down.data, w0.down.data, p0.down.size), 0);
  const FfnView& p1 = plain->layers()[1].ffn;
  const FfnView& w1 = weighted->layers()[1].ffn;
  EXPECT_EQ(std::memcmp(p1.up.data, w1.up.data, p1.up.size), 0);
  auto f32_opts = o;
  f32_opts.quantize.reset();
  f32_opts.imatrix.clear();
  auto source = Convert(w, config, f32_opts, 1, "f32.fflite");
  ASSERT_NE(source, nullptr);
  std::vector<float> x(16 * 256);
  for (size_t t = 0; t < 16; ++t) {
    for (size_t j = 0; j < 256; ++j) {
      x[t * 256 + j] = std::sqrt(input[j]) * rng.Uniform(-1.0f, 1.0f);
    }
  }
  auto run = [&](const Model& m) { return RunLayer(m, "reference", 0, x, 16); };
  ASSERT_OK_AND_ASSIGN(auto want, run(*source));
  ASSERT_OK_AND_ASSIGN(auto got_plain, run(*plain));
  ASSERT_OK_AND_ASSIGN(auto got_weighted, run(*weighted));
  double e_plain = 0, e_weighted = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e_plain += (got_plain[i] - want[i]) * (got_plain[i] - want[i]);
    e_weighted += (got_weighted[i] - want[i]) * (got_weighted[i] - want[i]);
  }
  EXPECT_LT(e_weighted, 0.8 * e_plain);  // measured: 2.1x less

  // Refused by name, and no output file.
  const std::string out = out_dir_ + "/refused.fflite";
  auto refused = [&](const std::function<void(CheckpointWriter&)>& add, const std::string& what) {
    ConvertOptions r = o;
    r.imatrix = write(add);
    EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out, r).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
    EXPECT_FALSE(std::filesystem::exists(out));
  };
  refused([&](CheckpointWriter& im) { im.Add("layers[2].input", {256}, input); },
          "tensor \"layers[2].input\" names no FFN input or hidden layer of the output (2 layers");
  refused([&](CheckpointWriter& im) { im.Add("layers[0].ffn.hidden", {256}, input); },
          "tensor \"layers[0].ffn.hidden\" must be F32 of shape [200]; it is F32 of 1 dimension(s) "
          "[256]");
  refused([&](CheckpointWriter& im) {
    std::vector<float> neg = input;
    neg[5] = -1.0f;
    im.Add("layers[1].input", {256}, neg);
  }, "tensor \"layers[1].input\" element 5 is -1");
  ConvertOptions i4 = o;
  i4.quantize = DType::I4;
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out, i4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--imatrix applies only with a k-quant --dtype")));
}

TEST(ParseKeepRules, AcceptsRulesAndNamesBadOnes) {
  ASSERT_OK_AND_ASSIGN(auto rules, converter::ParseKeepRules("f16:down@0,31; i8:*", 32));
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].dtype, DType::F16);
  EXPECT_EQ(rules[0].role, "down");
  EXPECT_EQ(rules[0].layers, (std::vector<size_t>{0, 31}));
  EXPECT_EQ(rules[1].dtype, DType::I8);
  EXPECT_TRUE(rules[1].layers.empty());
  EXPECT_THAT(converter::ParseKeepRules("down@0", 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected DTYPE:ROLE")));
  EXPECT_THAT(converter::ParseKeepRules("i4:down", 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype \"i4\"")));
  EXPECT_THAT(converter::ParseKeepRules("f16:mlp", 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("role \"mlp\"")));
  EXPECT_THAT(converter::ParseKeepRules("f16:up@9", 4).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f16:up@9")));
}

TEST_F(ConverterTest, KeepWithoutQuantisationAndNanSourcesAreRefused) {
  CheckpointWriter w;
  json config = MixtralCheckpoint(w);
  // A NaN weight cannot be quantised: refused by tensor, row and column, and no file is left.
  std::vector<float>& w1 = const_cast<std::vector<float>&>(
      w.Get("model.layers.1.block_sparse_moe.experts.2.w1.weight"));
  w1[3 * kD + 4] = std::nanf("");
  ASSERT_OK(w.Write(ckpt_, config.dump(1), 1));
  const std::string out = out_dir_ + "/refused.fflite";
  ConvertOptions keep_only;
  keep_only.keep = "f16:down";
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out, keep_only).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--keep applies only with a quantised --dtype")));
  ConvertOptions q;
  q.quantize = DType::I4;
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out, q).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers[1].moe.experts[2].gate: element [3, 4] is NaN")));
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(ConverterTest, PageAlignedExpertsAndMetadata) {
  CheckpointWriter w;
  const json config = MixtralCheckpoint(w);
  ConvertOptions o;
  o.page_align_experts = true;
  std::vector<converter::ConvertProgress> seen;
  o.progress = [&](const converter::ConvertProgress& p) { seen.push_back(p); };
  auto model = Convert(w, config, o);
  ASSERT_NE(model, nullptr);
  for (const LayerView& l : model->layers()) {
    for (const FfnView& e : l.moe.experts) EXPECT_EQ(e.up.offset % kDataAlignment, 0u);
  }
  // 3 layers × (router + norm + 4 experts × 3 matrices).
  ASSERT_EQ(seen.size(), 3u * (2 + kE * 3));
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].tensors_done, i + 1);
    EXPECT_EQ(seen[i].tensors_total, seen.size());
    if (i > 0) {
      EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
    }
  }
  EXPECT_LE(seen.back().bytes_done, seen.back().bytes_total);
  std::map<std::string, std::string> meta(model->metadata().begin(), model->metadata().end());
  EXPECT_EQ(meta["source.architecture"], "mixtral");
  EXPECT_EQ(meta["source.dtype"], "f32");
  EXPECT_EQ(meta["converter.dtype"], "source");
  EXPECT_EQ(meta["converter.d_ff_alignment"], "64");
  EXPECT_EQ(meta["converter.page_align_experts"], "true");
  EXPECT_EQ(meta["converter.norm"].rfind("included", 0), 0u);
  EXPECT_EQ(meta["source.hidden_act"], "silu");
  // The converter's version is the library's (CMake's project version, written once).
  EXPECT_EQ(meta["converter.version"], std::string("fflite-convert ") + fflite_version());
  EXPECT_THAT(converter::ProgressReporter::FormatBar(seen.back(), 2.0, 10),
              HasSubstr("100%  42/42 tensors"));
}

// MoE models: each expert's tensors are one record starting on a 4 KiB page by default
// (--expert_alignment changes it, 0 turns it off: the layout of older files, which still load and
// stream under a budget); the outputs are the same bits whatever the layout.
TEST_F(ConverterTest, ExpertRecordsOnPagesByDefault) {
  CheckpointWriter w;
  const json config = MixtralCheckpoint(w);
  std::vector<std::vector<float>> outputs;
  for (uint64_t alignment : {uint64_t{4096}, uint64_t{16384}, uint64_t{0}}) {
    SCOPED_TRACE(::testing::Message() << "expert_alignment " << alignment);
    ConvertOptions o;
    if (alignment != 4096) o.expert_alignment = alignment;  // 4096: the default
    auto model = Convert(w, config, o, 1, "a" + std::to_string(alignment) + ".fflite");
    ASSERT_NE(model, nullptr);
    std::map<std::string, std::string> meta(model->metadata().begin(), model->metadata().end());
    EXPECT_EQ(meta["converter.expert_alignment"],
              alignment == 0 ? "none" : std::to_string(alignment));
    for (const LayerView& l : model->layers()) {
      for (size_t e = 0; e < kE; ++e) {
        const FfnView& f = l.moe.experts[e];
        // up, gate and down one after the other (no biases here).
        EXPECT_EQ(f.gate.offset, f.up.offset + f.up.size);
        EXPECT_EQ(f.down.offset, f.gate.offset + f.gate.size);
        const uint64_t record = f.down.offset + f.down.size - f.up.offset;
        if (alignment != 0) {
          EXPECT_EQ(model->FileOffset(f.up) % alignment, 0u) << "expert " << e;
        }
        if (e + 1 < kE) {
          const uint64_t a = alignment == 0 ? kTensorAlignment : alignment;
          EXPECT_EQ(l.moe.experts[e + 1].up.offset - f.up.offset, (record + a - 1) / a * a);
        }
      }
    }
    std::vector<float> y;
    for (size_t l = 0; l < 3; ++l) {
      const std::vector<float> x = Rng(40 + l).Vec(4 * kD, 1.0f);
      ASSERT_OK_AND_ASSIGN(auto full, RunLayer(*model, "xnnpack", l, x, 4));
      // A budget of one expert streams the experts from the file, record by record.
      ASSERT_OK_AND_ASSIGN(auto budgeted, RunLayer(*model, "xnnpack", l, x, 4, 1, 1));
      EXPECT_EQ(budgeted, full) << "layer " << l;
      y.insert(y.end(), full.begin(), full.end());
    }
    outputs.push_back(std::move(y));
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[2], outputs[0]);
  ConvertOptions bad;
  bad.expert_alignment = 100;
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/bad.fflite", bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expert_alignment: 100 must be 0 (none) or a power of two")));
  EXPECT_FALSE(std::filesystem::exists(out_dir_ + "/bad.fflite"));
}

// A dense model has no expert records: the default alignment adds no padding anywhere.
TEST_F(ConverterTest, ExpertAlignmentLeavesDenseModelsAlone) {
  Rng rng(25);
  CheckpointWriter w;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    w.AddRandom(p + ".post_attention_layernorm.weight", {kD}, rng, 0.2f, "", 1.0f);
    AddGatedMlp(w, rng, p + ".mlp", kD, kFf);
  }
  const json config = {{"model_type", "llama"}, {"hidden_size", kD}, {"intermediate_size", kFf},
                       {"num_hidden_layers", 2}};
  ConvertOptions none;
  none.expert_alignment = 0;
  auto packed = Convert(w, config, none, 1, "none.fflite");
  auto dflt = Convert(w, config, {}, 1, "default.fflite");
  ASSERT_NE(packed, nullptr);
  ASSERT_NE(dflt, nullptr);
  EXPECT_EQ(dflt->FileOffset(dflt->layers()[0].ffn.up),
            packed->FileOffset(packed->layers()[0].ffn.up));
  for (size_t l = 0; l < 2; ++l) {
    const FfnView& a = dflt->layers()[l].ffn;
    const FfnView& b = packed->layers()[l].ffn;
    for (auto [x, y] : {std::make_pair(&a.up, &b.up), std::make_pair(&a.gate, &b.gate),
                        std::make_pair(&a.down, &b.down)}) {
      EXPECT_EQ(x->offset, y->offset);
    }
    EXPECT_EQ(dflt->layers()[l].norm.weight.offset, packed->layers()[l].norm.weight.offset);
  }
  EXPECT_EQ(dflt->file_size(), packed->file_size());
}

TEST_F(ConverterTest, InspectSummary) {
  // DeepSeek-style: a dense layer, then MoE with a shared expert, gate bias and grouped routing.
  Rng rng(24);
  CheckpointWriter w;
  const uint64_t E = 4, moe_ff = 6;
  w.AddRandom("model.layers.0.post_attention_layernorm.weight", {kD}, rng, 0.2f);
  AddGatedMlp(w, rng, "model.layers.0.mlp", kD, kFf);
  w.AddRandom("model.layers.1.post_attention_layernorm.weight", {kD}, rng, 0.2f);
  w.AddRandom("model.layers.1.mlp.gate.weight", {E, kD}, rng, 1.0f);
  w.AddRandom("model.layers.1.mlp.gate.e_score_correction_bias", {E}, rng, 0.1f);
  for (size_t e = 0; e < E; ++e) {
    AddGatedMlp(w, rng, "model.layers.1.mlp.experts." + std::to_string(e), kD, moe_ff);
  }
  AddGatedMlp(w, rng, "model.layers.1.mlp.shared_experts", kD, moe_ff);
  const json config = {{"model_type", "deepseek_v3"}, {"hidden_size", kD},
                       {"intermediate_size", kFf}, {"moe_intermediate_size", moe_ff},
                       {"num_hidden_layers", 2}, {"n_routed_experts", E}, {"n_shared_experts", 1},
                       {"num_experts_per_tok", 2}, {"n_group", 2}, {"topk_group", 1},
                       {"first_k_dense_replace", 1}};
  auto model = Convert(w, config);
  ASSERT_NE(model, nullptr);
  const converter::ModelSummary s = converter::Summarize(*model, "x.fflite");
  ASSERT_EQ(s.layers.size(), 2u);
  const uint64_t f = 4;  // bytes per f32
  const converter::LayerSummary& dense = s.layers[0];
  EXPECT_EQ(dense.kind, "dense");
  EXPECT_EQ(dense.d_ff, kFf);
  EXPECT_EQ(dense.d_ff_padded, 64u);
  EXPECT_EQ(dense.parameters, 3 * kD * kFf + kD);
  EXPECT_EQ(dense.bytes, (3 * kD * 64 + kD) * f);
  EXPECT_EQ(dense.bytes_per_token, dense.bytes);
  EXPECT_EQ(dense.flops_per_token, 2 * 3 * kD * kFf);
  const converter::LayerSummary& moe = s.layers[1];
  EXPECT_EQ(moe.kind, "moe");
  EXPECT_EQ(moe.experts, E);
  EXPECT_EQ(moe.top_k, 2u);
  EXPECT_EQ(moe.shared_experts, 1u);
  const uint64_t expert_bytes = 3 * kD * 64 * f, router_bytes = (E * kD + E) * f;
  EXPECT_EQ(moe.bytes, router_bytes + (E + 1) * expert_bytes + kD * f);
  EXPECT_EQ(moe.bytes_per_token, router_bytes + (2 + 1) * expert_bytes + kD * f);
  EXPECT_EQ(moe.flops_per_token, 2 * (E * kD + 3 * 3 * kD * moe_ff));
  EXPECT_EQ(moe.parameters, E * kD + E + (E + 1) * 3 * kD * moe_ff + kD);
  EXPECT_EQ(s.parameters, dense.parameters + moe.parameters);
  // The expert records: up, gate, down of [64, 10] f32 each, on 4 KiB pages by default.
  EXPECT_EQ(dense.expert_record_bytes, 0u);
  EXPECT_EQ(moe.expert_record_bytes, expert_bytes);
  EXPECT_EQ(moe.expert_stride, 8192u);
  EXPECT_GE(moe.expert_alignment, 4096u);
  EXPECT_TRUE(moe.expert_records_page_aligned());

  const std::string table = converter::FormatSummaryTable(s);
  EXPECT_THAT(table, HasSubstr("model.layers.1.mlp"));
  EXPECT_THAT(table, HasSubstr("source.architecture"));
  EXPECT_THAT(table, HasSubstr("deepseek_v3"));
  const json j = json::parse(converter::FormatSummaryJson(s));
  EXPECT_EQ(j["layers"][1]["bytes_per_token"], moe.bytes_per_token);
  EXPECT_EQ(j["totals"]["flops_per_token"], s.flops_per_token);
  EXPECT_EQ(j["metadata"]["source.architecture"], "deepseek_v3");
  EXPECT_THAT(table, HasSubstr("expert records"));
  EXPECT_THAT(table, HasSubstr("record 7.5 KiB (7680)  stride 8.0 KiB (8192)  4 KiB aligned"));
  EXPECT_EQ(j["layers"][1]["expert_record_bytes"], expert_bytes);
  EXPECT_EQ(j["layers"][1]["expert_stride"], 8192u);
  EXPECT_EQ(j["layers"][1]["expert_records_page_aligned"], true);
  EXPECT_EQ(j["layers"][0]["expert_records_page_aligned"], false);

  // A file without expert alignment (as written before it existed): records packed at 64 bytes.
  ConvertOptions packed;
  packed.expert_alignment = 0;
  auto old = Convert(w, config, packed, 1, "packed.fflite");
  ASSERT_NE(old, nullptr);
  const converter::ModelSummary p = converter::Summarize(*old, "packed.fflite");
  EXPECT_EQ(p.layers[1].expert_record_bytes, expert_bytes);
  EXPECT_EQ(p.layers[1].expert_stride, expert_bytes);  // 7680: a multiple of 64
  EXPECT_FALSE(p.layers[1].expert_records_page_aligned());
  EXPECT_THAT(converter::FormatSummaryTable(p),
              HasSubstr("record 7.5 KiB (7680)  stride 7.5 KiB (7680)  not 4 KiB aligned"));
}

TEST_F(ConverterTest, ExampleCheckpointsConvert) {
  for (const char* arch : {"llama", "mixtral"}) {
    converter::ExampleOptions o;
    o.arch = arch;
    o.layers = 2;
    o.hidden_size = 16;
    o.intermediate_size = 24;
    o.experts = 4;
    o.vocab_size = 8;
    o.dtype = "BF16";
    o.shards = std::string(arch) == "mixtral" ? 2 : 1;
    const std::string dir = root_ + "/" + arch;
    ASSERT_OK(converter::MakeExampleCheckpoint(dir, o));
    const std::string out = out_dir_ + "/" + arch + ".fflite";
    ASSERT_OK_AND_ASSIGN(auto result, converter::ConvertCheckpoint(dir, out, {}));
    EXPECT_EQ(result.sublayers_written, 2u);
    ASSERT_OK_AND_ASSIGN(auto model, Model::LoadFile(out));
    EXPECT_EQ(model->layers()[0].kind,
              std::string(arch) == "mixtral" ? LayerKind::kMoe : LayerKind::kDense);
    EXPECT_EQ(RunAll(*model, 1, 2).size(), 2 * 16u);
  }
  converter::ExampleOptions bad;
  bad.arch = "gpt2";
  EXPECT_THAT(converter::MakeExampleCheckpoint(root_ + "/bad", bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected llama or mixtral")));
}

}  // namespace
}  // namespace testing
}  // namespace fflite
