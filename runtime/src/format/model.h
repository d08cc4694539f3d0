// The loaded, validated, immutable model: plain views over the file's metadata and weights.
// Everything structural here was checked by the loader (no view reaches outside the file), so
// backends read it without further checks; the one check of weight values, that a quantised
// matrix's scales are finite, is made on the matrix's first use (Model::CheckScales), so that
// loading reads only the metadata.
#ifndef FFLITE_RUNTIME_SRC_FORMAT_MODEL_H_
#define FFLITE_RUNTIME_SRC_FORMAT_MODEL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/shared_forms.h"
#include "fflite/schema/fflite_generated.h"
#include "format/dtype.h"

namespace fflite {

class MappedFile;

// The schema's enums are the runtime's enums: one definition, in schemas/fflite.fbs.
using Activation = schema::Activation;
using NormKind = schema::NormKind;
using NormPlacement = schema::NormPlacement;
using Scoring = schema::Scoring;
using GroupScoring = schema::GroupScoring;

// Format version this build writes; it reads every file with the same major version.
inline constexpr uint32_t kFormatVersionMajor = 1;
// 1.1: quantised dtypes I8/I4 and Tensor.layout. 1.2: Layout::VALUE_ROWS for down matrices.
// 1.3: Activation::SWIGLU_OAI (gpt-oss). 1.4: DType::Q4_K, Q5_K and Q6_K (GGUF's, their bits
// in panels). 1.5: NormPlacement::SANDWICH and Layer.output_norm (Gemma 2/3's norm on the FFN's
// output; older readers refuse the placement by value). 1.6: DType::Q6_K_PACKED and Q5_K_PACKED
// (GGUF's Q6_K and Q5_K at their sizes; older readers refuse the dtypes by value). 1.7:
// DType::IQ4_XS and IQ4_NL (GGUF's IQ4_XS and IQ4_NL at their sizes). 1.8: DType::Q3_K_PACKED
// (GGUF's Q3_K at its size). 1.9: DType::Q2_K_PACKED (GGUF's Q2_K at its size). 1.10:
// DType::MXFP4 (MXFP4's codes, i8's scales). 1.11: DType::Q2_K_PACKED at GGUF's 2.625 bits per
// weight (each scale byte GGUF's: its scale and its min); 1.9 and 1.10's q2_k (the mins in bytes
// of their own, 2.875) is refused by name, and older readers refuse 1.11's by its size. 1.12:
// DType::MXFP4 at GGUF's 4.25 bits per weight (each scale its E8M0 byte); 1.10 and 1.11's mxfp4
// (an f16 scale, 4.5) is refused by name, and older readers refuse 1.12's by its size. 1.13:
// DType::Q3_K_PACKED at GGUF's 3.4375 bits per weight (its 6-bit scale codes packed, 12 bytes per
// 16); 1.8 to 1.12's q3_k (a byte per code, 3.5625) is refused by name, and older readers refuse
// 1.13's by its size.
inline constexpr uint32_t kFormatVersionMinor = 13;
// Writers start the data section at a multiple of this (the largest page size in use, 64 KiB on
// some arm64 kernels), so that its pages can be mapped and released on their own. Readers accept
// any multiple of kTensorAlignment.
inline constexpr uint64_t kDataAlignment = 65536;
// Every tensor starts at a multiple of this inside the data section (a cache line; SIMD loads).
inline constexpr uint64_t kTensorAlignment = 64;

// Bytes per element of a float dtype (f32 4, f16/bf16 2); 0 for quantised and unknown dtypes,
// which have no bytes-per-element (see the dtype table, format/dtype.h).
size_t DTypeSize(DType dtype);
const char* ActivationName(Activation activation);

enum class LayerKind { kDense = 1, kMoe = 2 };

// quant_id of a tensor that is not a quantised matrix of a loaded model.
inline constexpr uint32_t kNoQuantId = std::numeric_limits<uint32_t>::max();

struct TensorView {
  DType dtype = DType::INVALID;
  // A quantised matrix of a loaded model: its index in the model's table of quantised matrices
  // (their paths and whether their scales were checked: Model::CheckScales); else kNoQuantId.
  // (In the padding after dtype: the view stays 64 bytes.)
  uint32_t quant_id = kNoQuantId;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;             // in the data section
  uint64_t size = 0;               // bytes
  // Quantised dtypes: a panel layout (format/quant_layout.h); a float down matrix may be
  // VALUE_ROWS (stored transposed: data holds [shape[1]][shape[0]]).
  Layout layout = Layout::ROW_MAJOR;
  const uint8_t* data = nullptr;   // nullptr: the optional tensor is absent
  bool present() const { return data != nullptr; }
  bool quantized() const {
    const DTypeInfo* info = FindDType(dtype);
    return info != nullptr && info->quantized;
  }
  bool value_rows() const { return layout == Layout::VALUE_ROWS; }
  uint64_t numel() const {  // 0 for an absent tensor
    if (!present()) return 0;
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
  }
};

// The tensor as a row-major view: itself unless it is VALUE_ROWS, else its transpose copied
// into `storage` (which the view then points into). Float dtypes.
inline TensorView RowMajorView(const TensorView& t, std::vector<uint8_t>* storage) {
  if (!t.value_rows()) return t;
  TensorView v = t;
  storage->resize(t.size);
  // Stored [shape[1], shape[0]]: transposed back to [shape[0], shape[1]].
  TransposeElements(t.data, t.shape[1], t.shape[0], DTypeSize(t.dtype), storage->data());
  v.data = storage->data();
  v.layout = Layout::ROW_MAJOR;
  return v;
}

// up, gate: [d_ff_padded, d_model]; down: [d_model, d_ff_padded]; biases [d_ff_padded] / [d_model].
struct FfnView {
  Activation activation = Activation::INVALID;
  bool gated = false;
  uint32_t d_model = 0;
  uint32_t d_ff = 0;
  uint32_t d_ff_padded = 0;
  TensorView up, gate, down, up_bias, gate_bias, down_bias;

  // Whether any / every weight matrix (up, gate when gated, down) is quantised (I8/I4).
  bool AnyQuantized() const { return up.quantized() || gate.quantized() || down.quantized(); }
  bool AllQuantized() const {
    return up.quantized() && down.quantized() && (!gated || gate.quantized());
  }
  // Bits per weight of the weight matrices as stored (scales and padding included; 32 for f32).
  double BitsPerWeight() const {
    double bits = 0.0, weights = 0.0;
    for (const TensorView* t : {&up, &gate, &down}) {
      if (!t->present()) continue;
      bits += 8.0 * static_cast<double>(t->size);
      weights += static_cast<double>(t->numel());
    }
    return weights > 0.0 ? bits / weights : 0.0;
  }
};

struct MoeView {
  uint32_t num_experts = 0;
  uint32_t top_k = 0;
  Scoring scoring = Scoring::INVALID;
  bool normalize_top_k = false;
  float routed_scaling_factor = 1.0f;
  TensorView router;                 // [num_experts, d_model]
  TensorView router_bias;            // [num_experts], optional
  TensorView score_correction_bias;  // [num_experts], optional
  uint32_t n_group = 1;
  uint32_t topk_group = 1;
  GroupScoring group_scoring = GroupScoring::HIGHEST;
  std::vector<FfnView> experts;         // num_experts, one shape
  std::vector<FfnView> shared_experts;  // always on
  TensorView shared_expert_gate;        // [1, d_model], optional
};

struct NormView {
  bool present = false;
  NormKind kind = NormKind::INVALID;
  NormPlacement placement = NormPlacement::INVALID;
  float eps = 0.0f;
  bool unit_offset = false;
  TensorView weight;  // [d_model]
  TensorView bias;    // [d_model], optional
};

struct LayerView {
  std::string name;
  LayerKind kind = LayerKind::kDense;
  FfnView ffn;  // kDense
  MoeView moe;  // kMoe
  NormView norm;
  // With norm.placement SANDWICH: the norm of the body's output, before the residual.
  NormView output_norm;
  bool residual = false;
};

// Bytes of every tensor of `layer` in the file: its FFN or its router, experts and shared experts,
// their biases, its norms.
uint64_t LayerBytes(const LayerView& layer);

// Thread safety: immutable after loading but for the flags of CheckScales (atomics) and the
// shared forms (locked); share it freely across threads and sessions.
class Model {
 public:
  // Maps `path` and validates its metadata, reading no weight byte (see CheckScales). Errors:
  // NotFound/PermissionDenied/Unavailable for I/O, DataLoss for a malformed file (the message
  // names the field, the value and the limit), Unimplemented for a newer format major version
  // or a big-endian host.
  static absl::StatusOr<std::unique_ptr<Model>> LoadFile(const std::string& path);
  // Validates a caller's buffer without copying it: the buffer must outlive the model.
  static absl::StatusOr<std::unique_ptr<Model>> LoadBuffer(const void* data, size_t size);
  ~Model();

  uint32_t d_model() const { return d_model_; }
  uint32_t version_major() const { return version_major_; }
  uint32_t version_minor() const { return version_minor_; }
  const std::vector<LayerView>& layers() const { return layers_; }
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  uint64_t data_size() const { return data_size_; }
  uint64_t file_size() const { return size_; }
  // Scales are data the kernels trust, and checking them reads the whole matrix, so the loader
  // leaves it to the matrix's first use: a backend calls this before it first reads a quantised
  // matrix's bytes (a first run, a packing, an upload, an expert read into a slot). Checks that
  // every block scale of `t` (one of this model's views, or a copy of one) is finite, reading
  // `bytes` when given (a copy of the tensor's t.size bytes, e.g. an expert's slot) or else
  // t.data. The first success is remembered per matrix, so later calls return at once (one
  // atomic load) whichever copy they name; a failure is not, so every call that needs the matrix
  // fails alike. OK at once for a tensor that is not quantised. Thread-safe: sessions on several
  // threads may check one matrix at once (each scans it; no lock is held). Errors: DataLoss
  // naming the matrix, row and block ("layers[0].ffn.up: the scale of row 3, block 0 (columns
  // [0, 32)) is not finite"), which the C API returns as FFLITE_STATUS_INVALID_MODEL.
  absl::Status CheckScales(const TensorView& t, const uint8_t* bytes = nullptr) const;
  // CheckScales of f's up, gate and down matrices.
  absl::Status CheckFfnScales(const FfnView& f) const;
  // CheckScales of every quantised matrix of the model (backends that upload every weight at
  // session creation).
  absl::Status CheckAllScales() const;
  // Hands the pages of a tensor back to the kernel when the model is file-backed (after a backend
  // has copied the weights); a no-op for caller buffers. The data stays readable.
  void ReleaseTensorPages(const TensorView& tensor) const;
  // Maps a tensor's pages in at once when the model is file-backed (before reading all of it
  // directly); a no-op for caller buffers.
  void PopulateTensorPages(const TensorView& tensor) const;
  // Whether the model was loaded from a file (LoadFile), which ReadFileRange can read.
  bool file_backed() const { return file_ != nullptr; }
  // A tensor's first byte as a file offset.
  uint64_t FileOffset(const TensorView& tensor) const { return data_offset_ + tensor.offset; }
  // Reads [offset, offset + size) of the file with explicit reads (base/mapped_file.h: ReadAt),
  // never through the mapping. File-backed models only. Errors: Unavailable (an I/O error or a
  // file truncated since loading), naming the offset.
  absl::Status ReadFileRange(uint64_t offset, size_t size, void* dst, uint64_t* buffered,
                             uint64_t* direct) const;
  // Prepared forms of this model's weights shared by all its sessions (base/shared_forms.h),
  // released with the model (after its last session). Thread-safe.
  SharedForms& shared_forms() const { return *shared_forms_; }

 private:
  Model() = default;
  friend class ModelParser;
  std::unique_ptr<MappedFile> file_;  // null when loaded from a caller's buffer
  std::unique_ptr<SharedForms> shared_forms_ = std::make_unique<SharedForms>();
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t data_size_ = 0;
  uint32_t d_model_ = 0;
  uint32_t version_major_ = 0;
  uint32_t version_minor_ = 0;
  std::vector<LayerView> layers_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  // Per quantised matrix (TensorView::quant_id): its path for CheckScales' message, and whether
  // its scales were found finite.
  std::vector<std::string> quant_paths_;
  std::unique_ptr<std::atomic<bool>[]> scales_checked_;
};

// Exposed for tests: refuses a big-endian host with the message the loader gives.
absl::Status CheckHostByteOrder(bool host_is_little_endian);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_MODEL_H_
