// The conversion driver: checkpoint folder -> architecture mapping -> selected sublayers ->
// fflite model file, written atomically with the converter's options recorded as metadata.
#ifndef FFLITE_CONVERTER_CONVERT_H_
#define FFLITE_CONVERTER_CONVERT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fflite/fflite_version.h"
#include "format/model.h"
#include "format/quantize.h"
#include "format/writer.h"

namespace fflite {
namespace converter {

// Written into every file it converts (metadata "converter.version"): the project's version.
inline constexpr char kConverterVersion[] = "fflite-convert " FFLITE_VERSION_STRING;

struct ConvertProgress {
  uint64_t tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;  // bytes of the output's data section
};

// A rule of --keep: the FFN weight matrices of role `role` ("up", "gate", "down" or "*") in the
// given output layers (empty: all) are stored as `dtype` instead of being quantised.
struct KeepRule {
  DType dtype = DType::F16;
  std::string role;
  std::vector<size_t> layers;
};

// One quantised matrix and its error against the source (for the converter's report).
struct QuantRecord {
  std::string path;  // "layers[3].ffn.down"
  DType dtype = DType::INVALID;
  QuantStats stats;
};

struct ConvertOptions {
  std::optional<DType> dtype;     // output dtype of every tensor; unset: each tensor's own
  // I8, I4, Q3_K_PACKED, Q4_K, Q5_K(_PACKED) or Q6_K(_PACKED): quantise the FFN weight matrices
  // (up, gate, down of dense layers,
  // routed and shared experts) to this; routers, norms, biases and the shared-expert gate are
  // then stored as `dtype` or, unset, f32. Unset: nothing is quantised. A k-quant rounds
  // d_ff_alignment up to a multiple of 256 (its super-blocks); a matrix whose d_model is not a
  // multiple of 256 falls back to I4 (Q3_K, Q4_K) or I8 (Q5_K, Q6_K): KQuantFallback.
  std::optional<DType> quantize;
  // The mixed k-quant recipes (--dtype q4_k_m, q5_k_m, q3_k_m): with `quantize` Q4_K or
  // Q5_K_PACKED, the down matrices of the first and last eighth of the layers and of every third
  // layer between them are Q6_K_PACKED; with Q3_K_PACKED, every down matrix is Q4_K but those of
  // the first sixteenth of the layers, Q5_K_PACKED: as the llama.cpp recipes of those names
  // choose for FFN matrices.
  bool k_mixed = false;
  // An importance matrix (a safetensors file of f32 vectors, written by fflite-imatrix from a
  // calibration run): with a k-quant, each matrix's squared error is weighted per column by the
  // mean square of the inputs it met. Empty: none.
  std::string imatrix;
  // Rules that keep some matrices at higher precision, "f16:down@0,31;bf16:up" (ParseKeepRules);
  // the first rule that matches a matrix wins. Layers are indices in the output file.
  std::string keep;
  // Scale search (default on) and block rotation (on by default here: it cuts the error on
  // heavy-tailed weights by 4-9x and costs a 32-point transform per block of activations).
  QuantizeOptions quantize_options = {/*search=*/true, /*rotate=*/true};
  uint32_t d_ff_alignment = 64;   // d_ff_padded = d_ff rounded up to this (>= 1)
  std::string layers;             // "" (all) or a selection like "0-3,7" of sublayer indices
  // Each routed and shared expert's tensors form one record starting at a multiple of this many
  // bytes (WriteOptions::expert_alignment: a power of two >= 64, or 0 or 64 for none), so that an
  // expert budget reads an expert with one direct read. Models without MoE layers are unchanged.
  uint64_t expert_alignment = kExpertPageAlignment;
  bool page_align_experts = false;  // expert records at 64 KiB instead (the data alignment)
  // false: leave out the norms *and* the residual add, so each layer is the bare FFN / MoE,
  // y = FFN(x): the caller's engine applies its own norm and residual around it. (A residual
  // without the norm would add the normalised input for pre-norm models, which is wrong.)
  bool include_norm = true;
  // Store the down matrix of ReLU-family FFNs (ReLU, ReGLU: most of their activations are exactly
  // 0) as value rows (Layout::VALUE_ROWS), so that decode reads only the rows of the neurons that
  // fire. Float dtypes only (a quantised down keeps its panels). Other FFNs are unaffected.
  bool value_rows = true;
  std::function<void(const ConvertProgress&)> progress;  // after each tensor written
};

struct ConvertResult {
  std::string model_type;
  size_t sublayers_total = 0;     // FFN/MoE sublayers in the source model
  size_t sublayers_written = 0;   // after --layers
  uint64_t tensors = 0;
  uint64_t data_bytes = 0;
  std::vector<QuantRecord> quantized;  // every quantised matrix, in file order
};

// Parses --keep rules: ';'-separated DTYPE:ROLE[@LAYERS], DTYPE f32|f16|bf16|i8|q4_k|q5_k|q6_k
// (or q5_k_i8|q6_k_i8), ROLE
// up|gate|down|*, LAYERS as for --layers below `layer_count`. InvalidArgument names the bad rule.
absl::StatusOr<std::vector<KeepRule>> ParseKeepRules(const std::string& spec, size_t layer_count);

// Parses a layer selection: comma-separated indices and inclusive ranges ("0-3,7"), each below
// `count`; returns sorted, deduplicated indices. InvalidArgument names the bad part and the limit.
absl::StatusOr<std::vector<size_t>> ParseLayerSelection(const std::string& spec, size_t count);

// Parses an output dtype name: "f32", "f16", "bf16", "i8", "i4", "q4_k", "q5_k", "q6_k" (GGUF's
// sizes: Q5_K_PACKED, Q6_K_PACKED), "q5_k_i8", "q6_k_i8" (a byte per value: Q5_K, Q6_K)
// (InvalidArgument otherwise).
absl::StatusOr<DType> ParseDType(const std::string& name);

// Whether the _M recipe gives layer `layer` of `layers` a Q6_K down matrix: the first and last
// eighth of the layers, and every third layer between them.
bool KMixedMoreBits(size_t layer, size_t layers);

// Converts the checkpoint in `dir` (a Hugging Face folder, or a GGUF file: converter/
// gguf_convert.h) to the model file `output`. Nothing is written at `output`
// unless the whole conversion succeeds (an existing file there is replaced only then).
// Errors: those of Checkpoint::Open, the mapping (NotFound for a missing tensor, InvalidArgument
// for a shape that contradicts config.json, Unimplemented for an unknown model_type, activation
// or dtype), the writer's I/O errors.
absl::StatusOr<ConvertResult> ConvertCheckpoint(const std::string& dir, const std::string& output,
                                                const ConvertOptions& options);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_CONVERT_H_
