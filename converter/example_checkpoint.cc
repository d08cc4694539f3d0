// Example checkpoint generator: the full HF tensor layout of a Llama or Mixtral model (attention
// and embeddings included, which the converter skips), streamed tensor by tensor.
#include "converter/example_checkpoint.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/half.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace fflite {
namespace converter {
namespace {

struct PlannedTensor {
  std::string name;
  std::vector<uint64_t> shape;
  float center = 0.0f;  // values are center + uniform(-scale, scale)
  float scale = 0.0f;
};

// splitmix64: fixed across compilers and standard libraries, unlike std:: distributions.
uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

absl::Status IoError(const std::string& what, const std::string& path) {
  return absl::UnavailableError(absl::StrFormat("%s '%s': %s", what, path, std::strerror(errno)));
}

absl::Status WriteAll(FILE* f, const void* data, size_t size, const std::string& path) {
  if (size > 0 && std::fwrite(data, 1, size, f) != size) return IoError("writing", path);
  return absl::OkStatus();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return IoError("cannot create", path);
  absl::Status st = WriteAll(f, text.data(), text.size(), path);
  if (std::fclose(f) != 0 && st.ok()) st = IoError("closing", path);
  return st;
}

// Writes one safetensors file holding `tensors`, generating each one's values on the way.
absl::Status WriteShard(const std::string& path, const std::vector<const PlannedTensor*>& tensors,
                        const std::string& dtype, uint64_t seed) {
  const size_t elem = dtype == "F32" ? 4 : 2;
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const PlannedTensor* t : tensors) {
    const uint64_t bytes = Numel(t->shape) * elem;
    header[t->name] = {{"dtype", dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // the data buffer starts 8-byte aligned
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return IoError("cannot create", path);
  std::unique_ptr<FILE, int (*)(FILE*)> closer(f, std::fclose);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  FFLITE_RETURN_IF_ERROR(WriteAll(f, len, 8, path));
  FFLITE_RETURN_IF_ERROR(WriteAll(f, text.data(), text.size(), path));
  std::vector<uint8_t> buf;
  for (const PlannedTensor* t : tensors) {
    const uint64_t n = Numel(t->shape);
    buf.resize(n * elem);
    uint64_t state = seed ^ Fnv1a(t->name);
    for (uint64_t i = 0; i < n; ++i) {
      const double u = static_cast<double>(SplitMix(&state) >> 11) * (1.0 / 9007199254740992.0);
      const float v = t->center + t->scale * static_cast<float>(2.0 * u - 1.0);
      if (elem == 4) {
        std::memcpy(buf.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = dtype == "F16" ? F32ToF16(v) : F32ToBf16(v);
        std::memcpy(buf.data() + 2 * i, &h, 2);
      }
    }
    FFLITE_RETURN_IF_ERROR(WriteAll(f, buf.data(), buf.size(), path));
  }
  if (std::fclose(closer.release()) != 0) return IoError("closing", path);
  return absl::OkStatus();
}

}  // namespace

absl::Status MakeExampleCheckpoint(const std::string& dir, const ExampleOptions& o) {
  const bool moe = o.arch == "mixtral";
  if (!moe && o.arch != "llama") {
    return absl::InvalidArgumentError(
        absl::StrFormat("--arch \"%s\": expected llama or mixtral", o.arch));
  }
  if (o.dtype != "F32" && o.dtype != "F16" && o.dtype != "BF16") {
    return absl::InvalidArgumentError(
        absl::StrFormat("--dtype \"%s\": expected F32, F16 or BF16", o.dtype));
  }
  const uint64_t h = o.hidden_size, ff = o.intermediate_size;
  if (o.layers == 0 || h == 0 || ff == 0 || o.vocab_size == 0 || h > (1u << 20) ||
      ff > (1u << 20) || o.layers > 4096 || o.vocab_size > (1u << 20)) {
    return absl::InvalidArgumentError("layers, hidden_size, intermediate_size and vocab_size must "
                                      "be positive (and at most 2^20; 4096 layers)");
  }
  if (moe && (o.experts == 0 || o.top_k == 0 || o.top_k > o.experts || o.experts > 1024)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "experts %d and top_k %d: need 1 <= top_k <= experts <= 1024", o.experts, o.top_k));
  }
  if (o.shards == 0 || o.shards > 999) {
    return absl::InvalidArgumentError(absl::StrFormat("shards %d must be in [1, 999]", o.shards));
  }
  const uint64_t head_dim = h % 64 == 0 && h >= 256 ? 64 : (h % 16 == 0 ? 16 : h);
  const uint64_t heads = h / head_dim;
  const uint64_t kv_heads = heads >= 2 ? heads / 2 : 1;

  std::vector<PlannedTensor> tensors;
  auto linear = [&](const std::string& name, uint64_t out, uint64_t in) {
    tensors.push_back({name, {out, in}, 0.0f, static_cast<float>(1.0 / std::sqrt(double(in)))});
  };
  auto norm = [&](const std::string& name) { tensors.push_back({name, {h}, 1.0f, 0.1f}); };
  tensors.push_back({"model.embed_tokens.weight", {o.vocab_size, h}, 0.0f, 1.0f});
  for (uint32_t i = 0; i < o.layers; ++i) {
    const std::string p = absl::StrFormat("model.layers.%d.", i);
    norm(p + "input_layernorm.weight");
    linear(p + "self_attn.q_proj.weight", heads * head_dim, h);
    linear(p + "self_attn.k_proj.weight", kv_heads * head_dim, h);
    linear(p + "self_attn.v_proj.weight", kv_heads * head_dim, h);
    linear(p + "self_attn.o_proj.weight", h, heads * head_dim);
    norm(p + "post_attention_layernorm.weight");
    if (moe) {
      linear(p + "block_sparse_moe.gate.weight", o.experts, h);
      for (uint32_t e = 0; e < o.experts; ++e) {
        const std::string x = absl::StrFormat("%sblock_sparse_moe.experts.%d.", p, e);
        linear(x + "w1.weight", ff, h);
        linear(x + "w2.weight", h, ff);
        linear(x + "w3.weight", ff, h);
      }
    } else {
      linear(p + "mlp.gate_proj.weight", ff, h);
      linear(p + "mlp.up_proj.weight", ff, h);
      linear(p + "mlp.down_proj.weight", h, ff);
    }
  }
  norm("model.norm.weight");
  linear("lm_head.weight", o.vocab_size, h);

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // like mkdir -p
  if (ec) {
    return absl::UnavailableError(absl::StrFormat("cannot create '%s': %s", dir, ec.message()));
  }
  const std::string torch_dtype =
      o.dtype == "F32" ? "float32" : (o.dtype == "F16" ? "float16" : "bfloat16");
  nlohmann::ordered_json config = {
      {"architectures", {moe ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", o.arch},
      {"hidden_size", h},
      {"intermediate_size", ff},
      {"num_hidden_layers", o.layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"vocab_size", o.vocab_size},
      {"max_position_embeddings", 4096},
      {"rope_theta", 10000.0},
      {"tie_word_embeddings", false},
      {"torch_dtype", torch_dtype},
  };
  if (moe) {
    config["num_local_experts"] = o.experts;
    config["num_experts_per_tok"] = o.top_k;
  }
  FFLITE_RETURN_IF_ERROR(WriteText(dir + "/config.json", config.dump(2) + "\n"));

  // Split into shards of about equal bytes, in tensor order.
  const size_t elem = o.dtype == "F32" ? 4 : 2;
  uint64_t total = 0;
  for (const PlannedTensor& t : tensors) total += Numel(t.shape) * elem;
  std::vector<std::vector<const PlannedTensor*>> shards(o.shards);
  uint64_t seen = 0;
  for (const PlannedTensor& t : tensors) {
    size_t s = static_cast<size_t>(seen * o.shards / (total == 0 ? 1 : total));
    if (s >= o.shards) s = o.shards - 1;
    shards[s].push_back(&t);
    seen += Numel(t.shape) * elem;
  }
  if (o.shards == 1) {
    return WriteShard(dir + "/model.safetensors", shards[0], o.dtype, o.seed);
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (uint32_t s = 0; s < o.shards; ++s) {
    const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, o.shards);
    FFLITE_RETURN_IF_ERROR(WriteShard(dir + "/" + name, shards[s], o.dtype, o.seed));
    for (const PlannedTensor* t : shards[s]) weight_map[t->name] = name;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
  return WriteText(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace converter
}  // namespace fflite
