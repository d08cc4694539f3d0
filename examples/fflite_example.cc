// The last step of the README's main job: runs .fflite models through the C API and prints a few
// outputs and the timing of each layer (scripts/example.sh makes and converts the checkpoints).
//   fflite-example [--tokens N] [--backend auto|reference|xnnpack|cuda] MODEL.fflite...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fflite/fflite.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Loads `path`, runs every layer on `tokens` tokens (and on 1 token), prints outputs and times.
int RunModel(const std::string& path, size_t tokens, fflite_backend backend) {
  fflite_model* model = nullptr;
  if (fflite_model_load_file(path.c_str(), &model) != FFLITE_STATUS_OK) {
    std::fprintf(stderr, "%s\n", fflite_last_error_message());
    return 1;
  }
  int32_t n_layers = 0, d = 0;
  fflite_model_num_layers(model, &n_layers);
  fflite_model_d_model(model, &d);
  fflite_session_options opts;
  fflite_session_options_init(&opts);
  opts.backend = backend;
  opts.max_tokens = static_cast<int32_t>(tokens);
  fflite_session* session = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  if (fflite_session_create(model, &opts, &session) != FFLITE_STATUS_OK) {
    std::fprintf(stderr, "%s\n", fflite_last_error_message());
    fflite_model_free(model);
    return 1;
  }
  const double create_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n%s: %d layers, d_model %d, backend %s on %s, session created in %.2f ms\n",
              path.c_str(), n_layers, d, fflite_session_backend_name(session),
              fflite_session_device_name(session), create_ms);
  std::vector<float> x(tokens * d), y(tokens * d);  // [tokens, d_model]
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::printf("  %-5s %-5s %-40s %12s %12s\n", "layer", "kind", "y[0][0..3]", "1 tok (ms)",
              (std::to_string(tokens) + " tok (ms)").c_str());
  for (int32_t layer = 0; layer < n_layers; ++layer) {
    fflite_layer_info info;
    info.struct_size = sizeof(info);
    fflite_model_layer_info(model, layer, &info);
    double ms[2];
    const size_t counts[2] = {1, tokens};
    for (int c = 0; c < 2; ++c) {
      std::vector<double> times;
      for (int rep = 0; rep < 7; ++rep) {
        const auto s = std::chrono::steady_clock::now();
        if (fflite_session_run(session, layer, x.data(), counts[c], y.data()) != FFLITE_STATUS_OK) {
          std::fprintf(stderr, "%s\n", fflite_last_error_message());
          return 1;
        }
        times.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
      }
      ms[c] = Median(times);
    }
    char outputs[64];
    std::snprintf(outputs, sizeof(outputs), "%+.4f %+.4f %+.4f %+.4f", y[0], y[1], y[2], y[3]);
    std::printf("  %-5d %-5s %-40s %12.3f %12.3f\n", layer,
                info.kind == FFLITE_LAYER_MOE ? "moe" : "dense", outputs, ms[0], ms[1]);
  }
  std::printf("  (median of 7 runs each)\n");
  fflite_session_free(session);
  fflite_model_free(model);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  size_t tokens = 16;
  fflite_backend backend = FFLITE_BACKEND_AUTO;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc) {
      tokens = std::strtoul(argv[++i], nullptr, 10);
    } else if (a == "--backend" && i + 1 < argc) {
      const std::string b = argv[++i];
      backend = b == "reference" ? FFLITE_BACKEND_REFERENCE
                : b == "xnnpack" ? FFLITE_BACKEND_XNNPACK
                : b == "cuda"    ? FFLITE_BACKEND_CUDA
                                 : FFLITE_BACKEND_AUTO;
    } else if (!a.empty() && a[0] != '-') {
      models.push_back(a);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--tokens N] [--backend auto|reference|xnnpack|cuda] "
                   "MODEL.fflite...\n", argv[0]);
      return 2;
    }
  }
  if (models.empty() || tokens == 0) {
    std::fprintf(stderr, "nothing to run (give MODEL.fflite files; tokens >= 1)\n");
    return 2;
  }
  std::printf("fflite %s\n", fflite_version());
  for (const std::string& m : models) {
    if (RunModel(m, tokens, backend) != 0) return 1;
  }
  return 0;
}
