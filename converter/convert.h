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
#include "format/model.h"

namespace fflite {
namespace converter {

inline constexpr char kConverterVersion[] = "fflite-convert 0.1.0";

struct ConvertProgress {
  uint64_t tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;  // bytes of the output's data section
};

struct ConvertOptions {
  std::optional<DType> dtype;     // output dtype of every tensor; unset: each tensor's own
  uint32_t d_ff_alignment = 64;   // d_ff_padded = d_ff rounded up to this (>= 1)
  std::string layers;             // "" (all) or a selection like "0-3,7" of sublayer indices
  bool page_align_experts = false;
  // false: leave out the norms *and* the residual add, so each layer is the bare FFN / MoE,
  // y = FFN(x): the caller's engine applies its own norm and residual around it. (A residual
  // without the norm would add the normalised input for pre-norm models, which is wrong.)
  bool include_norm = true;
  std::function<void(const ConvertProgress&)> progress;  // after each tensor written
};

struct ConvertResult {
  std::string model_type;
  size_t sublayers_total = 0;     // FFN/MoE sublayers in the source model
  size_t sublayers_written = 0;   // after --layers
  uint64_t tensors = 0;
  uint64_t data_bytes = 0;
};

// Parses a layer selection: comma-separated indices and inclusive ranges ("0-3,7"), each below
// `count`; returns sorted, deduplicated indices. InvalidArgument names the bad part and the limit.
absl::StatusOr<std::vector<size_t>> ParseLayerSelection(const std::string& spec, size_t count);

// Parses an output dtype name: "f32", "f16", "bf16" (InvalidArgument otherwise).
absl::StatusOr<DType> ParseDType(const std::string& name);

// Converts the checkpoint in `dir` to the model file `output`. Nothing is written at `output`
// unless the whole conversion succeeds (an existing file there is replaced only then).
// Errors: those of Checkpoint::Open, the mapping (NotFound for a missing tensor, InvalidArgument
// for a shape that contradicts config.json, Unimplemented for an unknown model_type, activation
// or dtype), the writer's I/O errors.
absl::StatusOr<ConvertResult> ConvertCheckpoint(const std::string& dir, const std::string& output,
                                                const ConvertOptions& options);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_CONVERT_H_
