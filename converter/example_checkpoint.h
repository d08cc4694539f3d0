// Generates a small Hugging Face style checkpoint (config.json + safetensors, optionally sharded)
// with deterministic random weights: a Llama-style dense model or a Mixtral-style MoE model.
#ifndef FFLITE_CONVERTER_EXAMPLE_CHECKPOINT_H_
#define FFLITE_CONVERTER_EXAMPLE_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace fflite {
namespace converter {

struct ExampleOptions {
  std::string arch = "llama";  // "llama" or "mixtral"
  uint32_t layers = 4;
  uint32_t hidden_size = 64;
  uint32_t intermediate_size = 176;
  uint32_t experts = 8;  // mixtral only
  uint32_t top_k = 2;    // mixtral only
  uint32_t vocab_size = 256;
  std::string dtype = "F32";  // "F32", "F16" or "BF16"
  uint32_t shards = 1;        // > 1: model-0000i-of-0000n.safetensors + index
  uint64_t seed = 1;
};

// Writes config.json and the weights into `dir` (created with its parents if missing; existing files of the same
// names are replaced). Tensors are generated and written one at a time, so memory stays at one
// tensor whatever the size. Errors: InvalidArgument for bad options, Unavailable for I/O.
absl::Status MakeExampleCheckpoint(const std::string& dir, const ExampleOptions& options);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_EXAMPLE_CHECKPOINT_H_
