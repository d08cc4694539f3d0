// GGUF files -> fflite layers: the architecture from general.architecture, dimensions from its
// keys, and each FFN / MoE sublayer from llama.cpp's tensor names (blk.N.ffn_up, ffn_gate_exps,
// ffn_gate_inp, ffn_up_shexp, ...), with the same layer semantics as the safetensors mappings.
//
// Weights keep their bits where fflite has their type (gguf_relay.h: F32, F16 and BF16 as they
// are; Q4_0 as i4; the k-quants, IQ4_XS and IQ4_NL at GGUF's sizes; Q8_0 and Q5_0 as i8 and
// MXFP4 as mxfp4 where their scales fit), re-laid into fflite's panels, never quantised again;
// the other types are dequantised exactly as the specification defines and stored as f32. With
// GgufPlanOptions::native false every tensor is read as its exact values, and --dtype and
// --quantize then convert as from a checkpoint.
#ifndef FFLITE_CONVERTER_GGUF_CONVERT_H_
#define FFLITE_CONVERTER_GGUF_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "converter/arch/arch.h"
#include "converter/gguf.h"

namespace fflite {
namespace converter {

struct GgufPlanOptions {
  // true: Q8_0 / Q4_0 weight matrices stay quantised (I8 / I4) and F16 / BF16 stay as they are;
  // false: every quantised tensor is dequantised to f32 (for --dtype / --quantize).
  bool native = true;
  bool include_norm = true;
};

// The GGUF architectures this converter maps, in the order it lists them.
std::string GgufArchitectures();

// What fflite-inspect prints for a GGUF file: version, architecture, the FFN sublayers a
// conversion would write (or why it would not), and per ggml type of the FFN weight matrices
// their count, bytes and how fflite-convert stores them (bits kept as i4 / i8, as is, or
// dequantised exactly to f32).
std::string DescribeGguf(std::shared_ptr<const GgufFile> file);

// Plans the FFN / MoE sublayers of `file` (kept alive by the plan's build functions).
// Errors: Unimplemented for an architecture, type or feature fflite cannot express (naming it),
// InvalidArgument for a missing or contradictory key or tensor shape (naming it).
absl::StatusOr<ArchPlan> PlanGguf(std::shared_ptr<const GgufFile> file,
                                  const GgufPlanOptions& options, std::string* architecture);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_GGUF_CONVERT_H_
