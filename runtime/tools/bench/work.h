// fflite-bench: the work of one call of a model (every layer once): weight bytes read at decode,
// FLOPs per token, what packed weights take. The rooflines' numerators.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_WORK_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_WORK_H_

#include "format/model.h"

namespace fflite {
namespace bench {

// Work per call, over every layer: bytes of weights read at decode (f32 as packed, f16/bf16 dense
// layers as stored in the file, which the direct kernel reads; for MoE the bytes actually needed:
// the router and shared experts as packed (f32), top_k routed experts as stored in the file) and
// FLOPs per token; and what the packed weights take.
struct Work {
  double weight_bytes = 0.0;
  double flops_per_token = 0.0;
  double routed_flops_per_token = 0.0;  // MoE: the top_k routed experts' share
  double expert_bytes = 0.0;      // every routed expert, packed (what a budget limits)
  double non_expert_bytes = 0.0;  // everything else, f32: dense layers, routers, shared experts
  bool moe = false;
  bool quantized = false;  // some weight matrix is I8/I4
  bool has_i8 = false, has_i4 = false;
  bool reads_file = false;  // some weights are read from the mapping (quantised, f16/bf16 dense)
  double value_rows_bytes = 0.0;  // of weight_bytes: dense down matrices stored as value rows
  double reglu_up_bytes = 0.0;    // of weight_bytes: up matrices of dense ReGLU FFNs (float)
};

Work CountWork(const Model& model);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_WORK_H_
