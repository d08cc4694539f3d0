// fflite-neurons: the FFN as key-value memory. Runs one layer on tokens from a file and prints,
// per token, how sparse the hidden activations are and which neurons wrote most into the output.
//
// Neuron i of an FFN adds hᵢ·vᵢ to y = down(h) (vᵢ: column i of down, its value vector), so its
// contribution is |hᵢ|·‖vᵢ‖, times the routing weight for a routed expert of an MoE layer. The run
// and the capture of h (and of the routing) go through the public C API; ‖vᵢ‖ needs the weights,
// which only the internal model exposes (format/value_norms.h).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "base/tool_flags.h"
#include "c_api_handles.h"
#include "fflite/fflite.h"
#include "format/model.h"
#include "format/value_norms.h"

ABSL_FLAG(std::string, layer, "", "the layer to run, 0 .. layers - 1 (required)");
ABSL_FLAG(std::string, input, "",
          "the tokens: raw little-endian f32 [n_tokens, d_model] (n_tokens = bytes / (4 d_model)); "
          "required");
ABSL_FLAG(int, top, 10, "neurons listed per token (per routed expert on an MoE layer), >= 1");
ABSL_FLAG(bool, json, false, "print one JSON document instead of text");
ABSL_FLAG(std::string, backend, "auto", "auto, reference, xnnpack or cuda");
ABSL_FLAG(int, threads, 1, "threads of the session, >= 1");

namespace fflite {
namespace neurons {
namespace {

// Tokens per fflite_session_run: the session's max_tokens and the capture buffers' rows. Longer
// inputs run in chunks of this many tokens.
constexpr size_t kMaxChunkTokens = 512;

using tools::CError;
using tools::FileClose;
using tools::ModelFree;
using tools::SessionFree;

struct BackendName {
  const char* name;
  fflite_backend backend;
};
constexpr BackendName kBackends[] = {{"auto", FFLITE_BACKEND_AUTO},
                                     {"reference", FFLITE_BACKEND_REFERENCE},
                                     {"xnnpack", FFLITE_BACKEND_XNNPACK},
                                     {"cuda", FFLITE_BACKEND_CUDA}};

// A JSON string literal (quotes included).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += absl::StrFormat("\\u%04x", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A JSON number; null for NaN and Inf (a NaN input propagates into h), which JSON cannot hold.
std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.9g", v) : std::string("null");
}

struct Neuron {
  uint32_t index = 0;
  float h = 0.0f;
  double norm = 0.0;          // ‖v_i‖
  double contribution = 0.0;  // weight · |h_i| · ‖v_i‖
};

// One FFN's h for one token, summarised: its zeros and its top neurons by contribution.
struct FfnSummary {
  uint32_t zeros = 0;
  std::vector<Neuron> top;  // by contribution, largest first; ties by index
};

// h: [d_ff], norms: [d_ff]; weight: the routing weight (1 for a dense FFN).
FfnSummary Summarise(const float* h, const std::vector<double>& norms, double weight, size_t top) {
  FfnSummary s;
  const size_t d_ff = norms.size();
  std::vector<Neuron> all(d_ff);
  for (size_t i = 0; i < d_ff; ++i) {
    if (h[i] == 0.0f) ++s.zeros;
    all[i].index = static_cast<uint32_t>(i);
    all[i].h = h[i];
    all[i].norm = norms[i];
    all[i].contribution = std::fabs(weight) * std::fabs(static_cast<double>(h[i])) * norms[i];
  }
  // NaN ranks first (largest), so that it shows; the key keeps the order strict and weak.
  auto key = [](double c) { return std::isnan(c) ? HUGE_VAL : c; };
  const size_t n = std::min(top, d_ff);
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                    [&key](const Neuron& a, const Neuron& b) {
                      const double ka = key(a.contribution), kb = key(b.contribution);
                      return ka != kb ? ka > kb : a.index < b.index;
                    });
  all.resize(n);
  s.top = std::move(all);
  return s;
}

void PrintNeuronsText(const FfnSummary& s, const char* indent) {
  for (const Neuron& n : s.top) {
    std::printf("%sneuron %u  h %.6g  |v| %.6g  contribution %.6g\n", indent, n.index,
                static_cast<double>(n.h), n.norm, n.contribution);
  }
}

std::string SparsityText(const FfnSummary& s, size_t d_ff) {
  return absl::StrFormat("sparsity %.4f (%u of %zu h are 0)",
                         static_cast<double>(s.zeros) / static_cast<double>(d_ff), s.zeros, d_ff);
}

std::string NeuronsJson(const FfnSummary& s, size_t d_ff) {
  std::string out = absl::StrFormat("\"sparsity\": %s, \"zeros\": %u, \"neurons\": [",
                                    JsonNumber(static_cast<double>(s.zeros) /
                                               static_cast<double>(d_ff)),
                                    s.zeros);
  for (size_t k = 0; k < s.top.size(); ++k) {
    const Neuron& n = s.top[k];
    out += absl::StrFormat(
        "%s{\"index\": %u, \"h\": %s, \"value_norm\": %s, \"contribution\": %s}", k ? ", " : "",
        n.index, JsonNumber(n.h), JsonNumber(n.norm), JsonNumber(n.contribution));
  }
  return out + "]";
}

// The input file, opened and checked: a regular file of a whole number of tokens.
absl::Status OpenInput(const std::string& path, size_t d_model,
                       std::unique_ptr<std::FILE, FileClose>* file, size_t* n_tokens) {
  if (path.empty()) return absl::InvalidArgumentError("--input FILE.f32 is required");
  file->reset(std::fopen(path.c_str(), "rb"));
  if (*file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--input %s: cannot open: %s", path, std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fileno(file->get()), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--input %s: not a regular file", path));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t token_bytes = 4 * static_cast<uint64_t>(d_model);
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("--input %s: the file is empty", path));
  }
  if (size % token_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--input %s: %d bytes is not a multiple of 4 * d_model = %d bytes (one token of %d f32)",
        path, size, token_bytes, d_model));
  }
  *n_tokens = static_cast<size_t>(size / token_bytes);
  return absl::OkStatus();
}

absl::Status Run(const std::string& model_path) {
  const std::string layer_flag = absl::GetFlag(FLAGS_layer);
  const int top = absl::GetFlag(FLAGS_top);
  const int threads = absl::GetFlag(FLAGS_threads);
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  const bool json = absl::GetFlag(FLAGS_json);
  // Arguments first, so that a bad one is named before any file is read.
  if (top < 1) return absl::InvalidArgumentError(absl::StrFormat("--top %d: must be >= 1", top));
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("--threads %d: must be >= 1", threads));
  }
  int layer = -1;
  if (layer_flag.empty()) return absl::InvalidArgumentError("--layer L is required");
  if (!absl::SimpleAtoi(layer_flag, &layer)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--layer %s: not an integer", layer_flag));
  }
  const BackendName* backend = nullptr;
  for (const BackendName& b : kBackends) {
    if (backend_name == b.name) backend = &b;
  }
  if (backend == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--backend %s: unknown backend (auto, reference, xnnpack, cuda)", backend_name));
  }

  // The model, through the C API for the session, and through the internal loader for the
  // weights (the value norms).
  FFLITE_ASSIGN_OR_RETURN(tools::ToolModel loaded, tools::LoadToolModel(model_path));
  const std::unique_ptr<fflite_model, ModelFree>& model = loaded.api;
  const std::unique_ptr<Model>* internal = &loaded.internal;
  fflite_status st = FFLITE_STATUS_OK;
  int32_t num_layers = 0;
  st = fflite_model_num_layers(model.get(), &num_layers);
  if (st != FFLITE_STATUS_OK) return CError("fflite_model_num_layers", st);
  if (layer < 0 || layer >= num_layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--layer %d: out of range, %s has %d layer%s (0 .. %d)", layer, model_path, num_layers,
        num_layers == 1 ? "" : "s", num_layers - 1));
  }
  fflite_layer_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  st = fflite_model_layer_info(model.get(), layer, &info);
  if (st != FFLITE_STATUS_OK) return CError("fflite_model_layer_info", st);
  const LayerView& view = (*internal)->layers()[static_cast<size_t>(layer)];
  const bool moe = info.kind == FFLITE_LAYER_MOE;
  const size_t d_model = static_cast<size_t>(info.d_model);
  const size_t d_ff = static_cast<size_t>(info.d_ff);
  const size_t top_k = moe ? static_cast<size_t>(info.top_k) : 1;

  std::unique_ptr<std::FILE, FileClose> input;
  size_t n_tokens = 0;
  FFLITE_RETURN_IF_ERROR(OpenInput(absl::GetFlag(FLAGS_input), d_model, &input, &n_tokens));

  fflite_session_options options;
  fflite_session_options_init(&options);
  options.num_threads = threads;
  options.backend = backend->backend;
  const size_t chunk = std::min(n_tokens, kMaxChunkTokens);
  options.max_tokens = static_cast<int32_t>(chunk);
  fflite_session* raw_session = nullptr;
  st = fflite_session_create(model.get(), &options, &raw_session);
  const std::unique_ptr<fflite_session, SessionFree> session(raw_session);
  if (st != FFLITE_STATUS_OK) return CError("--backend " + backend_name, st);

  // The capture: h [chunk, top_k, d_ff] (top_k = 1 for a dense layer); for MoE the routing,
  // experts and weights [chunk, top_k].
  std::vector<float> h(chunk * top_k * d_ff);
  std::vector<int32_t> experts(moe ? chunk * top_k : 0);
  std::vector<float> weights(moe ? chunk * top_k : 0);
  st = fflite_session_set_capture(session.get(), layer, h.data(), h.size(),
                                  moe ? experts.data() : nullptr, moe ? weights.data() : nullptr,
                                  experts.size());
  if (st != FFLITE_STATUS_OK) return CError("fflite_session_set_capture", st);

  // ‖v_i‖ per FFN: the dense FFN's now; a routed expert's the first time a token chooses it.
  std::vector<std::vector<double>> norms(moe ? view.moe.experts.size() : 1);
  std::vector<bool> have_norms(norms.size(), false);
  auto norms_of = [&](size_t e) -> absl::StatusOr<const std::vector<double>*> {
    if (e >= norms.size()) {
      return absl::InternalError(absl::StrFormat("captured expert %d is out of range", e));
    }
    if (!have_norms[e]) {
      const FfnView& ffn = moe ? view.moe.experts[e] : view.ffn;
      FFLITE_RETURN_IF_ERROR((*internal)->CheckScales(ffn.down));  // the loader leaves them
      FFLITE_RETURN_IF_ERROR(ValueNorms(ffn, &norms[e]));
      have_norms[e] = true;
    }
    return &norms[e];
  };

  const std::string backend_ran = fflite_session_backend_name(session.get());
  const FfnView& first_ffn = moe ? view.moe.experts[0] : view.ffn;  // every expert's shape
  const char* activation = ActivationName(first_ffn.activation);
  const char* dtype = DTypeName(first_ffn.up.dtype);
  const char* down_dtype = DTypeName(first_ffn.down.dtype);
  if (json) {
    std::printf("{\"model\": %s, \"layer\": %d, \"kind\": \"%s\", \"d_model\": %zu, "
                "\"d_ff\": %zu, \"activation\": \"%s\", \"gated\": %s, \"dtype\": \"%s\", "
                "\"down_dtype\": \"%s\", ",
                JsonString(model_path).c_str(), layer, moe ? "moe" : "dense", d_model, d_ff,
                activation, info.gated ? "true" : "false", dtype, down_dtype);
    if (moe) {
      std::printf("\"num_experts\": %d, \"top_k\": %d, \"num_shared_experts\": %d, ",
                  info.num_experts, info.top_k, info.num_shared_experts);
    }
    std::printf("\"backend\": %s, \"top\": %d, \"n_tokens\": %zu,\n \"tokens\": [",
                JsonString(backend_ran).c_str(), top, n_tokens);
  } else {
    std::printf("%s layer %d: %s, d_model %zu, d_ff %zu%s, %s%s, %s (down %s)", model_path.c_str(),
                layer, moe ? "moe" : "dense", d_model, d_ff, moe ? " per expert" : "", activation,
                info.gated ? " gated" : "", dtype, down_dtype);
    if (moe) {
      std::printf(", %d experts, top_k %d, %d shared (not captured)", info.num_experts, info.top_k,
                  info.num_shared_experts);
    }
    std::printf("; %zu token%s, backend %s; top %d neurons by contribution = %s|h|*|v|\n",
                n_tokens, n_tokens == 1 ? "" : "s", backend_ran.c_str(), top,
                moe ? "weight*" : "");
  }

  std::vector<float> x(chunk * d_model), y(chunk * d_model);  // [chunk, d_model]
  for (size_t first = 0; first < n_tokens; first += chunk) {
    const size_t n = std::min(chunk, n_tokens - first);
    if (std::fread(x.data(), 4 * d_model, n, input.get()) != n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--input %s: read failed at token %d", absl::GetFlag(FLAGS_input), first));
    }
    st = fflite_session_run(session.get(), layer, x.data(), n, y.data());
    if (st != FFLITE_STATUS_OK) return CError("fflite_session_run", st);
    for (size_t t = 0; t < n; ++t) {
      const size_t token = first + t;
      if (json) std::printf("%s\n  {\"token\": %zu, ", token ? "," : "", token);
      if (!moe) {
        FFLITE_ASSIGN_OR_RETURN(const std::vector<double>* nv, norms_of(0));
        const FfnSummary s = Summarise(&h[t * d_ff], *nv, 1.0, static_cast<size_t>(top));
        if (json) {
          std::printf("%s}", NeuronsJson(s, d_ff).c_str());
        } else {
          std::printf("token %zu: %s\n", token, SparsityText(s, d_ff).c_str());
          PrintNeuronsText(s, "  ");
        }
        continue;
      }
      if (json) {
        std::printf("\"experts\": [");
      } else {
        std::printf("token %zu: experts", token);
        for (size_t k = 0; k < top_k; ++k) {
          std::printf("%s %d (weight %.4g)", k ? "," : "", experts[t * top_k + k],
                      static_cast<double>(weights[t * top_k + k]));
        }
        std::printf("\n");
      }
      for (size_t k = 0; k < top_k; ++k) {
        const int32_t e = experts[t * top_k + k];
        const float w = weights[t * top_k + k];
        FFLITE_ASSIGN_OR_RETURN(const std::vector<double>* nv,
                                norms_of(static_cast<size_t>(e)));
        const FfnSummary s =
            Summarise(&h[(t * top_k + k) * d_ff], *nv, w, static_cast<size_t>(top));
        if (json) {
          std::printf("%s\n    {\"rank\": %zu, \"expert\": %d, \"weight\": %s, %s}", k ? "," : "",
                      k, e, JsonNumber(w).c_str(), NeuronsJson(s, d_ff).c_str());
        } else {
          std::printf("  expert %d, rank %zu, weight %.6g: %s\n", e, k, static_cast<double>(w),
                      SparsityText(s, d_ff).c_str());
          PrintNeuronsText(s, "    ");
        }
      }
      if (json) std::printf("]}");
    }
  }
  if (json) std::printf("\n ]}\n");
  if (std::fflush(stdout) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("writing the output: %s", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace neurons
}  // namespace fflite

int main(int argc, char** argv) {
  fflite::HelpListsFlagsOf(__FILE__, "fflite-neurons");
  absl::SetProgramUsageMessage(
      "the FFN as key-value memory: per token, the sparsity of a layer's hidden activations h and "
      "the neurons that wrote most into its output (|h_i| * |v_i|, v_i = column i of down; times "
      "the routing weight per chosen expert of an MoE layer).\n"
      "usage: fflite-neurons MODEL.fflite --layer L --input FILE.f32 [--top N] [--json] "
      "[--backend NAME] [--threads T]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  absl::Status st;
  if (args.size() != 2) {
    st = absl::InvalidArgumentError(absl::StrFormat(
        "give one model file (got %d): fflite-neurons MODEL.fflite --layer L --input FILE.f32",
        args.size() - 1));
  } else {
    st = fflite::neurons::Run(args[1]);
  }
  if (!st.ok()) {
    // One line, whatever a message holds.
    std::fprintf(stderr, "fflite-neurons: %s\n",
                 absl::StrReplaceAll(st.message(), {{"\n", " "}}).c_str());
    return 1;
  }
  return 0;
}
