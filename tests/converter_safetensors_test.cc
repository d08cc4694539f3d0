// Bad input for the converter: malformed safetensors files, indexes and configs, missing or
// mismatched tensors, unknown architectures, unsupported dtypes. Each case asserts its error and
// that a failed conversion leaves nothing behind and never replaces an existing file.
#include <string>

#include "converter/checkpoint.h"
#include "converter/safetensors.h"
#include "converter_test_util.h"

namespace fflite {
namespace testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using converter::SafetensorsFile;

std::string Le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

class SafetensorsTest : public ConverterTest {
 protected:
  absl::Status OpenRaw(const std::string& header, const std::string& data,
                       std::optional<uint64_t> declared = std::nullopt) {
    const std::string path = ckpt_ + "/x.safetensors";
    EXPECT_OK(WriteSafetensorsRaw(path, header, data, declared));
    return SafetensorsFile::Open(path).status();
  }
};

TEST_F(SafetensorsTest, ReadsAValidFile) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
      R"("c":{"dtype":"I64","shape":[0],"data_offsets":[22,22]}})";
  const std::string path = ckpt_ + "/x.safetensors";
  ASSERT_OK(WriteSafetensorsRaw(path, header, std::string(22, '\1')));
  ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(path));
  EXPECT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_NE(f->Find("b"), nullptr);
  EXPECT_EQ(f->Find("b")->shape, std::vector<uint64_t>({3}));
  EXPECT_EQ(f->Find("b")->begin, 16u);
  EXPECT_EQ(f->Data(*f->Find("b"))[0], 1);
}

TEST_F(SafetensorsTest, EmptyAndShortFiles) {
  const std::string path = ckpt_ + "/x.safetensors";
  ASSERT_OK(WriteTextFile(path, ""));
  EXPECT_THAT(SafetensorsFile::Open(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("empty")));
  ASSERT_OK(WriteTextFile(path, "abc"));
  EXPECT_THAT(SafetensorsFile::Open(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("x.safetensors"), HasSubstr("truncated: 3 bytes"))));
  EXPECT_THAT(SafetensorsFile::Open(ckpt_ + "/missing.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.safetensors")));
}

TEST_F(SafetensorsTest, HeaderLongerThanTheFile) {
  EXPECT_THAT(OpenRaw("{}", "", 5000),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("truncated: header length 5000 exceeds the 2 bytes")));
}

TEST_F(SafetensorsTest, HeaderOverTheCap) {
  EXPECT_THAT(OpenRaw("{}", "", 200000000),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("header length 200000000 exceeds the limit of 100000000")));
}

TEST_F(SafetensorsTest, BadJson) {
  EXPECT_THAT(OpenRaw(R"({"a": {"dtype": "F32", )", ""),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not valid JSON")));
  EXPECT_THAT(OpenRaw("{\"a\x9d\": ", ""),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("\\x9d")));  // kept printable
  EXPECT_THAT(OpenRaw("[1, 2]", ""), StatusIs(absl::StatusCode::kDataLoss,
                                              HasSubstr("header: not a JSON object")));
  EXPECT_THAT(OpenRaw(std::string(100, '[') + std::string(100, ']'), ""),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("nests deeper")));
}

TEST_F(SafetensorsTest, TruncatedData) {
  EXPECT_THAT(OpenRaw(R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}})",
                      std::string(40, '\0')),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("tensor 'w'"), HasSubstr("[0, 64) exceed the data buffer "
                                                               "of 40 bytes"))));
}

TEST_F(SafetensorsTest, OverlappingOffsets) {
  EXPECT_THAT(OpenRaw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                      std::string(24, '\0')),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("tensor 'b': bytes [8, 24) overlap tensor 'a' [0, 16)")));
}

TEST_F(SafetensorsTest, ShapeAndByteRangeDisagree) {
  EXPECT_THAT(OpenRaw(R"({"w":{"dtype":"F16","shape":[4,4],"data_offsets":[0,16]}})",
                      std::string(16, '\0')),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("tensor 'w': shape [4, 4] of F16 needs 32 bytes, data_offsets "
                                 "[0, 16) hold 16")));
  EXPECT_THAT(OpenRaw(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
                      std::string(16, '\0')),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than 2^64")));
  EXPECT_THAT(OpenRaw(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                      std::string(4, '\0')),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a non-negative integer")));
  EXPECT_THAT(OpenRaw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
                      std::string(8, '\0')),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("end before they begin")));
  EXPECT_THAT(OpenRaw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("two non-negative integers")));
}

TEST_F(SafetensorsTest, DTypeNames) {
  EXPECT_THAT(OpenRaw(R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", "abcd"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("tensor 'w': unknown dtype \"F17\"")));
  EXPECT_THAT(OpenRaw(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("non-string \"dtype\"")));
}

TEST_F(SafetensorsTest, MetadataMustMapStringsToStrings) {
  EXPECT_THAT(OpenRaw(R"({"__metadata__":{"format":1}})", ""),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("__metadata__['format']: value 1 is not a string")));
  EXPECT_THAT(OpenRaw(R"({"__metadata__":["pt"]})", ""),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("__metadata__: not a JSON object")));
}

// ---- conversion failures: message, and nothing left behind ----

class ConvertFailureTest : public ConverterTest {
 protected:
  // A valid one-layer llama checkpoint, which each test then breaks.
  void SetUp() override {
    ConverterTest::SetUp();
    Rng rng(1);
    w_.AddRandom("model.layers.0.post_attention_layernorm.weight", {8}, rng, 0.1f, "", 1.0f);
    AddGatedMlp(w_, rng, "model.layers.0.mlp", 8, 12);
    config_ = {{"model_type", "llama"}, {"hidden_size", 8}, {"intermediate_size", 12},
               {"num_hidden_layers", 1}};
    // A good file already at the destination: a failure must leave it untouched.
    ASSERT_OK(WriteTextFile(out_dir_ + "/model.fflite", "previous good file"));
  }

  absl::Status Fail(int shards = 1, bool write = true) {
    if (write) {
      EXPECT_OK(w_.Write(ckpt_, config_.dump(), shards));
    }
    absl::Status st =
        converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", {}).status();
    EXPECT_FALSE(st.ok());
    std::string bytes;
    EXPECT_OK(ReadFileBytes(out_dir_ + "/model.fflite", &bytes));
    EXPECT_EQ(bytes, "previous good file");
    EXPECT_EQ(ListDir(out_dir_), std::vector<std::string>({"model.fflite"}));
    return st;
  }

  CheckpointWriter w_;
  json config_;
};

TEST_F(ConvertFailureTest, GoodCheckpointConverts) {
  ASSERT_OK(w_.Write(ckpt_, config_.dump()));
  ASSERT_OK(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", {}).status());
  EXPECT_EQ(ListDir(out_dir_), std::vector<std::string>({"model.fflite"}));
  EXPECT_OK(Model::LoadFile(out_dir_ + "/model.fflite").status());
}

TEST_F(ConvertFailureTest, MissingTensor) {
  CheckpointWriter w;
  Rng rng(2);
  w.AddRandom("model.layers.0.post_attention_layernorm.weight", {8}, rng, 0.1f);
  w.AddRandom("model.layers.0.mlp.gate_proj.weight", {12, 8}, rng, 0.1f);
  w.AddRandom("model.layers.0.mlp.down_proj.weight", {8, 12}, rng, 0.1f);
  w_ = w;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kNotFound,
                               AllOf(HasSubstr("missing tensor 'model.layers.0.mlp.up_proj.weight'"),
                                     HasSubstr("model.safetensors"),
                                     HasSubstr("[intermediate_size, hidden_size] = [12, 8]"))));
}

TEST_F(ConvertFailureTest, MissingTensorInShardedCheckpoint) {
  config_["num_hidden_layers"] = 2;
  EXPECT_THAT(Fail(2), StatusIs(absl::StatusCode::kNotFound,
                                AllOf(HasSubstr("model.layers.1.mlp.gate_proj.weight"),
                                      HasSubstr("model.safetensors.index.json"))));
}

TEST_F(ConvertFailureTest, ShapeContradictsConfig) {
  config_["intermediate_size"] = 16;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("tensor 'model.layers.0.mlp.gate_proj.weight' has "
                                               "shape [12, 8]"),
                                     HasSubstr("expects [intermediate_size, hidden_size] = [16, 8]"),
                                     HasSubstr("config.json"))));
}

TEST_F(ConvertFailureTest, UnknownModelType) {
  config_["model_type"] = "llama9";
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kUnimplemented,
                               AllOf(HasSubstr("model_type \"llama9\" is not supported"),
                                     HasSubstr("mixtral"), HasSubstr("whisper"))));
  config_.erase("model_type");
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("config.json"), HasSubstr("model_type is missing"))));
}

TEST_F(ConvertFailureTest, UnsupportedDType) {
  CheckpointWriter w;
  Rng rng(2);
  w.AddRandom("model.layers.0.post_attention_layernorm.weight", {8}, rng, 0.1f);
  w.AddRaw("model.layers.0.mlp.gate_proj.weight", "I8", 1, {12, 8});
  w.AddRandom("model.layers.0.mlp.up_proj.weight", {12, 8}, rng, 0.1f);
  w.AddRandom("model.layers.0.mlp.down_proj.weight", {8, 12}, rng, 0.1f);
  w.AddRaw("model.embed_positions", "I64", 8, {4});  // unused: fine in another dtype
  w_ = w;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kUnimplemented,
                               AllOf(HasSubstr("tensor 'model.layers.0.mlp.gate_proj.weight'"),
                                     HasSubstr("dtype I8 is not supported"))));
  CheckpointWriter w2 = w;
  w2 = CheckpointWriter();
  w2.AddRandom("model.layers.0.post_attention_layernorm.weight", {8}, rng, 0.1f);
  w2.AddRaw("model.layers.0.mlp.gate_proj.weight", "F64", 8, {12, 8});
  w_ = w2;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("dtype F64")));
}

TEST_F(ConvertFailureTest, BadConfigValues) {
  config_["hidden_act"] = "quick_gelu";
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kUnimplemented,
                               HasSubstr("hidden_act \"quick_gelu\" is not a supported activation")));
  config_["hidden_act"] = "silu";
  config_["hidden_size"] = "eight";
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("hidden_size must be an integer, got \"eight\"")));
  config_["hidden_size"] = 0;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("hidden_size 0 must be in [1, 1048576]")));
}

// Found by fuzz_config: values the format cannot hold were let through to the writer, whose
// loader check refused them naming a layer of its temporary file instead of the config key.
TEST_F(ConvertFailureTest, NormEpsilonOutOfRange) {
  config_["rms_norm_eps"] = -1e-6;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("config.json': rms_norm_eps -1e-06 must be in [0, "),
                                     Not(HasSubstr("model spec")))));
  config_["rms_norm_eps"] = 1e300;  // finite as a double, inf as the float32 the format stores
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("rms_norm_eps 1e+300 must be in [0, ")));
  config_["rms_norm_eps"] = 0.0;
  ASSERT_OK(w_.Write(ckpt_, config_.dump()));
  EXPECT_OK(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", {}).status());
}

// Config-level refusals need a checkpoint that opens; the tensors are never looked at.
TEST_F(ConvertFailureTest, DeepseekGroupedRoutingLimits) {
  config_ = {{"model_type", "deepseek_v3"}, {"hidden_size", 8}, {"intermediate_size", 12},
             {"moe_intermediate_size", 4}, {"num_hidden_layers", 1}, {"n_routed_experts", 4},
             {"num_experts_per_tok", 2}, {"n_group", 4}, {"topk_group", 2}};
  // Groups of one expert: v3 scores a group by its top two.
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("n_group 4 leaves 1 expert per group"),
                                     Not(HasSubstr("model spec")))));
  // top_k = 3 > topk_group 1 x 2 experts per group.
  config_["n_group"] = 2;
  config_["topk_group"] = 1;
  config_["num_experts_per_tok"] = 3;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("num_experts_per_tok 3 exceeds the 2 experts in "
                                         "topk_group = 1 of n_group = 2 groups of 2")));
  config_["model_type"] = "deepseek_v2";
  config_["topk_method"] = "group_limited_greedy";
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("num_experts_per_tok 3 exceeds the 2 experts")));
  config_["num_experts_per_tok"] = 2;
  config_["routed_scaling_factor"] = 1e300;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("routed_scaling_factor 1e+300 must be positive and at "
                                         "most")));
}

// qwen3_moe's layer placement and expert keys, refused by name before any tensor is read.
TEST_F(ConvertFailureTest, Qwen3MoeConfigValues) {
  config_ = {{"model_type", "qwen3_moe"}, {"hidden_size", 8}, {"intermediate_size", 12},
             {"moe_intermediate_size", 4}, {"num_hidden_layers", 2}, {"num_experts", 4},
             {"num_experts_per_tok", 2}, {"decoder_sparse_step", 0}};
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("config.json': decoder_sparse_step 0 must be in "
                                               "[1, 65536]"),
                                     Not(HasSubstr("model spec")))));
  config_["decoder_sparse_step"] = 1;
  config_["mlp_only_layers"] = json::array({0, 2});
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("config.json': mlp_only_layers index 2 is not a layer: "
                                         "num_hidden_layers is 2")));
  config_["mlp_only_layers"] = json::array({-1});
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("mlp_only_layers index -1 is not a layer")));
  config_["mlp_only_layers"] = json::array({0.5});
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("mlp_only_layers must be a list of layer indices "
                                         "(integers)")));
  config_["mlp_only_layers"] = 1;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("mlp_only_layers must be a list of layer indices")));
  config_["mlp_only_layers"] = json::array({0});  // layer 1 stays MoE: its keys are read
  config_.erase("moe_intermediate_size");
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("config.json': moe_intermediate_size is missing (an "
                                         "integer is required)")));
  config_["moe_intermediate_size"] = 4;
  config_["num_experts_per_tok"] = 5;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("num_experts_per_tok 5 must be in [1, 4]")));
  // Qwen3MoeConfig's default: 128 experts (qwen2_moe's is 60).
  config_.erase("num_experts");
  config_["num_experts_per_tok"] = 129;
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("num_experts_per_tok 129 must be in [1, 128]")));
  config_["num_experts_per_tok"] = 2;
  config_["norm_topk_prob"] = "yes";
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("norm_topk_prob must be true or false, got \"yes\"")));
}

TEST_F(ConvertFailureTest, NoSublayers) {
  config_ = {{"model_type", "whisper"}, {"d_model", 8}, {"encoder_layers", 0},
             {"decoder_layers", 0}};
  Rng rng(2);
  w_.AddRandom("model.encoder.layers.0.fc1.weight", {8}, rng, 0.1f);
  EXPECT_THAT(Fail(), StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("config.json': model_type \"whisper\": the config "
                                               "gives the model no FFN sublayers"),
                                     Not(HasSubstr("model spec")))));
}

TEST_F(ConvertFailureTest, BadConfigJson) {
  ASSERT_OK(w_.Write(ckpt_, config_.dump()));
  ASSERT_OK(WriteTextFile(ckpt_ + "/config.json", "{\"model_type\": \"llama\","));
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kDataLoss,
                                       AllOf(HasSubstr("config.json"), HasSubstr("not valid JSON"))));
  ASSERT_OK(WriteTextFile(ckpt_ + "/config.json", "[]"));
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a JSON object")));
  std::filesystem::remove(ckpt_ + "/config.json");
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kNotFound, HasSubstr("config.json")));
}

TEST_F(ConvertFailureTest, NoWeights) {
  ASSERT_OK(WriteTextFile(ckpt_ + "/config.json", config_.dump()));
  EXPECT_THAT(Fail(1, false),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("model.safetensors"),
                             HasSubstr("model.safetensors.index.json"))));
}

TEST_F(ConvertFailureTest, TruncatedShard) {
  ASSERT_OK(w_.Write(ckpt_, config_.dump()));
  std::filesystem::resize_file(ckpt_ + "/model.safetensors",
                               std::filesystem::file_size(ckpt_ + "/model.safetensors") - 10);
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kDataLoss,
                                       AllOf(HasSubstr("model.safetensors"),
                                             HasSubstr("exceed the data buffer"))));
}

TEST_F(ConvertFailureTest, BadIndex) {
  ASSERT_OK(w_.Write(ckpt_, config_.dump(), 2));
  const std::string index = ckpt_ + "/model.safetensors.index.json";
  ASSERT_OK(WriteTextFile(index, R"({"weight_map": {"a": "../../etc/passwd"}})"));
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("must be a plain file name")));
  ASSERT_OK(WriteTextFile(index, R"({"weight_map": {"a": 3}})"));
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a file name")));
  ASSERT_OK(WriteTextFile(index, R"({"metadata": {}})"));
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("\"weight_map\"")));
  // The index places a tensor in a shard that does not hold it.
  json map = {{"weight_map",
               {{"model.layers.0.post_attention_layernorm.weight", "model-00001-of-00002.safetensors"},
                {"model.layers.0.mlp.gate_proj.weight", "model-00001-of-00002.safetensors"},
                {"model.layers.0.mlp.up_proj.weight", "model-00001-of-00002.safetensors"},
                {"model.layers.0.mlp.down_proj.weight", "model-00001-of-00002.safetensors"}}}};
  ASSERT_OK(WriteTextFile(index, map.dump()));
  EXPECT_THAT(Fail(1, false),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("model-00001-of-00002.safetensors"),
                             HasSubstr("which model.safetensors.index.json places in this file"))));
}

TEST_F(ConvertFailureTest, MalformedShardHeader) {
  ASSERT_OK(w_.Write(ckpt_, config_.dump()));
  ASSERT_OK(WriteSafetensorsRaw(ckpt_ + "/model.safetensors", "{\"a\": nope}", ""));
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not valid JSON")));
  ASSERT_OK(WriteTextFile(ckpt_ + "/model.safetensors", Le64(8) + "{}"));
  EXPECT_THAT(Fail(1, false), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
}

TEST_F(ConvertFailureTest, BadOptions) {
  ASSERT_OK(w_.Write(ckpt_, config_.dump()));
  converter::ConvertOptions o;
  o.layers = "1";
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("index 1 is out of range: the model has 1 FFN sublayers (valid: 0-0)")));
  o.layers = "";
  o.d_ff_alignment = 0;
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, out_dir_ + "/model.fflite", o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("alignment 0")));
  std::string bytes;
  ASSERT_OK(ReadFileBytes(out_dir_ + "/model.fflite", &bytes));
  EXPECT_EQ(bytes, "previous good file");
  // An output folder that does not exist.
  o.d_ff_alignment = 64;
  EXPECT_THAT(converter::ConvertCheckpoint(ckpt_, root_ + "/nope/model.fflite", o),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("nope")));
}

}  // namespace
}  // namespace testing
}  // namespace fflite
