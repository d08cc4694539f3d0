// What a model file holds, for fflite-inspect: per-layer shapes, dtypes, bytes and parameters,
// and per-token costs at decode time (bytes streamed, FLOPs), as a table or as JSON.
#ifndef FFLITE_CONVERTER_INSPECT_H_
#define FFLITE_CONVERTER_INSPECT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/model.h"

namespace fflite {
namespace converter {

struct LayerSummary {
  size_t index = 0;
  std::string name;
  std::string kind;        // "dense" or "moe"
  std::string activation;  // "silu", "gelu_tanh", ... (see `gated`)
  bool gated = false;
  uint32_t d_model = 0, d_ff = 0, d_ff_padded = 0;  // of the FFN, or of each expert
  uint32_t experts = 0, top_k = 0, shared_experts = 0;
  uint32_t shared_d_ff = 0;
  std::string dtype;       // of the weight matrices
  std::string norm;        // "rms_norm pre", "layer_norm post", "none"
  bool residual = false;
  uint64_t parameters = 0;       // logical (unpadded) weights, biases, router, norm
  uint64_t bytes = 0;            // stored (padded) bytes of every tensor of the layer
  uint64_t bytes_per_token = 0;  // bytes read to decode one token (top-k experts only)
  uint64_t flops_per_token = 0;  // 2 per multiply-accumulate, logical sizes, top-k experts
  // MoE: the routed experts' records, what an expert budget reads per miss. record_bytes: from an
  // expert's first tensor to the end of its last (the largest over the layer's experts); stride:
  // from one expert's start to the next's (0: one expert, or uneven); alignment: the largest
  // power of two (at most 1 GiB) dividing every expert's start in the file.
  uint64_t expert_record_bytes = 0;
  uint64_t expert_stride = 0;
  uint64_t expert_alignment = 0;
  // Every record starts on a 4 KiB page (an expert is then one direct read of its own pages).
  bool expert_records_page_aligned() const { return expert_alignment >= 4096; }
};

struct ModelSummary {
  std::string path;
  uint64_t file_size = 0;
  uint32_t version_major = 0, version_minor = 0;
  uint32_t d_model = 0;
  std::vector<LayerSummary> layers;
  uint64_t parameters = 0, bytes = 0, bytes_per_token = 0, flops_per_token = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
};

ModelSummary Summarize(const Model& model, const std::string& path);
// A human-readable table, the MoE layers' expert records, totals, and the metadata (source
// architecture, converter options).
std::string FormatSummaryTable(const ModelSummary& summary);
// The same as one JSON object (stable keys, for tools).
std::string FormatSummaryJson(const ModelSummary& summary);

}  // namespace converter
}  // namespace fflite

#endif  // FFLITE_CONVERTER_INSPECT_H_
