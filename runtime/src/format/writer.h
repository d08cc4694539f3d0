// Builds a model file from in-memory (or lazily produced) tensors and writes it atomically.
// Tensors are produced one at a time while writing, so a model larger than memory can be written
// by a converter whose tensors read from mapped checkpoints.
#ifndef FFLITE_RUNTIME_SRC_FORMAT_WRITER_H_
#define FFLITE_RUNTIME_SRC_FORMAT_WRITER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "format/model.h"
#include "format/quantize.h"

namespace fflite {

// A tensor in its logical (unpadded) shape. `fill` writes product(shape) elements of `dtype`
// into `dst` (exactly `bytes` bytes); it is called once, while the file is written. A quantised
// dtype (I8, I4: a weight matrix quantised already, e.g. a GGUF Q8_0 / Q4_0 tensor) fills the
// panel layout of its logical [rows, k] shape (format/quant_layout.h, PANEL16_K4); the writer
// stores it as it is, re-laid for the padded d_ff, and never converts or quantises it again.
struct TensorSource {
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;
  std::function<absl::Status(uint8_t* dst, uint64_t bytes)> fill;
  bool present() const { return static_cast<bool>(fill); }
};

// A tensor that owns its f32 values.
TensorSource TensorFromF32(std::vector<uint64_t> shape, std::vector<float> values);
// A tensor over a caller's bytes, which must stay valid until the write returns.
TensorSource TensorFromBytes(DType dtype, std::vector<uint64_t> shape, const void* data);

// Logical shapes: up, gate [d_ff, d_model]; down [d_model, d_ff]; up_bias, gate_bias [d_ff];
// down_bias [d_model]. The writer pads d_ff with zeros to WriteOptions::d_ff_alignment.
struct FfnSpec {
  Activation activation = Activation::INVALID;
  bool gated = false;
  uint32_t d_ff = 0;
  TensorSource up, gate, down, up_bias, gate_bias, down_bias;
};

struct MoeSpec {
  uint32_t top_k = 0;
  Scoring scoring = Scoring::SOFTMAX;
  bool normalize_top_k = false;
  float routed_scaling_factor = 1.0f;
  TensorSource router;                 // [num_experts, d_model]
  TensorSource router_bias;            // [num_experts], optional
  TensorSource score_correction_bias;  // [num_experts], optional
  uint32_t n_group = 1;
  uint32_t topk_group = 1;
  GroupScoring group_scoring = GroupScoring::HIGHEST;
  std::vector<FfnSpec> experts;         // num_experts = experts.size()
  std::vector<FfnSpec> shared_experts;  // optional
  TensorSource shared_expert_gate;      // [1, d_model], optional
};

struct NormSpec {
  NormKind kind = NormKind::RMS_NORM;
  NormPlacement placement = NormPlacement::PRE;
  float eps = 1e-5f;
  bool unit_offset = false;
  TensorSource weight;  // [d_model]
  TensorSource bias;    // [d_model], optional (layer_norm only)
};

struct LayerSpec {
  std::string name;
  LayerKind kind = LayerKind::kDense;
  FfnSpec ffn;  // kDense
  MoeSpec moe;  // kMoe
  std::optional<NormSpec> norm;
  // With norm's placement SANDWICH (and only then): the norm of the body's output, before the
  // residual (Gemma 2/3's post-feedforward norm); its placement SANDWICH too.
  std::optional<NormSpec> output_norm;
  bool residual = false;
};

struct ModelSpec {
  uint32_t d_model = 0;
  std::vector<LayerSpec> layers;
  std::vector<std::pair<std::string, std::string>> metadata;
};

// The largest WriteOptions::expert_alignment (1 GiB, a huge page).
inline constexpr uint64_t kMaxExpertAlignment = uint64_t{1} << 30;
// The expert alignment fflite-convert and fflite-bench's synthetic models use for MoE models: a
// page, the unit of direct (O_DIRECT) reads.
inline constexpr uint64_t kExpertPageAlignment = 4096;

struct WriteOptions {
  uint32_t d_ff_alignment = 64;          // d_ff_padded = d_ff rounded up to this (>= 1)
  std::optional<DType> dtype;            // store every tensor as this; default: as given
  // Each routed and shared expert's record (its up, gate and down matrices, quantised ones with
  // their scales inside, then its biases: one after the other at kTensorAlignment) starts at a
  // multiple of this, in the data section and in the file, so that an expert budget reads an
  // expert with one aligned read. A power of two in [kTensorAlignment, kMaxExpertAlignment], or
  // 0 (as kTensorAlignment): no padding between experts. Models without MoE layers are unchanged.
  uint64_t expert_alignment = 0;
  // Start each expert at a multiple of data_alignment: expert_alignment = data_alignment (the
  // larger of the two when both are given).
  bool page_align_experts = false;
  // The data section starts at a multiple of this (or of the experts' alignment, when larger):
  // a power of two >= kTensorAlignment. Smaller values make compact files (fuzzer seeds, models
  // kept in flash) at the price of weight pages that cannot be released on their own.
  uint64_t data_alignment = kDataAlignment;
  // Called after each tensor is written with (bytes written, total bytes of the data section).
  std::function<void(uint64_t, uint64_t)> progress;
  // Stored dtype of each FFN weight matrix (up, gate and down of dense layers, routed and shared
  // experts), given its path ("layers[3].ffn.down", "layers[1].moe.experts[5].up") and the dtype
  // it would have otherwise (`dtype`, or as given). Unset: that dtype. A quantised result (I8, I4)
  // makes the writer quantise the matrix (QuantizeMatrix with `quantize`); every other tensor
  // (routers, norms, biases, the shared-expert gate) keeps a float dtype.
  // A k-quant (Q3_K, Q4_K, Q5_K, Q6_K) on a matrix whose stored in_features is not a multiple of
  // 256 falls back as KQuantFallback says; k-quant matrices are never rotated.
  std::function<DType(const std::string& path, DType stored)> matrix_dtype;
  QuantizeOptions quantize;
  // For each matrix quantised to a k-quant: the importance of its k stored columns (path, k; see
  // QuantizeOptions::importance), or an empty vector for none. Unset: none.
  std::function<std::vector<float>(const std::string& path, uint64_t k)> importance;
  // Whether the down matrix of the FFN at `ffn_path` ("layers[3].ffn",
  // "layers[1].moe.experts[5]") is stored as value rows (Layout::VALUE_ROWS: transposed, one
  // contiguous row per neuron, for sparse decode). Float dtypes only: a down matrix quantised
  // through matrix_dtype keeps its panel layout. Unset: none.
  std::function<bool(const std::string& ffn_path, const FfnSpec& ffn)> down_value_rows;
  // Called after each quantised matrix is written, with its path, dtype and error statistics.
  std::function<void(const std::string& path, DType dtype, const QuantStats& stats)> quantized;
};

// Q4_K, Q5_K or Q6_K.
bool IsKQuant(DType dtype);
// The dtype a weight matrix of stored shape [rows, k] is quantised to when `dtype` is asked: a
// k-quant needs whole super-blocks of 256 along k, so on another k Q3_K and Q4_K fall back to I4
// and Q5_K and Q6_K to I8 (as GGUF's quantisers fall back to a type with blocks of 32); any
// other dtype, or a k that fits, keeps `dtype`.
DType KQuantFallback(DType dtype, const std::vector<uint64_t>& stored);

// Writes `spec` to `path` atomically: into an unnamed temporary file in the same folder, which is
// then linked in place of `path` by rename, so a failure or a crash leaves any existing file
// untouched and no partial file behind. Errors: InvalidArgument for a spec that is not a valid
// model (the message names the layer and tensor), the fill's own errors, I/O errors by errno.
absl::Status WriteModelFile(const ModelSpec& spec, const WriteOptions& options,
                            const std::string& path);
// The same bytes, in memory (for tests and for loading from a buffer).
absl::StatusOr<std::vector<uint8_t>> WriteModelBuffer(const ModelSpec& spec,
                                                      const WriteOptions& options);

// OK for a WriteOptions::expert_alignment the writer takes; InvalidArgument naming it otherwise.
absl::Status CheckExpertAlignment(uint64_t expert_alignment);

// Element conversion used by the writer (and tests): `count` elements from `src` of `from` to
// `dst` of `to`. Rounds to nearest even when narrowing.
void ConvertElements(DType from, const uint8_t* src, DType to, uint8_t* dst, uint64_t count);

}  // namespace fflite

#endif  // FFLITE_RUNTIME_SRC_FORMAT_WRITER_H_
