// Model writer: plans the data section (64-byte aligned tensors, each expert's tensors in one
// record at WriteOptions::expert_alignment, d_ff padding, optional dtype conversion), builds the
// FlatBuffer metadata, streams tensors one at a time, and commits the file atomically after
// checking it with the runtime's own loader.
#include "format/writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/half.h"
#include "base/status_macros.h"
#include "flatbuffers/flatbuffers.h"
#include "format/quant_layout.h"

namespace fflite {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

uint64_t Numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

float LoadAsF32(DType dtype, const uint8_t* p) {
  uint16_t h;
  float f;
  switch (dtype) {
    case DType::F16: std::memcpy(&h, p, 2); return F16ToF32(h);
    case DType::BF16: std::memcpy(&h, p, 2); return Bf16ToF32(h);
    default: std::memcpy(&f, p, 4); return f;
  }
}

void StoreF32As(DType dtype, float v, uint8_t* p) {
  uint16_t h;
  switch (dtype) {
    case DType::F16: h = F32ToF16(v); std::memcpy(p, &h, 2); return;
    case DType::BF16: h = F32ToBf16(v); std::memcpy(p, &h, 2); return;
    default: std::memcpy(p, &v, 4); return;
  }
}

// One tensor of the data section: where its bytes come from and where they go.
struct PlannedTensor {
  const TensorSource* source;
  std::string path;
  std::vector<uint64_t> stored_shape;  // logical shape with d_ff padded
  DType dtype;                         // stored dtype
  Layout layout;
  uint64_t offset;
  uint64_t size;
};

class Planner {
 public:
  Planner(const ModelSpec& spec, const WriteOptions& options) : spec_(spec), options_(options) {
    // Store every scalar, defaults included: the file says what it means without relying on the
    // schema's defaults, and tests can mutate any field in place.
    fbb_.ForceDefaults(true);
  }

  absl::Status Build();
  const std::vector<PlannedTensor>& tensors() const { return tensors_; }
  uint64_t data_size() const { return cursor_; }
  // The largest alignment a tensor was placed at: the data section's start must be a multiple.
  uint64_t max_alignment() const { return max_alignment_; }
  flatbuffers::FlatBufferBuilder& fbb() { return fbb_; }

 private:
  using TensorOffset = flatbuffers::Offset<schema::Tensor>;
  // `matrix`: an FFN's up, gate or down matrix (WriteOptions::matrix_dtype applies).
  absl::StatusOr<TensorOffset> Tensor(const TensorSource& src, const std::string& path,
                                      const std::vector<uint64_t>& logical,
                                      const std::vector<uint64_t>& stored, bool required,
                                      uint64_t alignment = kTensorAlignment, bool matrix = false,
                                      bool value_rows = false);
  // `alignment`: where the FFN's first tensor (up) starts; the others follow it.
  absl::StatusOr<flatbuffers::Offset<schema::Ffn>> Ffn(const FfnSpec& f, const std::string& path,
                                                       uint64_t alignment);
  absl::StatusOr<flatbuffers::Offset<schema::Moe>> Moe(const MoeSpec& m, const std::string& path);
  absl::StatusOr<flatbuffers::Offset<schema::Norm>> Norm(const NormSpec& n,
                                                         const std::string& path);

  const ModelSpec& spec_;
  const WriteOptions& options_;
  flatbuffers::FlatBufferBuilder fbb_{4096};
  std::vector<PlannedTensor> tensors_;
  uint64_t cursor_ = 0;
  uint64_t expert_alignment_ = kTensorAlignment;  // of each expert's record (set by Build)
  uint64_t max_alignment_ = kTensorAlignment;
};

absl::StatusOr<Planner::TensorOffset> Planner::Tensor(const TensorSource& src,
                                                      const std::string& path,
                                                      const std::vector<uint64_t>& logical,
                                                      const std::vector<uint64_t>& stored,
                                                      bool required, uint64_t alignment,
                                                      bool matrix, bool value_rows) {
  if (!src.present()) {
    if (required) return absl::InvalidArgumentError(absl::StrCat(path, ": required tensor missing"));
    return TensorOffset();
  }
  if (src.shape != logical) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: shape %s does not match the expected %s",
                                                      path, ShapeString(src.shape),
                                                      ShapeString(logical)));
  }
  if (FindDType(src.dtype) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid source dtype"));
  }
  if (options_.dtype.has_value() && DTypeSize(*options_.dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: dtype %s: only f32, f16 and bf16 apply to every tensor (quantise the weight "
        "matrices through matrix_dtype)", path, DTypeName(*options_.dtype)));
  }
  const DTypeInfo* src_info = FindDType(src.dtype);
  const bool prequantized = src_info != nullptr && src_info->quantized;
  DType dtype = src.dtype;
  if (prequantized) {
    // Quantised already (a GGUF Q4_0 / Q8_0 tensor): stored as it is, never quantised again.
    if (!matrix || src.shape.size() != 2 || (options_.dtype.has_value() &&
                                             *options_.dtype != src.dtype)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: a %s source is stored as it is, only as a weight matrix and without a dtype "
          "conversion", path, DTypeName(src.dtype)));
    }
    if (TensorBytes(src.dtype, src.shape, Layout::PANEL16_K4) == 0 ||
        TensorBytes(src.dtype, stored, Layout::PANEL16_K4) == 0) {
      // Q4_K: whole super-blocks of 256 along in_features, before and after the padding.
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: a %s matrix needs in_features a multiple of %d; shape %s, stored as %s (d_ff "
          "padded to a multiple of %d)", path, DTypeName(src.dtype), src_info->block_elems,
          ShapeString(src.shape), ShapeString(stored), options_.d_ff_alignment));
    }
  } else {
    dtype = options_.dtype.value_or(src.dtype);
    if (matrix && options_.matrix_dtype) dtype = options_.matrix_dtype(path, dtype);
    dtype = KQuantFallback(dtype, stored);
  }
  const DTypeInfo* info = FindDType(dtype);
  if (info == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid stored dtype"));
  }
  const Layout layout = !info->quantized ? (value_rows ? Layout::VALUE_ROWS : Layout::ROW_MAJOR)
                        : options_.quantize.rotate && !prequantized && !IsKQuant(dtype)
                            ? Layout::PANEL16_K4_HADAMARD32
                            : Layout::PANEL16_K4;
  const uint64_t size = TensorBytes(dtype, stored, layout);
  cursor_ = AlignUp(cursor_, alignment);
  max_alignment_ = std::max(max_alignment_, alignment);
  const uint64_t offset = cursor_;
  cursor_ += size;
  tensors_.push_back({&src, path, stored, dtype, layout, offset, size});
  auto shape = fbb_.CreateVector(stored);
  return schema::CreateTensor(fbb_, dtype, shape, offset, size, layout);
}

absl::StatusOr<flatbuffers::Offset<schema::Ffn>> Planner::Ffn(const FfnSpec& f,
                                                              const std::string& path,
                                                              uint64_t alignment) {
  if (f.d_ff == 0) return absl::InvalidArgumentError(absl::StrCat(path, ".d_ff: must be >= 1"));
  const uint64_t d = spec_.d_model, ff = f.d_ff;
  const uint64_t ffp = AlignUp(ff, options_.d_ff_alignment);
  // One record: up (at `alignment`), gate, down, then the biases, each right after the last.
  FFLITE_ASSIGN_OR_RETURN(auto up, Tensor(f.up, path + ".up", {ff, d}, {ffp, d}, true, alignment,
                                          true));
  TensorOffset gate;
  if (f.gated) {
    FFLITE_ASSIGN_OR_RETURN(gate, Tensor(f.gate, path + ".gate", {ff, d}, {ffp, d}, true,
                                         kTensorAlignment, true));
  }
  const bool value_rows = options_.down_value_rows && options_.down_value_rows(path, f);
  FFLITE_ASSIGN_OR_RETURN(auto down, Tensor(f.down, path + ".down", {d, ff}, {d, ffp}, true,
                                            kTensorAlignment, true, value_rows));
  FFLITE_ASSIGN_OR_RETURN(auto up_bias, Tensor(f.up_bias, path + ".up_bias", {ff}, {ffp}, false));
  TensorOffset gate_bias;
  if (f.gated) {
    FFLITE_ASSIGN_OR_RETURN(gate_bias,
                            Tensor(f.gate_bias, path + ".gate_bias", {ff}, {ffp}, false));
  }
  FFLITE_ASSIGN_OR_RETURN(auto down_bias,
                          Tensor(f.down_bias, path + ".down_bias", {d}, {d}, false));
  return schema::CreateFfn(fbb_, f.activation, f.gated, spec_.d_model, f.d_ff,
                           static_cast<uint32_t>(ffp), up, gate, down, up_bias, gate_bias,
                           down_bias);
}

absl::StatusOr<flatbuffers::Offset<schema::Moe>> Planner::Moe(const MoeSpec& m,
                                                              const std::string& path) {
  const uint64_t d = spec_.d_model, e = m.experts.size();
  FFLITE_ASSIGN_OR_RETURN(auto router, Tensor(m.router, path + ".router", {e, d}, {e, d}, true));
  FFLITE_ASSIGN_OR_RETURN(auto router_bias,
                          Tensor(m.router_bias, path + ".router_bias", {e}, {e}, false));
  FFLITE_ASSIGN_OR_RETURN(auto correction, Tensor(m.score_correction_bias,
                                                  path + ".score_correction_bias", {e}, {e}, false));
  std::vector<flatbuffers::Offset<schema::Ffn>> experts, shared;
  for (size_t i = 0; i < m.experts.size(); ++i) {
    FFLITE_ASSIGN_OR_RETURN(auto ffn, Ffn(m.experts[i], absl::StrFormat("%s.experts[%d]", path, i),
                                          expert_alignment_));
    experts.push_back(ffn);
  }
  for (size_t i = 0; i < m.shared_experts.size(); ++i) {
    FFLITE_ASSIGN_OR_RETURN(
        auto ffn, Ffn(m.shared_experts[i], absl::StrFormat("%s.shared_experts[%d]", path, i),
                      expert_alignment_));
    shared.push_back(ffn);
  }
  FFLITE_ASSIGN_OR_RETURN(auto gate, Tensor(m.shared_expert_gate, path + ".shared_expert_gate",
                                            {1, d}, {1, d}, false));
  auto experts_vec = fbb_.CreateVector(experts);
  auto shared_vec = shared.empty() ? 0 : fbb_.CreateVector(shared);
  return schema::CreateMoe(fbb_, static_cast<uint32_t>(e), m.top_k, m.scoring, m.normalize_top_k,
                           m.routed_scaling_factor, router, router_bias, correction, m.n_group,
                           m.topk_group, m.group_scoring, experts_vec, shared_vec, gate);
}

absl::StatusOr<flatbuffers::Offset<schema::Norm>> Planner::Norm(const NormSpec& n,
                                                                const std::string& path) {
  const uint64_t d = spec_.d_model;
  FFLITE_ASSIGN_OR_RETURN(auto weight, Tensor(n.weight, path + ".weight", {d}, {d}, true));
  FFLITE_ASSIGN_OR_RETURN(auto bias, Tensor(n.bias, path + ".bias", {d}, {d}, false));
  return schema::CreateNorm(fbb_, n.kind, n.placement, n.eps, n.unit_offset, weight, bias);
}

absl::Status Planner::Build() {
  if (options_.d_ff_alignment == 0) {
    return absl::InvalidArgumentError("d_ff_alignment: must be at least 1");
  }
  const uint64_t a = options_.data_alignment;
  if (a < kTensorAlignment || (a & (a - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data_alignment: %d must be a power of two of at least %d", a, kTensorAlignment));
  }
  FFLITE_RETURN_IF_ERROR(CheckExpertAlignment(options_.expert_alignment));
  expert_alignment_ = std::max(options_.expert_alignment, kTensorAlignment);
  if (options_.page_align_experts) expert_alignment_ = std::max(expert_alignment_, a);
  std::vector<flatbuffers::Offset<schema::Layer>> layers;
  for (size_t i = 0; i < spec_.layers.size(); ++i) {
    const LayerSpec& l = spec_.layers[i];
    const std::string path = absl::StrFormat("layers[%d]", i);
    schema::Body body_type;
    flatbuffers::Offset<void> body;
    if (l.kind == LayerKind::kMoe) {
      FFLITE_ASSIGN_OR_RETURN(auto moe, Moe(l.moe, path + ".moe"));
      body_type = schema::Body::Moe;
      body = moe.Union();
    } else {
      FFLITE_ASSIGN_OR_RETURN(auto ffn, Ffn(l.ffn, path + ".ffn", kTensorAlignment));
      body_type = schema::Body::Ffn;
      body = ffn.Union();
    }
    flatbuffers::Offset<schema::Norm> norm, output_norm;
    if (l.norm.has_value()) {
      FFLITE_ASSIGN_OR_RETURN(norm, Norm(*l.norm, path + ".norm"));
    }
    if (l.output_norm.has_value()) {
      FFLITE_ASSIGN_OR_RETURN(output_norm, Norm(*l.output_norm, path + ".output_norm"));
    }
    auto name = fbb_.CreateString(l.name);
    layers.push_back(
        schema::CreateLayer(fbb_, name, body_type, body, norm, l.residual, output_norm));
  }
  std::vector<flatbuffers::Offset<schema::KeyValue>> kvs;
  for (const auto& [k, v] : spec_.metadata) {
    auto key = fbb_.CreateString(k);
    auto value = fbb_.CreateString(v);
    kvs.push_back(schema::CreateKeyValue(fbb_, key, value));
  }
  auto layers_vec = fbb_.CreateVector(layers);
  auto kv_vec = fbb_.CreateVector(kvs);
  // The data offset depends on the metadata's size, which does not depend on the offset's value
  // (a scalar field of fixed width): build with a placeholder, then patch below.
  const uint64_t data_size = AlignUp(cursor_, kTensorAlignment);
  cursor_ = data_size;
  schema::ModelBuilder mb(fbb_);
  mb.add_version_major(kFormatVersionMajor);
  mb.add_version_minor(kFormatVersionMinor);
  mb.add_d_model(spec_.d_model);
  mb.add_layers(layers_vec);
  mb.add_data_offset(~uint64_t{0});  // non-default, so the field is stored; patched later
  mb.add_data_size(data_size);
  mb.add_metadata(kv_vec);
  schema::FinishSizePrefixedModelBuffer(fbb_, mb.Finish());
  return absl::OkStatus();
}

// Where the bytes go: a file descriptor or a vector.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual absl::Status Write(const void* data, size_t size) = 0;
  absl::Status Zeros(uint64_t count) {
    static const uint8_t kZeros[4096] = {};
    while (count > 0) {
      const size_t n = count < sizeof(kZeros) ? static_cast<size_t>(count) : sizeof(kZeros);
      FFLITE_RETURN_IF_ERROR(Write(kZeros, n));
      count -= n;
    }
    return absl::OkStatus();
  }
};

class VectorSink : public Sink {
 public:
  absl::Status Write(const void* data, size_t size) override {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + size);
    return absl::OkStatus();
  }
  std::vector<uint8_t> bytes;
};

class FdSink : public Sink {
 public:
  FdSink(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  absl::Status Write(const void* data, size_t size) override {
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return absl::UnavailableError(
            absl::StrFormat("writing '%s': %s", name_, std::strerror(errno)));
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  int fd_;
  std::string name_;
};

// Writes the whole file to `sink`: metadata, zero gap, then the tensors in planned order.
absl::Status Emit(const ModelSpec& spec, const WriteOptions& options, Sink* sink) {
  Planner planner(spec, options);
  FFLITE_RETURN_IF_ERROR(planner.Build());
  flatbuffers::FlatBufferBuilder& fbb = planner.fbb();
  std::vector<uint8_t> meta(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  // Aligned experts are aligned in the file too (direct reads need file offsets on pages).
  const uint64_t data_offset =
      AlignUp(meta.size(), std::max(options.data_alignment, planner.max_alignment()));
  // Patch the placeholder data_offset in place (the buffer is ours, the layout fixed).
  schema::Model* root = flatbuffers::GetMutableSizePrefixedRoot<schema::Model>(meta.data());
  if (!root->mutate_data_offset(data_offset)) return absl::InternalError("data_offset not stored");
  FFLITE_RETURN_IF_ERROR(sink->Write(meta.data(), meta.size()));
  FFLITE_RETURN_IF_ERROR(sink->Zeros(data_offset - meta.size()));

  uint64_t written = 0;
  std::vector<uint8_t> source, stored, f32;
  for (const PlannedTensor& t : planner.tensors()) {
    FFLITE_RETURN_IF_ERROR(sink->Zeros(t.offset - written));
    written = t.offset;
    const TensorSource& src = *t.source;
    const bool value_rows = t.layout == Layout::VALUE_ROWS;
    if (src.dtype == t.dtype && src.shape == t.stored_shape && !value_rows) {
      // Stored as produced: no second buffer, so peak memory is one tensor.
      stored.resize(t.size);
      FFLITE_RETURN_IF_ERROR(src.fill(stored.data(), stored.size()));
      FFLITE_RETURN_IF_ERROR(sink->Write(stored.data(), stored.size()));
      written += t.size;
      if (options.progress) options.progress(written, planner.data_size());
      continue;
    }
    if (FindDType(src.dtype)->quantized) {
      // Quantised already: its panels for the logical shape, re-laid for the padded one.
      source.assign(TensorBytes(src.dtype, src.shape, t.layout), 0);
      FFLITE_RETURN_IF_ERROR(src.fill(source.data(), source.size()));
      stored.assign(t.size, 0);
      RepadQuantMatrix(src.dtype, src.shape[0], src.shape[1], source.data(), t.stored_shape[0],
                       t.stored_shape[1], stored.data());
      FFLITE_RETURN_IF_ERROR(sink->Write(stored.data(), stored.size()));
      written += t.size;
      if (options.progress) options.progress(written, planner.data_size());
      continue;
    }
    const uint64_t n = Numel(src.shape);
    source.assign(n * DTypeSize(src.dtype), 0);
    FFLITE_RETURN_IF_ERROR(src.fill(source.data(), source.size()));
    // Convert and pad: the logical block goes to the top-left of the stored shape; the rest is 0.
    // A quantised matrix is converted to f32 first, then quantised as a whole.
    const bool quantize = FindDType(t.dtype)->quantized;
    const DType converted = quantize ? DType::F32 : t.dtype;
    const size_t in_elem = DTypeSize(src.dtype), out_elem = DTypeSize(converted);
    std::vector<uint8_t>& padded = quantize ? f32 : stored;
    padded.assign(quantize ? Numel(t.stored_shape) * sizeof(float) : t.size, 0);
    const uint64_t rows = src.shape.size() == 2 ? src.shape[0] : 1;
    const uint64_t cols = src.shape.empty() ? 1 : src.shape.back();
    const uint64_t stored_cols = t.stored_shape.empty() ? 1 : t.stored_shape.back();
    for (uint64_t r = 0; r < rows; ++r) {
      ConvertElements(src.dtype, source.data() + r * cols * in_elem, converted,
                      padded.data() + r * stored_cols * out_elem, cols);
    }
    if (value_rows) {
      // [rows, stored_cols] -> [stored_cols, rows]: element (r, c) to c · rows + r.
      source.assign(stored.size(), 0);
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t c = 0; c < stored_cols; ++c) {
          std::memcpy(source.data() + (c * rows + r) * out_elem,
                      stored.data() + (r * stored_cols + c) * out_elem, out_elem);
        }
      }
      stored.swap(source);
    }
    if (quantize) {
      QuantizeOptions qo = options.quantize;
      qo.rotate = t.layout == Layout::PANEL16_K4_HADAMARD32;
      std::vector<float> importance;
      if (options.importance && IsKQuant(t.dtype)) {
        importance = options.importance(t.path, t.stored_shape[1]);
      }
      qo.importance = importance.empty() ? nullptr : importance.data();
      stored.assign(t.size, 0);
      QuantStats stats;
      FFLITE_RETURN_IF_ERROR(QuantizeMatrix(t.dtype, t.stored_shape[0], t.stored_shape[1],
                                            reinterpret_cast<const float*>(f32.data()), qo,
                                            t.path, stored.data(), &stats));
      if (options.quantized) options.quantized(t.path, t.dtype, stats);
    }
    FFLITE_RETURN_IF_ERROR(sink->Write(stored.data(), stored.size()));
    written += t.size;
    if (options.progress) options.progress(written, planner.data_size());
  }
  return sink->Zeros(planner.data_size() - written);
}

absl::Status AsSpecError(const absl::Status& st) {
  return absl::InvalidArgumentError(
      absl::StrCat("the model spec does not make a valid model: ", st.message()));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Removes "<path>.tmp-<pid>-..." files left by writers of `path` that were killed between
// linking their temporary file and renaming it (or, without O_TMPFILE, while writing it): their
// process is gone. Files of live processes, this one included, are left alone.
void RemoveStaleTemporaries(const std::string& path) {
  const std::string dir = DirName(path);
  const size_t slash = path.rfind('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp-";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || end == nullptr || *end != '-' || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      ::unlink((dir + "/" + name).c_str());
    }
  }
  ::closedir(d);
}

}  // namespace

bool IsKQuant(DType dtype) {
  const DTypeInfo* info = FindDType(dtype);
  return info != nullptr && info->quantized && QuantHasSuperBlocks(info->quant_type);
}

DType KQuantFallback(DType dtype, const std::vector<uint64_t>& stored) {
  if (!IsKQuant(dtype) || (stored.size() == 2 && stored[1] % 256 == 0)) return dtype;
  // The block-of-32 type nearest in bits: i4 for q3_k and q4_k, i8 for q5_k and q6_k.
  return DTypeBitsPerWeight(dtype) < 5 ? DType::I4 : DType::I8;
}

absl::Status CheckExpertAlignment(uint64_t a) {
  if (a == 0 || (a >= kTensorAlignment && a <= kMaxExpertAlignment && (a & (a - 1)) == 0)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "expert_alignment: %d must be 0 (none) or a power of two in [%d, %d], e.g. 4096 (pages)",
      a, kTensorAlignment, kMaxExpertAlignment));
}

TensorSource TensorFromF32(std::vector<uint64_t> shape, std::vector<float> values) {
  TensorSource t;
  t.dtype = DType::F32;
  t.shape = std::move(shape);
  auto owned = std::make_shared<std::vector<float>>(std::move(values));
  t.fill = [owned](uint8_t* dst, uint64_t bytes) -> absl::Status {
    if (bytes != owned->size() * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor holds %d values, its shape needs %d", owned->size(), bytes / sizeof(float)));
    }
    std::memcpy(dst, owned->data(), bytes);
    return absl::OkStatus();
  };
  return t;
}

TensorSource TensorFromBytes(DType dtype, std::vector<uint64_t> shape, const void* data) {
  TensorSource t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.fill = [data](uint8_t* dst, uint64_t bytes) -> absl::Status {
    std::memcpy(dst, data, bytes);
    return absl::OkStatus();
  };
  return t;
}

void ConvertElements(DType from, const uint8_t* src, DType to, uint8_t* dst, uint64_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * DTypeSize(from));
    return;
  }
  const size_t in = DTypeSize(from), out = DTypeSize(to);
  for (uint64_t i = 0; i < count; ++i) StoreF32As(to, LoadAsF32(from, src + i * in), dst + i * out);
}

absl::StatusOr<std::vector<uint8_t>> WriteModelBuffer(const ModelSpec& spec,
                                                      const WriteOptions& options) {
  VectorSink sink;
  FFLITE_RETURN_IF_ERROR(Emit(spec, options, &sink));
  absl::StatusOr<std::unique_ptr<Model>> check = Model::LoadBuffer(sink.bytes.data(), sink.bytes.size());
  if (!check.ok()) return AsSpecError(check.status());
  return std::move(sink.bytes);
}

absl::Status WriteModelFile(const ModelSpec& spec, const WriteOptions& options,
                            const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const std::string dir = DirName(path);
  RemoveStaleTemporaries(path);
  // An unnamed file vanishes by itself if we fail or are killed before linking it in place.
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  std::string named_tmp;  // set when O_TMPFILE is unavailable and we use a named temporary
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    named_tmp = absl::StrFormat("%s.tmp-%d-XXXXXX", path, ::getpid());
    fd = ::mkstemp(named_tmp.data());
    if (fd >= 0) ::fchmod(fd, 0644);
  }
  if (fd < 0) {
    return absl::UnavailableError(absl::StrFormat("cannot create a temporary file in '%s': %s",
                                                  dir, std::strerror(errno)));
  }
  auto fail = [&](absl::Status st) {
    ::close(fd);
    if (!named_tmp.empty()) ::unlink(named_tmp.c_str());
    return st;
  };
  FdSink sink(fd, path);
  absl::Status st = Emit(spec, options, &sink);
  if (!st.ok()) return fail(st);
  if (::fsync(fd) != 0) {
    return fail(absl::UnavailableError(absl::StrFormat("syncing '%s': %s", path, std::strerror(errno))));
  }
  // Check the result with the loader before it replaces anything.
  const std::string self = absl::StrFormat("/proc/self/fd/%d", fd);
  {
    absl::StatusOr<std::unique_ptr<Model>> check = Model::LoadFile(named_tmp.empty() ? self : named_tmp);
    if (!check.ok()) return fail(AsSpecError(check.status()));
  }
  if (named_tmp.empty()) {
    named_tmp = absl::StrFormat("%s.tmp-%d-%d", path, ::getpid(), counter.fetch_add(1));
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, named_tmp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      const int err = errno;
      named_tmp.clear();
      return fail(absl::UnavailableError(
          absl::StrFormat("linking the temporary file for '%s': %s", path, std::strerror(err))));
    }
  }
  if (::rename(named_tmp.c_str(), path.c_str()) != 0) {
    return fail(absl::UnavailableError(
        absl::StrFormat("renaming into '%s': %s", path, std::strerror(errno))));
  }
  ::close(fd);
  return absl::OkStatus();
}

}  // namespace fflite
