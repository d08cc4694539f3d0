// The only extern "C" code: turns absl::Status into fflite_status plus a per-thread message, and
// makes sure no exception or abort crosses the API.
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "backends/cpu/cpu_options.h"
#include "base/platform.h"
#include "c_status.h"
#include "fflite/fflite.h"
#include "format/model.h"
#include "kernels/kernels.h"
#include "kernels/quant_kernels.h"
#include "session/session.h"

struct fflite_model {
  std::unique_ptr<fflite::Model> model;
};

struct fflite_session {
  std::unique_ptr<fflite::Session> session;
};

namespace fflite {

fflite_status ToCStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return FFLITE_STATUS_OK;
    case absl::StatusCode::kInvalidArgument: return FFLITE_STATUS_INVALID_ARGUMENT;
    case absl::StatusCode::kOutOfRange: return FFLITE_STATUS_OUT_OF_RANGE;
    case absl::StatusCode::kDataLoss: return FFLITE_STATUS_INVALID_MODEL;
    case absl::StatusCode::kUnimplemented: return FFLITE_STATUS_UNSUPPORTED;
    case absl::StatusCode::kNotFound: return FFLITE_STATUS_NOT_FOUND;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnavailable: return FFLITE_STATUS_IO_ERROR;
    case absl::StatusCode::kResourceExhausted: return FFLITE_STATUS_OUT_OF_MEMORY;
    case absl::StatusCode::kFailedPrecondition: return FFLITE_STATUS_UNAVAILABLE;
    default: return FFLITE_STATUS_INTERNAL;
  }
}

std::string StatusText(const absl::Status& status) {
  if (status.ok()) return "OK";
  return std::string(fflite_status_name(ToCStatus(status.code()))) + ": " +
         std::string(status.message());
}

// fflite_layer_info's dtypes are the file's, cast: the C enum names every dtype by its number.
static_assert(FFLITE_DTYPE_F32 == static_cast<int>(DType::F32));
static_assert(FFLITE_DTYPE_F16 == static_cast<int>(DType::F16));
static_assert(FFLITE_DTYPE_BF16 == static_cast<int>(DType::BF16));
static_assert(FFLITE_DTYPE_I8 == static_cast<int>(DType::I8));
static_assert(FFLITE_DTYPE_I4 == static_cast<int>(DType::I4));
static_assert(FFLITE_DTYPE_Q4_K == static_cast<int>(DType::Q4_K));
static_assert(FFLITE_DTYPE_Q6_K == static_cast<int>(DType::Q6_K));
static_assert(FFLITE_DTYPE_Q5_K == static_cast<int>(DType::Q5_K));
static_assert(FFLITE_DTYPE_Q6_K_PACKED == static_cast<int>(DType::Q6_K_PACKED));
static_assert(FFLITE_DTYPE_Q5_K_PACKED == static_cast<int>(DType::Q5_K_PACKED));
static_assert(FFLITE_DTYPE_IQ4_XS == static_cast<int>(DType::IQ4_XS));
static_assert(FFLITE_DTYPE_IQ4_NL == static_cast<int>(DType::IQ4_NL));
static_assert(FFLITE_DTYPE_Q3_K_PACKED == static_cast<int>(DType::Q3_K_PACKED));
static_assert(FFLITE_DTYPE_Q2_K_PACKED == static_cast<int>(DType::Q2_K_PACKED));
static_assert(FFLITE_DTYPE_MXFP4 == static_cast<int>(DType::MXFP4));
static_assert(static_cast<int>(DType::MAX) == FFLITE_DTYPE_MXFP4, "a dtype the C API does not name");

}  // namespace fflite

namespace {

thread_local std::string g_last_error;

fflite_status Fail(fflite_status status, const char* message) {
  try {
    g_last_error = message;
  } catch (...) {
    // Out of memory while recording the message: keep the status.
  }
  return status;
}

fflite_status Report(const absl::Status& st) {
  if (st.ok()) {
    g_last_error.clear();
    return FFLITE_STATUS_OK;
  }
  return Fail(fflite::ToCStatus(st.code()), std::string(st.message()).c_str());
}

// Runs `body`, turning exceptions (allocation failures in the standard library) into statuses.
template <typename F>
fflite_status Guard(F&& body) {
  try {
    return Report(body());
  } catch (const std::bad_alloc&) {
    return Fail(FFLITE_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return Fail(FFLITE_STATUS_INTERNAL, e.what());
  } catch (...) {
    return Fail(FFLITE_STATUS_INTERNAL, "unknown exception");
  }
}

}  // namespace

extern "C" {

const char* fflite_version(void) { return FFLITE_VERSION_STRING; }

const char* fflite_last_error_message(void) { return g_last_error.c_str(); }

const char* fflite_status_name(fflite_status status) {
  switch (status) {
    case FFLITE_STATUS_OK: return "OK";
    case FFLITE_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case FFLITE_STATUS_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case FFLITE_STATUS_INVALID_MODEL: return "INVALID_MODEL";
    case FFLITE_STATUS_UNSUPPORTED: return "UNSUPPORTED";
    case FFLITE_STATUS_NOT_FOUND: return "NOT_FOUND";
    case FFLITE_STATUS_IO_ERROR: return "IO_ERROR";
    case FFLITE_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case FFLITE_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case FFLITE_STATUS_INTERNAL: return "INTERNAL";
  }
  return "UNKNOWN";
}

fflite_status fflite_model_load_file(const char* path, fflite_model** out_model) {
  if (out_model == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_model is null");
  *out_model = nullptr;
  if (path == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "path is null");
  return Guard([&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<fflite::Model>> loaded = fflite::Model::LoadFile(path);
    if (!loaded.ok()) return loaded.status();
    *out_model = new fflite_model{std::move(*loaded)};
    return absl::OkStatus();
  });
}

fflite_status fflite_model_load_buffer(const void* data, size_t size, fflite_model** out_model) {
  if (out_model == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_model is null");
  *out_model = nullptr;
  if (data == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "data is null");
  return Guard([&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<fflite::Model>> loaded = fflite::Model::LoadBuffer(data, size);
    if (!loaded.ok()) return loaded.status();
    *out_model = new fflite_model{std::move(*loaded)};
    return absl::OkStatus();
  });
}

void fflite_model_free(fflite_model* model) { delete model; }

fflite_status fflite_model_num_layers(const fflite_model* model, int32_t* out_count) {
  if (model == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "model is null");
  if (out_count == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_count is null");
  *out_count = static_cast<int32_t>(model->model->layers().size());
  return Report(absl::OkStatus());
}

fflite_status fflite_model_d_model(const fflite_model* model, int32_t* out_d_model) {
  if (model == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "model is null");
  if (out_d_model == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_d_model is null");
  *out_d_model = static_cast<int32_t>(model->model->d_model());
  return Report(absl::OkStatus());
}

fflite_status fflite_model_layer_info(const fflite_model* model, int32_t layer,
                                      fflite_layer_info* out_info) {
  if (model == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "model is null");
  if (out_info == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_info is null");
  const size_t size = out_info->struct_size;
  if (size < sizeof(size_t)) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "out_info->struct_size is too small; set it to sizeof(fflite_layer_info)");
  }
  const auto& layers = model->model->layers();
  if (layer < 0 || static_cast<size_t>(layer) >= layers.size()) {
    return Report(fflite::LayerOutOfRange(layer, layers.size()));
  }
  const fflite::LayerView& l = layers[static_cast<size_t>(layer)];
  const fflite::FfnView& f = l.kind == fflite::LayerKind::kDense ? l.ffn : l.moe.experts[0];
  fflite_layer_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info) < size ? sizeof(info) : size;
  info.kind = l.kind == fflite::LayerKind::kDense ? FFLITE_LAYER_DENSE : FFLITE_LAYER_MOE;
  info.d_model = static_cast<int32_t>(model->model->d_model());
  info.d_ff = static_cast<int32_t>(f.d_ff);
  info.d_ff_padded = static_cast<int32_t>(f.d_ff_padded);
  if (l.kind == fflite::LayerKind::kMoe) {
    info.num_experts = static_cast<int32_t>(l.moe.num_experts);
    info.top_k = static_cast<int32_t>(l.moe.top_k);
    info.num_shared_experts = static_cast<int32_t>(l.moe.shared_experts.size());
  }
  info.dtype = static_cast<fflite_dtype>(f.up.dtype);
  info.activation = static_cast<fflite_activation>(f.activation);
  info.gated = f.gated ? 1 : 0;
  info.up_dtype = static_cast<fflite_dtype>(f.up.dtype);
  info.gate_dtype = static_cast<fflite_dtype>(f.gated ? static_cast<int>(f.gate.dtype) : 0);
  info.down_dtype = static_cast<fflite_dtype>(f.down.dtype);
  info.bits_per_weight = static_cast<float>(f.BitsPerWeight());
  if (l.norm.present) {
    info.norm = l.norm.kind == fflite::NormKind::LAYER_NORM ? FFLITE_NORM_LAYER : FFLITE_NORM_RMS;
    info.norm_unit_offset = l.norm.unit_offset ? 1 : 0;
    info.norm_eps = l.norm.eps;
    switch (l.norm.placement) {
      case fflite::NormPlacement::PRE: info.norm_placement = FFLITE_NORM_PLACEMENT_PRE; break;
      case fflite::NormPlacement::POST: info.norm_placement = FFLITE_NORM_PLACEMENT_POST; break;
      case fflite::NormPlacement::SANDWICH:
        info.norm_placement = FFLITE_NORM_PLACEMENT_SANDWICH;
        break;
      default: info.norm_placement = FFLITE_NORM_PLACEMENT_NONE; break;
    }
  }
  info.residual_included = l.residual ? 1 : 0;
  info.up_bytes = f.up.size;
  info.gate_bytes = f.gated ? f.gate.size : 0;
  info.down_bytes = f.down.size;
  info.layer_bytes = fflite::LayerBytes(l);
  // Only the bytes the caller's struct has: a caller built against an older header is safe.
  std::memcpy(out_info, &info, info.struct_size);
  return Report(absl::OkStatus());
}

void fflite_session_options_init(fflite_session_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
  options->num_threads = 0;  // the fast cores
  options->backend = FFLITE_BACKEND_AUTO;
  options->max_tokens = 512;
}

fflite_status fflite_session_create(const fflite_model* model,
                                    const fflite_session_options* options,
                                    fflite_session** out_session) {
  if (out_session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_session is null");
  *out_session = nullptr;
  if (model == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "model is null");
  fflite_session_options opts;
  fflite_session_options_init(&opts);
  if (options != nullptr) {
    const size_t size = options->struct_size;
    if (size < offsetof(fflite_session_options, num_threads)) {
      return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                  "options->struct_size is too small; call fflite_session_options_init");
    }
    if (size > sizeof(opts)) {
      // From a newer fflite: fine as long as the fields we do not know are left at zero.
      const auto* extra = reinterpret_cast<const unsigned char*>(options) + sizeof(opts);
      for (size_t i = 0; i < size - sizeof(opts); ++i) {
        if (extra[i] != 0) {
          return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                      "options->struct_size is from a newer fflite and sets fields this "
                      "version does not know");
        }
      }
    }
    std::memcpy(&opts, options, size < sizeof(opts) ? size : sizeof(opts));
    opts.struct_size = sizeof(opts);
  }
  fflite::SessionOptions so;
  if (opts.num_threads < 0) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "options->num_threads must be 0 (as many as the fast cores) or 1 .. 1024");
  }
  so.num_threads = opts.num_threads == 0 ? fflite::GetPlatformInfo().num_fast_cores
                                         : opts.num_threads;
  so.parallel_for = opts.parallel_for;
  so.parallel_for_context = opts.parallel_for_context;
  if (opts.wait_policy != FFLITE_WAIT_SPIN && opts.wait_policy != FFLITE_WAIT_SLEEP) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "options->wait_policy must be FFLITE_WAIT_SPIN (0) or FFLITE_WAIT_SLEEP (1)");
  }
  so.sleep_between_loops = opts.wait_policy == FFLITE_WAIT_SLEEP;
  if (opts.max_tokens < 1) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "options->max_tokens must be at least 1");
  }
  so.max_tokens = static_cast<size_t>(opts.max_tokens);
  if (opts.expert_budget_bytes < 0) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "options->expert_budget_bytes must be at least 0");
  }
  so.expert_budget_bytes = static_cast<uint64_t>(opts.expert_budget_bytes);
  if (opts.activations != FFLITE_ACTIVATIONS_AUTO && opts.activations != FFLITE_ACTIVATIONS_FLOAT) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "options->activations must be FFLITE_ACTIVATIONS_AUTO (0) or "
                "FFLITE_ACTIVATIONS_FLOAT (1)");
  }
  so.float_activations = opts.activations == FFLITE_ACTIVATIONS_FLOAT;
  // Read the enum through its underlying type: a C caller may store any int there, and loading
  // an out-of-range value as the C++ enum type is undefined behaviour.
  std::underlying_type_t<fflite_backend> backend;
  std::memcpy(&backend, &opts.backend, sizeof(backend));
  switch (backend) {
    case FFLITE_BACKEND_AUTO: so.backend = "auto"; break;
    case FFLITE_BACKEND_REFERENCE: so.backend = "reference"; break;
    case FFLITE_BACKEND_XNNPACK: so.backend = "xnnpack"; break;
    case FFLITE_BACKEND_CUDA: so.backend = "cuda"; break;
    default:
      return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "options->backend is not a known backend");
  }
  return Guard([&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<fflite::Session>> session =
        fflite::Session::Create(*model->model, so);
    if (!session.ok()) return session.status();
    *out_session = new fflite_session{std::move(*session)};
    return absl::OkStatus();
  });
}

void fflite_session_free(fflite_session* session) { delete session; }

fflite_status fflite_session_prepare(fflite_session* session) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  return Guard([&] { return session->session->Prepare(); });
}

fflite_status fflite_session_memory(const fflite_session* session, fflite_memory_info* out_info) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (out_info == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_info is null");
  const size_t size = out_info->struct_size;
  if (size < sizeof(size_t)) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "out_info->struct_size is too small; set it to sizeof(fflite_memory_info)");
  }
  const fflite::BackendMemory m = session->session->Memory();
  fflite_memory_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info) < size ? sizeof(info) : size;
  info.model_bytes = session->session->model().file_size();
  info.prepared_bytes = m.prepared_bytes;
  info.expert_bytes = m.expert_bytes;
  info.expert_slot_bytes = m.expert_slot_bytes;
  info.scratch_bytes = m.scratch_bytes;
  info.device_bytes = m.device_bytes;
  info.model_prepared_bytes = session->session->model().shared_forms().bytes();
  std::memcpy(out_info, &info, info.struct_size);
  return Report(absl::OkStatus());
}

const char* fflite_session_backend_name(const fflite_session* session) {
  return session == nullptr ? "" : session->session->backend_name();
}

fflite_status fflite_session_run(fflite_session* session, int32_t layer, const float* input,
                                 size_t n_tokens, float* output) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (layer < 0) {
    return Report(fflite::LayerOutOfRange(layer, session->session->model().layers().size()));
  }
  return Guard([&] {
    return session->session->Run(static_cast<size_t>(layer), input, n_tokens, output);
  });
}

fflite_status fflite_session_run_device(fflite_session* session, int32_t layer,
                                        const float* input, size_t n_tokens, float* output,
                                        void* stream) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (layer < 0) {
    return Report(fflite::LayerOutOfRange(layer, session->session->model().layers().size()));
  }
  return Guard([&] {
    return session->session->RunDevice(static_cast<size_t>(layer), input, n_tokens, output,
                                       stream);
  });
}

const char* fflite_session_device_name(const fflite_session* session) {
  return session == nullptr ? "" : session->session->device();
}

fflite_status fflite_session_set_neuron_scales(fflite_session* session, int32_t layer,
                                               int32_t expert, const float* scales,
                                               size_t count) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (layer < 0) {
    return Report(fflite::LayerOutOfRange(layer, session->session->model().layers().size()));
  }
  return Guard([&] {
    return session->session->SetNeuronScales(static_cast<size_t>(layer), expert, scales, count);
  });
}

fflite_status fflite_session_clear_neuron_scales(fflite_session* session, int32_t layer,
                                                 int32_t expert) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (layer < 0) {
    return Report(fflite::LayerOutOfRange(layer, session->session->model().layers().size()));
  }
  return Guard([&] {
    return session->session->ClearNeuronScales(static_cast<size_t>(layer), expert);
  });
}

fflite_status fflite_session_set_capture(fflite_session* session, int32_t layer, float* h,
                                         size_t h_capacity, int32_t* experts, float* weights,
                                         size_t route_capacity) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (layer < 0) {
    return Report(fflite::LayerOutOfRange(layer, session->session->model().layers().size()));
  }
  if (h == nullptr && experts == nullptr && weights == nullptr) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "h, experts and weights are all null: nothing to capture "
                "(fflite_session_clear_capture stops a capture)");
  }
  return Guard([&] {
    return session->session->SetCapture(static_cast<size_t>(layer), h, h_capacity, experts,
                                         weights, route_capacity);
  });
}

fflite_status fflite_session_clear_capture(fflite_session* session, int32_t layer) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (layer < 0) {
    return Report(fflite::LayerOutOfRange(layer, session->session->model().layers().size()));
  }
  return Guard([&] {
    return session->session->SetCapture(static_cast<size_t>(layer), nullptr, 0, nullptr,
                                         nullptr, 0);
  });
}

fflite_status fflite_session_expert_counts(const fflite_session* session, int32_t layer,
                                          uint64_t* out_counts, size_t capacity,
                                          size_t* out_num_experts) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (out_num_experts == nullptr) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_num_experts is null");
  }
  *out_num_experts = 0;
  if (layer < 0) {
    return Report(fflite::LayerOutOfRange(layer, session->session->model().layers().size()));
  }
  return Guard([&]() -> absl::Status {
    // The session is used by one thread at a time, so reading its counters here is safe.
    absl::StatusOr<absl::Span<const uint64_t>> counts =
        session->session->ExpertCounts(static_cast<size_t>(layer));
    if (!counts.ok()) return counts.status();
    *out_num_experts = counts->size();
    if (counts->empty()) return absl::OkStatus();
    if (out_counts == nullptr && capacity == 0) return absl::OkStatus();  // a size query
    if (out_counts == nullptr) return absl::InvalidArgumentError("out_counts is null");
    if (capacity < counts->size()) {
      return absl::InvalidArgumentError("capacity " + std::to_string(capacity) +
                                        " is below the layer's " + std::to_string(counts->size()) +
                                        " experts");
    }
    std::memcpy(out_counts, counts->data(), counts->size() * sizeof(uint64_t));
    return absl::OkStatus();
  });
}

fflite_status fflite_session_reset_expert_counts(fflite_session* session) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  return Guard([&] { return session->session->ResetExpertCounts(); });
}

fflite_status fflite_session_expert_stats(const fflite_session* session,
                                          fflite_expert_stats* out_stats) {
  if (session == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "session is null");
  if (out_stats == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_stats is null");
  const size_t size = out_stats->struct_size;
  if (size < sizeof(size_t)) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "out_stats->struct_size is too small; set it to sizeof(fflite_expert_stats)");
  }
  const fflite::BackendStats s = session->session->Stats();
  fflite_expert_stats stats;
  std::memset(&stats, 0, sizeof(stats));
  stats.struct_size = sizeof(stats) < size ? sizeof(stats) : size;
  stats.resident_bytes = s.resident_expert_bytes;
  stats.hits = s.expert_hits;
  stats.misses = s.expert_misses;
  stats.slots = s.expert_slots;
  stats.slot_bytes = s.expert_slot_bytes;
  stats.reads = s.expert_reads;
  stats.bytes_read_buffered = s.expert_read_buffered_bytes;
  stats.bytes_read_direct = s.expert_read_direct_bytes;
  stats.read_wait_seconds = s.expert_read_wait_seconds;
  stats.prefetches_used = s.expert_prefetches_used;
  stats.prefetches_wasted = s.expert_prefetches_wasted;
  std::memcpy(out_stats, &stats, stats.struct_size);
  return FFLITE_STATUS_OK;
}

fflite_status fflite_platform_info_get(fflite_platform_info* out_info) {
  if (out_info == nullptr) return Fail(FFLITE_STATUS_INVALID_ARGUMENT, "out_info is null");
  const size_t size = out_info->struct_size;
  if (size < sizeof(size_t)) {
    return Fail(FFLITE_STATUS_INVALID_ARGUMENT,
                "out_info->struct_size is too small; set it to sizeof(fflite_platform_info)");
  }
  return Guard([&]() -> absl::Status {
    const fflite::PlatformInfo& p = fflite::GetPlatformInfo();
    fflite_platform_info info;
    std::memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info) < size ? sizeof(info) : size;
    // Copies a string into a fixed field, cut short on a word boundary if it does not fit.
    auto copy = [](const std::string& from, char* to, size_t capacity) {
      size_t n = from.size();
      if (n >= capacity) {
        n = from.rfind(' ', capacity - 1);
        if (n == std::string::npos) n = capacity - 1;
      }
      std::memcpy(to, from.data(), n);
      to[n] = '\0';
    };
    std::string features;
    for (const std::string& f : p.features) features += (features.empty() ? "" : " ") + f;
    copy(p.isa, info.isa, sizeof(info.isa));
    copy(features, info.features, sizeof(info.features));
    copy(p.cpu_name, info.cpu_name, sizeof(info.cpu_name));
    copy(p.uarch, info.uarch, sizeof(info.uarch));
    info.num_cores = static_cast<int32_t>(p.num_cores);
    info.num_logical_cpus = static_cast<int32_t>(p.num_logical_cpus);
    info.num_fast_cores = static_cast<int32_t>(p.num_fast_cores);
    copy(fflite::BestKernels().isa, info.kernels, sizeof(info.kernels));
    copy(fflite::BestQGemvKernel().isa, info.quant_gemv_kernels, sizeof(info.quant_gemv_kernels));
    copy(fflite::BestQGemmKernel().isa, info.quant_gemm_kernels, sizeof(info.quant_gemm_kernels));
    const fflite::PackedKernelNames gemm =
        fflite::CpuPackedKernelNames(fflite::CpuBackendOptions());
    copy(gemm.f32, info.gemm_kernels, sizeof(info.gemm_kernels));
    copy(gemm.bf16, info.bf16_gemm_kernels, sizeof(info.bf16_gemm_kernels));
    copy(gemm.f16, info.f16_gemm_kernels, sizeof(info.f16_gemm_kernels));
    // Only the bytes the caller's struct has: a caller built against an older header is safe.
    std::memcpy(out_info, &info, info.struct_size);
    return absl::OkStatus();
  });
}

}  // extern "C"
