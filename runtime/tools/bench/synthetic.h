// Built-in synthetic layer shapes for fflite-bench (no checkpoint needed): llama, bert, tiny,
// mixtral-mini, qwen-moe, qwen3-30b-a3b.
#ifndef FFLITE_RUNTIME_TOOLS_BENCH_SYNTHETIC_H_
#define FFLITE_RUNTIME_TOOLS_BENCH_SYNTHETIC_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "format/writer.h"

namespace fflite {
namespace bench {

// llama: d 4096, d_ff 11008, SwiGLU, no bias, pre-RMSNorm + residual, f32 (541 MB).
// bert:  d 768, d_ff 3072, GELU (erf), biases, post-LayerNorm + residual, f32 (19 MB).
// llama-reglu: llama with ReGLU (a ReLU-fied Llama); opt: d 4096, d_ff 16384, ReLU, biases,
//   pre-LayerNorm + residual (an OPT-6.7B FFN); tiny-relu: tiny with ReGLU.
// tiny:  d 64, d_ff 256, SwiGLU, pre-RMSNorm + residual, f32.
// mixtral-mini: MoE, d 1024, 8 SwiGLU experts of d_ff 3584, softmax top-2 renormalised,
//   pre-RMSNorm + residual, f32 (352 MB).
// qwen-moe: MoE, d 2048, 60 SwiGLU experts of d_ff 1408, softmax top-4 (not renormalised), one
//   shared SwiGLU expert of d_ff 5632 behind a sigmoid gate, pre-RMSNorm + residual, f32 (2.2 GB).
// qwen3-30b-a3b: Qwen3-30B-A3B's MoE layers: d 2048, 128 SwiGLU experts of d_ff 768, softmax
//   top-8 renormalised, no shared expert, pre-RMSNorm + residual, 48 layers (a layer: f32 2.4 GB,
//   i4 341 MB, written in about a minute on a Zen 5 core; 48 at i4: 16.4 GB; size the file to the
//   machine with `layers`).
// Every shape but qwen3-30b-a3b has one layer of its own. `layers` (--layers) overrides that
// number; each layer gets weights of its own (layer 0 those of the one-layer shape), so that
// routing differs from layer to layer as in a real model.
// Weights are pseudo-random, uniform in ±1/sqrt(fan_in); produced while the file is written.
// Every name SyntheticSpec takes, as --synthetic's help and its error list them (one list).
#define FFLITE_SYNTHETIC_SHAPES                                                               \
  "llama (one Llama-2-7B FFN: 4096/11008 SwiGLU), llama-70b (one 8192/28672 FFN), "          \
  "llama-reglu (a ReLU-fied llama: ReGLU), opt (an OPT-6.7B FFN: ReLU, biases), bert "       \
  "(768/3072 GELU, post-LayerNorm), tiny, tiny-relu, tiny-moe (64-wide, for smoke tests), "  \
  "mixtral-mini (8 experts, top 2), qwen-moe (60 experts, top 4, a shared expert), "         \
  "qwen3-30b-a3b (48 MoE layers of 128 experts, top 8)"

// Errors: InvalidArgument for an unknown name or `layers` outside [1, kMaxSyntheticLayers].
inline constexpr int64_t kMaxSyntheticLayers = int64_t{1} << 16;  // the loader's limit
absl::StatusOr<ModelSpec> SyntheticSpec(const std::string& name,
                                        std::optional<int64_t> layers = std::nullopt);

// For --sparsity: makes exactly round(fraction · d_ff) neurons of every dense ReLU-family FFN
// silent for every input (pre-activation bias -100: the gate's when gated, else up's) and the
// others fire for all practical inputs (bias +3, against pre-activations of spread ~0.6 on
// normalised inputs). InvalidArgument: fraction outside [0, 1], or no ReLU-family layer.
absl::Status SetSparsity(double fraction, ModelSpec* spec);

// For --routing_skew: skews every MoE layer's routing towards a few experts, as real routing is
// (a few experts take most tokens): router bias -s · ln(rank + 1), each layer ranking its experts
// in an order of its own, so that the experts' shares of the top choice fall about as a Zipf law
// of exponent s (0: as the router alone routes, about uniform). InvalidArgument: s outside
// [0, 4], or no MoE layer.
absl::Status SetRoutingSkew(double s, ModelSpec* spec);

}  // namespace bench
}  // namespace fflite

#endif  // FFLITE_RUNTIME_TOOLS_BENCH_SYNTHETIC_H_
