// The importance matrix from a calibration run (imatrix.h).
#include "imatrix.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "c_api_handles.h"
#include "fflite/fflite.h"
#include "format/dtype.h"
#include "format/model.h"
#include "layer/layer_runner.h"

namespace fflite {
namespace imatrix {
namespace {

constexpr size_t kMaxChunkTokens = 256;

using tools::CError;
using tools::FileClose;
using tools::ModelFree;
using tools::SessionFree;

// Sums of squares and their counts per named vector, in name order.
struct Accumulator {
  std::vector<double> sum;
  double count = 0;
};

// The layer's norm applied to one token (as the reference backend computes it), in double.
void ApplyNorm(const NormView& n, const std::vector<float>& weight, const std::vector<float>& bias,
               const float* x, size_t d, double* out) {
  double mean = 0.0;
  if (n.kind == NormKind::LAYER_NORM) {
    for (size_t i = 0; i < d; ++i) mean += x[i];
    mean /= static_cast<double>(d);
  }
  double sq = 0.0;
  for (size_t i = 0; i < d; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(d) + n.eps);
  for (size_t i = 0; i < d; ++i) {
    const double w = weight[i] + (n.unit_offset ? 1.0 : 0.0);
    out[i] = (x[i] - mean) * inv * w + (bias.empty() ? 0.0 : bias[i]);
  }
}

// The calibration file of one layer, checked: a regular file of a whole number of tokens.
// Returns false (and no error) when there is none.
absl::StatusOr<bool> OpenTokens(const std::string& path, size_t d_model,
                                std::unique_ptr<std::FILE, FileClose>* file, size_t* n_tokens) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 && errno == ENOENT) return false;
  file->reset(std::fopen(path.c_str(), "rb"));
  if (*file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot open: %s", path, std::strerror(errno)));
  }
  if (fstat(fileno(file->get()), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a regular file", path));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t token_bytes = 4 * static_cast<uint64_t>(d_model);
  if (size == 0 || size % token_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes is not a positive multiple of 4 * d_model = %d bytes (one token of %d f32)",
        path, size, token_bytes, d_model));
  }
  *n_tokens = static_cast<size_t>(size / token_bytes);
  return true;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::vector<float>>> ComputeImportance(
    const std::string& model_path, const std::string& dir, int threads, ImportanceRun* run) {
  if (dir.empty()) return absl::InvalidArgumentError("--inputs DIR is required");
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("--threads %d: must be >= 1", threads));
  }
  // The norms' weights through the internal loader (the C API does not expose weights).
  FFLITE_ASSIGN_OR_RETURN(tools::ToolModel loaded, tools::LoadToolModel(model_path));
  const std::unique_ptr<fflite_model, ModelFree>& model = loaded.api;
  const std::unique_ptr<Model>* internal = &loaded.internal;
  fflite_status st = FFLITE_STATUS_OK;
  const size_t d = (*internal)->d_model();
  std::map<std::string, Accumulator> acc;
  size_t layers_seen = 0, tokens_seen = 0;
  for (size_t layer = 0; layer < (*internal)->layers().size(); ++layer) {
    const std::string path = absl::StrFormat("%s/layer%d.f32", dir, layer);
    std::unique_ptr<std::FILE, FileClose> file;
    size_t n_tokens = 0;
    FFLITE_ASSIGN_OR_RETURN(bool present, OpenTokens(path, d, &file, &n_tokens));
    if (!present) continue;
    ++layers_seen;
    tokens_seen += n_tokens;
    const LayerView& view = (*internal)->layers()[layer];
    const bool moe = view.kind == LayerKind::kMoe;
    const size_t d_ff = moe ? view.moe.experts[0].d_ff : view.ffn.d_ff;
    const size_t top_k = moe ? view.moe.top_k : 1;
    const bool pre_norm = StepsOf(view).pre_norm;
    std::vector<float> norm_w, norm_b;
    if (pre_norm) {
      norm_w.resize(d);
      DequantizeRows(view.norm.weight.dtype, view.norm.weight.layout, 1, d, view.norm.weight.data,
                     0, 1, norm_w.data());
      if (view.norm.bias.present()) {
        norm_b.resize(d);
        DequantizeRows(view.norm.bias.dtype, view.norm.bias.layout, 1, d, view.norm.bias.data, 0,
                       1, norm_b.data());
      }
    }
    fflite_session_options options;
    fflite_session_options_init(&options);
    options.num_threads = threads;
    const size_t chunk = std::min(n_tokens, kMaxChunkTokens);
    options.max_tokens = static_cast<int32_t>(chunk);
    fflite_session* raw_session = nullptr;
    st = fflite_session_create(model.get(), &options, &raw_session);
    const std::unique_ptr<fflite_session, SessionFree> session(raw_session);
    if (st != FFLITE_STATUS_OK) return CError("fflite_session_create", st);
    std::vector<float> h(chunk * top_k * d_ff);
    std::vector<int32_t> experts(moe ? chunk * top_k : 0);
    std::vector<float> weights(moe ? chunk * top_k : 0);
    st = fflite_session_set_capture(session.get(), static_cast<int32_t>(layer), h.data(), h.size(),
                                    moe ? experts.data() : nullptr,
                                    moe ? weights.data() : nullptr, experts.size());
    if (st != FFLITE_STATUS_OK) return CError("fflite_session_set_capture", st);

    const std::string prefix = absl::StrFormat("layers[%d]", layer);
    Accumulator& in = acc[prefix + ".input"];
    in.sum.assign(d, 0.0);
    std::vector<float> x(chunk * d), y(chunk * d);
    std::vector<double> normed(d);
    // The hidden layers' sums (per routed expert; one for a dense layer), looked up once each.
    std::vector<Accumulator*> hidden(moe ? view.moe.experts.size() : 1, nullptr);
    for (size_t first = 0; first < n_tokens; first += chunk) {
      const size_t n = std::min(chunk, n_tokens - first);
      if (std::fread(x.data(), 4 * d, n, file.get()) != n) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: read failed at token %d", path, first));
      }
      for (size_t i = 0; i < n * d; ++i) {
        if (!std::isfinite(x[i])) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: token %d, element %d is not finite", path, first + i / d, i % d));
        }
      }
      st = fflite_session_run(session.get(), static_cast<int32_t>(layer), x.data(), n, y.data());
      if (st != FFLITE_STATUS_OK) return CError(path, st);
      for (size_t t = 0; t < n; ++t) {
        const float* xt = &x[t * d];
        if (pre_norm) {
          ApplyNorm(view.norm, norm_w, norm_b, xt, d, normed.data());
        } else {
          for (size_t i = 0; i < d; ++i) normed[i] = xt[i];
        }
        for (size_t i = 0; i < d; ++i) in.sum[i] += normed[i] * normed[i];
        in.count += 1;
        for (size_t k = 0; k < top_k; ++k) {
          const float* hk = &h[(t * top_k + k) * d_ff];
          const size_t e = moe ? static_cast<size_t>(experts[t * top_k + k]) : 0;
          const double scale =
              moe ? static_cast<double>(weights[t * top_k + k]) * weights[t * top_k + k] : 1.0;
          if (e >= hidden.size()) {
            return absl::InternalError(absl::StrFormat("%s: captured expert %d", path, e));
          }
          if (hidden[e] == nullptr) {  // the first token routed to it: its vector, by name
            hidden[e] = &acc[moe ? absl::StrFormat("%s.moe.experts[%d].hidden", prefix, e)
                                 : prefix + ".ffn.hidden"];
            hidden[e]->sum.assign(d_ff, 0.0);
          }
          Accumulator& a = *hidden[e];
          for (size_t j = 0; j < d_ff; ++j) a.sum[j] += scale * hk[j] * hk[j];
          a.count += 1;
        }
      }
    }
  }
  if (layers_seen == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--inputs %s: no layer<i>.f32 file for any of the model's %d layers", dir,
        (*internal)->layers().size()));
  }
  std::map<std::string, std::vector<float>> tensors;
  for (const auto& [name, a] : acc) {
    std::vector<float>& v = tensors[name];
    v.resize(a.sum.size());
    for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(a.sum[j] / a.count);
  }
  if (run != nullptr) *run = {layers_seen, tokens_seen};
  return tensors;
}

// Writes the vectors as one safetensors file: into a temporary file beside `path`, renamed over
// it once complete.
absl::Status WriteImportance(const std::string& path,
                              const std::map<std::string, std::vector<float>>& tensors) {
  std::string header = "{";
  uint64_t offset = 0;
  for (const auto& [name, v] : tensors) {
    const uint64_t bytes = 4 * v.size();
    header += absl::StrFormat(
        "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%d,%d]}",
        header.size() > 1 ? "," : "", name, v.size(), offset, offset + bytes);
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, FileClose> f(std::fopen(tmp.c_str(), "wb"));
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot create %s: %s", path, tmp, std::strerror(errno)));
  }
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) {
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  }
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  for (const auto& [name, v] : tensors) {
    ok = ok && std::fwrite(v.data(), 4, v.size(), f.get()) == v.size();
  }
  ok = std::fflush(f.get()) == 0 && ok;
  ok = fsync(fileno(f.get())) == 0 && ok;
  const int close_rc = std::fclose(f.release());
  if (!ok || close_rc != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return absl::InvalidArgumentError(absl::StrFormat("%s: writing failed: %s", path, why));
  }
  return absl::OkStatus();
}

}  // namespace imatrix
}  // namespace fflite

