/* The C API from C (C99): misuse gets a status and a message, never a crash; a real model runs.
 * Usage: c_api_test MODEL.fflite (the two-layer model written by make_test_model). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fflite/fflite.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                   \
  do {                                                                \
    ++checks;                                                         \
    if (!(cond)) {                                                    \
      ++failures;                                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                 \
  } while (0)

/* Expects `call` to return `status` with a message containing `needle`. */
#define CHECK_STATUS(call, status, needle)                                         \
  do {                                                                             \
    fflite_status st_ = (call);                                                    \
    ++checks;                                                                      \
    if (st_ != (status) || strstr(fflite_last_error_message(), (needle)) == NULL) { \
      ++failures;                                                                  \
      fprintf(stderr, "%s:%d: %s -> %s '%s', want %s '%s'\n", __FILE__, __LINE__, #call, \
              fflite_status_name(st_), fflite_last_error_message(),                \
              fflite_status_name(status), (needle));                               \
    }                                                                              \
  } while (0)

static void test_loading(const char* path) {
  fflite_model* model = (fflite_model*)0x1;
  unsigned char junk[64];
  memset(junk, 'x', sizeof(junk));
  CHECK_STATUS(fflite_model_load_file(NULL, &model), FFLITE_STATUS_INVALID_ARGUMENT, "path");
  CHECK(model == NULL);
  CHECK_STATUS(fflite_model_load_file(path, NULL), FFLITE_STATUS_INVALID_ARGUMENT, "out_model");
  CHECK_STATUS(fflite_model_load_file("/nonexistent.fflite", &model), FFLITE_STATUS_NOT_FOUND,
               "/nonexistent.fflite");
  CHECK_STATUS(fflite_model_load_buffer(NULL, 10, &model), FFLITE_STATUS_INVALID_ARGUMENT, "data");
  CHECK_STATUS(fflite_model_load_buffer(junk, sizeof(junk), &model), FFLITE_STATUS_INVALID_MODEL,
               "not an fflite file");
  CHECK_STATUS(fflite_model_load_buffer(junk, 3, &model), FFLITE_STATUS_INVALID_MODEL,
               "too small");
  CHECK(model == NULL);
  fflite_model_free(NULL);
}

static void test_queries(const fflite_model* model) {
  int32_t n = 0, d = 0;
  fflite_layer_info info;
  CHECK(fflite_model_num_layers(model, &n) == FFLITE_STATUS_OK && n == 2);
  CHECK(strcmp(fflite_last_error_message(), "") == 0);
  CHECK(fflite_model_d_model(model, &d) == FFLITE_STATUS_OK && d == 16);
  CHECK_STATUS(fflite_model_num_layers(NULL, &n), FFLITE_STATUS_INVALID_ARGUMENT, "model");
  CHECK_STATUS(fflite_model_num_layers(model, NULL), FFLITE_STATUS_INVALID_ARGUMENT, "out_count");

  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  CHECK(fflite_model_layer_info(model, 0, &info) == FFLITE_STATUS_OK);
  CHECK(info.kind == FFLITE_LAYER_DENSE && info.d_model == 16 && info.d_ff == 40 &&
        info.d_ff_padded == 64 && info.num_experts == 0 && info.dtype == FFLITE_DTYPE_F32 &&
        info.activation == FFLITE_ACTIVATION_GELU_TANH && info.gated == 1 &&
        info.up_dtype == FFLITE_DTYPE_F32 && info.gate_dtype == FFLITE_DTYPE_F32 &&
        info.down_dtype == FFLITE_DTYPE_F32 && info.bits_per_weight == 32.0f);
  /* What make_test_model wrote: an RMSNorm before the FFN (eps 1e-5) and the residual; the
   * matrices' bytes at d_ff padded to 64 (f32). */
  CHECK(info.norm == FFLITE_NORM_RMS && info.norm_placement == FFLITE_NORM_PLACEMENT_PRE &&
        info.residual_included == 1 && info.norm_unit_offset == 0 && info.norm_eps == 1e-5f);
  CHECK(info.up_bytes == 64 * 16 * 4 && info.gate_bytes == 64 * 16 * 4 &&
        info.down_bytes == 16 * 64 * 4);
  /* layer_bytes: the three matrices, the norm's weight and whatever biases the layer holds. */
  CHECK(info.layer_bytes >= 3 * 64 * 16 * 4 + 16 * 4 &&
        info.layer_bytes <= 3 * 64 * 16 * 4 + 16 * 4 + (2 * 64 + 16) * 4);
  CHECK(fflite_model_layer_info(model, 1, &info) == FFLITE_STATUS_OK);
  CHECK(info.kind == FFLITE_LAYER_MOE && info.num_experts == 4 && info.top_k == 2 &&
        info.num_shared_experts == 1 && info.activation == FFLITE_ACTIVATION_SILU);
  CHECK(info.norm == FFLITE_NORM_NONE && info.norm_placement == FFLITE_NORM_PLACEMENT_NONE &&
        info.residual_included == 0 && info.norm_eps == 0.0f);
  /* Four routed experts and a shared one of three matrices each, a router and a shared gate. */
  CHECK(info.layer_bytes >= 5 * 3 * info.up_bytes + 4 * 16 * 4 + 16 * 4);
  CHECK_STATUS(fflite_model_layer_info(model, 2, &info), FFLITE_STATUS_OUT_OF_RANGE,
               "layer 2 is out of range");
  CHECK_STATUS(fflite_model_layer_info(model, -1, &info), FFLITE_STATUS_OUT_OF_RANGE,
               "layer -1 is out of range: the model has 2 layers (0 .. 1)");
  info.struct_size = 0;
  CHECK_STATUS(fflite_model_layer_info(model, 0, &info), FFLITE_STATUS_INVALID_ARGUMENT,
               "struct_size");
  /* An older caller's smaller struct: only its bytes are written. */
  {
    unsigned char buf[sizeof(fflite_layer_info) + 8];
    fflite_layer_info* old = (fflite_layer_info*)buf;
    memset(buf, 0xab, sizeof(buf));
    old->struct_size = offsetof(fflite_layer_info, d_ff);
    CHECK(fflite_model_layer_info(model, 0, old) == FFLITE_STATUS_OK);
    CHECK(old->d_model == 16);
    CHECK(buf[offsetof(fflite_layer_info, d_ff)] == 0xab);
  }
}

static void test_session_options(const fflite_model* model) {
  fflite_session* session = (fflite_session*)0x1;
  fflite_session_options opts;
  fflite_session_options_init(&opts);
  fflite_session_options_init(NULL);
  CHECK(opts.struct_size == sizeof(opts) && opts.num_threads == 0 && opts.max_tokens == 512 &&
        opts.parallel_for == NULL && opts.wait_policy == FFLITE_WAIT_SPIN);

  CHECK_STATUS(fflite_session_create(NULL, &opts, &session), FFLITE_STATUS_INVALID_ARGUMENT,
               "model");
  CHECK(session == NULL);
  CHECK_STATUS(fflite_session_create(model, &opts, NULL), FFLITE_STATUS_INVALID_ARGUMENT,
               "out_session");
  opts.num_threads = -1;
  CHECK_STATUS(fflite_session_create(model, &opts, &session), FFLITE_STATUS_INVALID_ARGUMENT,
               "num_threads");
  opts.num_threads = 0; /* the fast cores */
  CHECK(fflite_session_create(model, &opts, &session) == FFLITE_STATUS_OK);
  fflite_session_free(session);
  session = NULL;
  fflite_session_options_init(&opts);
  opts.max_tokens = -5;
  CHECK_STATUS(fflite_session_create(model, &opts, &session), FFLITE_STATUS_INVALID_ARGUMENT,
               "max_tokens");
  fflite_session_options_init(&opts);
  opts.backend = (fflite_backend)99;
  CHECK_STATUS(fflite_session_create(model, &opts, &session), FFLITE_STATUS_INVALID_ARGUMENT,
               "backend");
  fflite_session_options_init(&opts);
  opts.backend = FFLITE_BACKEND_CUDA; /* not built here, or built without a GPU present */
  {
    fflite_status st = fflite_session_create(model, &opts, &session);
    if (st == FFLITE_STATUS_OK) {
      fflite_session_free(session); /* a machine with a GPU and a CUDA build */
    } else {
      CHECK(st == FFLITE_STATUS_UNAVAILABLE && strstr(fflite_last_error_message(), "cuda"));
    }
  }
  fflite_session_options_init(&opts);
  opts.struct_size = 2;
  CHECK_STATUS(fflite_session_create(model, &opts, &session), FFLITE_STATUS_INVALID_ARGUMENT,
               "struct_size");

  /* An options struct from an older fflite (without max_tokens) gets the default 512. */
  fflite_session_options_init(&opts);
  opts.struct_size = offsetof(fflite_session_options, max_tokens);
  opts.max_tokens = 0; /* beyond the old struct: must be ignored */
  CHECK(fflite_session_create(model, &opts, &session) == FFLITE_STATUS_OK);
  fflite_session_free(session);

  /* An options struct from before expert_budget_bytes: no budget, whatever lies beyond. */
  fflite_session_options_init(&opts);
  opts.struct_size = offsetof(fflite_session_options, expert_budget_bytes);
  opts.expert_budget_bytes = -7; /* beyond the old struct: must be ignored */
  CHECK(fflite_session_create(model, &opts, &session) == FFLITE_STATUS_OK);
  fflite_session_free(session);

  /* A newer fflite's larger struct: fine while the unknown tail is zero. */
  {
    unsigned char buf[sizeof(fflite_session_options) + 16];
    fflite_session_options* newer = (fflite_session_options*)buf;
    memset(buf, 0, sizeof(buf));
    fflite_session_options_init(newer);
    newer->struct_size = sizeof(buf);
    CHECK(fflite_session_create(model, newer, &session) == FFLITE_STATUS_OK);
    fflite_session_free(session);
    buf[sizeof(fflite_session_options) + 3] = 1;
    CHECK_STATUS(fflite_session_create(model, newer, &session), FFLITE_STATUS_INVALID_ARGUMENT,
                 "newer fflite");
  }
  /* NULL options: defaults. */
  CHECK(fflite_session_create(model, NULL, &session) == FFLITE_STATUS_OK);
  CHECK(strlen(fflite_session_backend_name(session)) > 0);
  fflite_session_free(session);
  fflite_session_free(NULL);
  CHECK(strcmp(fflite_session_backend_name(NULL), "") == 0);
}

static void test_run(const fflite_model* model) {
  fflite_session* session = NULL;
  fflite_session_options opts;
  float in[16 * 4], out[16 * 4], again[16 * 4];
  int i;
  fflite_session_options_init(&opts);
  opts.max_tokens = 4;
  opts.backend = FFLITE_BACKEND_REFERENCE;
  CHECK(fflite_session_create(model, &opts, &session) == FFLITE_STATUS_OK);
  CHECK(strcmp(fflite_session_backend_name(session), "reference") == 0);
  for (i = 0; i < 16 * 4; ++i) in[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;

  CHECK_STATUS(fflite_session_run(NULL, 0, in, 1, out), FFLITE_STATUS_INVALID_ARGUMENT, "session");
  /* One wording for a layer out of range, in every call, negative or too large. */
  CHECK_STATUS(fflite_session_run(session, -1, in, 1, out), FFLITE_STATUS_OUT_OF_RANGE,
               "layer -1 is out of range: the model has 2 layers (0 .. 1)");
  CHECK_STATUS(fflite_session_run(session, 2, in, 1, out), FFLITE_STATUS_OUT_OF_RANGE,
               "the model has 2 layers");
  CHECK_STATUS(fflite_session_run(session, 0, in, 0, out), FFLITE_STATUS_OUT_OF_RANGE, "n_tokens 0");
  CHECK_STATUS(fflite_session_run(session, 0, in, 5, out), FFLITE_STATUS_OUT_OF_RANGE, "max_tokens = 4");
  CHECK_STATUS(fflite_session_run(session, 0, in, (size_t)-1, out), FFLITE_STATUS_OUT_OF_RANGE,
               "n_tokens");
  CHECK_STATUS(fflite_session_run(session, 0, NULL, 1, out), FFLITE_STATUS_INVALID_ARGUMENT, "input");
  CHECK_STATUS(fflite_session_run(session, 0, in, 1, NULL), FFLITE_STATUS_INVALID_ARGUMENT, "output");
  CHECK_STATUS(fflite_session_run(session, 0, in, 2, in + 16), FFLITE_STATUS_INVALID_ARGUMENT,
               "overlap in part");
  CHECK_STATUS(fflite_session_run(session, 0, in + 16, 2, in), FFLITE_STATUS_INVALID_ARGUMENT,
               "overlap in part");

  /* Neuron edits: argument checks through the C API (the results are tested in C++). */
  {
    float scales[4096];
    fflite_layer_info info;
    int k;
    for (k = 0; k < 4096; ++k) scales[k] = 0.5f;
    info.struct_size = sizeof(info);
    CHECK(fflite_model_layer_info(model, 0, &info) == FFLITE_STATUS_OK);
    CHECK(info.d_ff > 0 && info.d_ff <= 4096);
    CHECK_STATUS(fflite_session_set_neuron_scales(NULL, 0, -1, scales, (size_t)info.d_ff),
                 FFLITE_STATUS_INVALID_ARGUMENT, "session");
    CHECK_STATUS(fflite_session_set_neuron_scales(session, -1, -1, scales, (size_t)info.d_ff),
                 FFLITE_STATUS_OUT_OF_RANGE, "layer");
    CHECK_STATUS(fflite_session_set_neuron_scales(session, 0, -1, scales, (size_t)info.d_ff + 1),
                 FFLITE_STATUS_INVALID_ARGUMENT, "count");
    CHECK_STATUS(fflite_session_clear_neuron_scales(NULL, 0, -1), FFLITE_STATUS_INVALID_ARGUMENT,
                 "session");
    if (info.kind == FFLITE_LAYER_DENSE) {
      CHECK(fflite_session_set_neuron_scales(session, 0, -1, scales, (size_t)info.d_ff) ==
            FFLITE_STATUS_OK);
      CHECK(fflite_session_clear_neuron_scales(session, 0, -1) == FFLITE_STATUS_OK);
    }
  }

  /* Capture: argument checks, and a dense run fills h for its tokens only. */
  {
    static float h[4 * 4096];
    int32_t experts[4];
    float weights[4];
    fflite_layer_info info;
    int k, written = 0, untouched = 1;
    info.struct_size = sizeof(info);
    CHECK(fflite_model_layer_info(model, 0, &info) == FFLITE_STATUS_OK);
    CHECK(info.d_ff > 0 && info.d_ff <= 4096);
    CHECK_STATUS(fflite_session_set_capture(NULL, 0, h, 4 * 4096, NULL, NULL, 0),
                 FFLITE_STATUS_INVALID_ARGUMENT, "session");
    CHECK_STATUS(fflite_session_set_capture(session, 0, NULL, 0, NULL, NULL, 0),
                 FFLITE_STATUS_INVALID_ARGUMENT, "nothing to capture");
    CHECK_STATUS(fflite_session_set_capture(session, -1, h, 4 * 4096, NULL, NULL, 0),
                 FFLITE_STATUS_OUT_OF_RANGE, "layer");
    CHECK_STATUS(fflite_session_set_capture(session, 0, h, 4 * (size_t)info.d_ff - 1, NULL, NULL,
                                            0),
                 FFLITE_STATUS_INVALID_ARGUMENT, "h_capacity");
    CHECK_STATUS(fflite_session_clear_capture(NULL, 0), FFLITE_STATUS_INVALID_ARGUMENT, "session");
    if (info.kind == FFLITE_LAYER_DENSE) {
      CHECK_STATUS(fflite_session_set_capture(session, 0, h, 4 * 4096, experts, weights, 4),
                   FFLITE_STATUS_INVALID_ARGUMENT, "dense");
      for (k = 0; k < 4 * 4096; ++k) h[k] = -7.0f;
      CHECK(fflite_session_set_capture(session, 0, h, 4 * 4096, NULL, NULL, 0) == FFLITE_STATUS_OK);
      CHECK(fflite_session_run(session, 0, in, 2, out) == FFLITE_STATUS_OK);
      for (k = 0; k < 2 * info.d_ff; ++k) written += h[k] != -7.0f;
      for (k = 2 * info.d_ff; k < 4 * 4096; ++k) untouched &= h[k] == -7.0f;
      CHECK(written > 0);
      CHECK(untouched);
      CHECK(fflite_session_clear_capture(session, 0) == FFLITE_STATUS_OK);
    }
  }

  /* Device pointers are refused on a CPU backend, after the same argument checks. */
  CHECK(strcmp(fflite_session_device_name(session), "cpu") == 0);
  CHECK(strcmp(fflite_session_device_name(NULL), "") == 0);
  CHECK_STATUS(fflite_session_run_device(NULL, 0, in, 1, out, NULL),
               FFLITE_STATUS_INVALID_ARGUMENT, "session");
  CHECK_STATUS(fflite_session_run_device(session, 0, NULL, 1, out, NULL),
               FFLITE_STATUS_INVALID_ARGUMENT, "input");
  CHECK_STATUS(fflite_session_run_device(session, 0, in, 0, out, NULL),
               FFLITE_STATUS_OUT_OF_RANGE, "n_tokens 0");
  CHECK_STATUS(fflite_session_run_device(session, -1, in, 1, out, NULL),
               FFLITE_STATUS_OUT_OF_RANGE, "layer");
  CHECK_STATUS(fflite_session_run_device(session, 0, in, 1, out, NULL), FFLITE_STATUS_UNSUPPORTED,
               "backend 'reference': it runs on host memory");

  for (i = 0; i < 2; ++i) {
    int j, finite = 1;
    CHECK(fflite_session_run(session, i, in, 4, out) == FFLITE_STATUS_OK);
    CHECK(fflite_session_run(session, i, in, 4, again) == FFLITE_STATUS_OK);
    CHECK(memcmp(out, again, sizeof(out)) == 0);
    for (j = 0; j < 16 * 4; ++j) finite &= isfinite(out[j]) ? 1 : 0;
    CHECK(finite);
    /* One token alone gives the same row as within a batch. */
    CHECK(fflite_session_run(session, i, in + 16, 1, again) == FFLITE_STATUS_OK);
    CHECK(memcmp(out + 16, again, 16 * sizeof(float)) == 0);
  }
  /* NaN and Inf inputs propagate; they never crash. */
  in[3] = NAN;
  in[16 + 5] = INFINITY;
  for (i = 0; i < 2; ++i) {
    CHECK(fflite_session_run(session, i, in, 2, out) == FFLITE_STATUS_OK);
    CHECK(isnan(out[0]) || isnan(out[3]));
  }
  fflite_session_free(session);
}

/* Routing statistics: xnnpack (under a 1-byte expert budget: one expert at a time) and the
 * reference count the same tokens per expert; reset; a dense layer has none; bad arguments. */
static int parallel_for_calls = 0;
static void serial_parallel_for(void* pool_context, fflite_task_fn task, void* task_context,
                                size_t n) {
  size_t i;
  ++*(int*)pool_context;
  for (i = 0; i < n; ++i) task(task_context, i);
}

/* In place, prepare, memory and the options of 0.3, on every CPU backend. */
static void test_embedding(const fflite_model* model, const char* path) {
  const fflite_backend backends[2] = {FFLITE_BACKEND_REFERENCE, FFLITE_BACKEND_XNNPACK};
  int b;
  for (b = 0; b < 2; ++b) {
    fflite_session* session = NULL;
    fflite_session_options opts;
    fflite_memory_info mem, before;
    float in[16 * 4], out[16 * 4], inplace[16 * 4], out0[16 * 4];
    int i, layer;
    FILE* f;
    long file_size = -1;
    fflite_session_options_init(&opts);
    CHECK(opts.activations == FFLITE_ACTIVATIONS_AUTO);
    opts.max_tokens = 4;
    opts.backend = backends[b];
    opts.activations = 2;
    CHECK_STATUS(fflite_session_create(model, &opts, &session), FFLITE_STATUS_INVALID_ARGUMENT,
                 "options->activations");
    opts.activations = FFLITE_ACTIVATIONS_FLOAT;
    opts.wait_policy = 2;
    CHECK_STATUS(fflite_session_create(model, &opts, &session), FFLITE_STATUS_INVALID_ARGUMENT,
                 "options->wait_policy");
    opts.wait_policy = FFLITE_WAIT_SLEEP;
    /* The caller's pool (a serial one here; embedding_test runs a real one). */
    opts.parallel_for = serial_parallel_for;
    opts.parallel_for_context = &parallel_for_calls;
    opts.num_threads = 2;
    CHECK(fflite_session_create(model, &opts, &session) == FFLITE_STATUS_OK);
    if (session == NULL) continue;
    for (i = 0; i < 16 * 4; ++i) in[i] = (float)((i * 29) % 31) / 15.0f - 1.0f;
    /* output == input: the same bits as into a separate buffer, for every layer. */
    for (layer = 0; layer < 2; ++layer) {
      CHECK(fflite_session_run(session, layer, in, 4, out) == FFLITE_STATUS_OK);
      memcpy(inplace, in, sizeof(in));
      CHECK(fflite_session_run(session, layer, inplace, 4, inplace) == FFLITE_STATUS_OK);
      CHECK(memcmp(out, inplace, sizeof(out)) == 0);
      if (layer == 0) memcpy(out0, out, sizeof(out));
    }

    CHECK_STATUS(fflite_session_prepare(NULL), FFLITE_STATUS_INVALID_ARGUMENT, "session");
    CHECK_STATUS(fflite_session_memory(NULL, &mem), FFLITE_STATUS_INVALID_ARGUMENT, "session");
    CHECK_STATUS(fflite_session_memory(session, NULL), FFLITE_STATUS_INVALID_ARGUMENT, "out_info");
    mem.struct_size = 0;
    CHECK_STATUS(fflite_session_memory(session, &mem), FFLITE_STATUS_INVALID_ARGUMENT,
                 "struct_size");
    f = fopen(path, "rb");
    if (f != NULL && fseek(f, 0, SEEK_END) == 0) file_size = ftell(f);
    if (f != NULL) fclose(f);
    fflite_session_free(session);

    /* A fresh session: prepare packs the dense layer (xnnpack) before any run. */
    CHECK(fflite_session_create(model, &opts, &session) == FFLITE_STATUS_OK);
    if (session == NULL) continue;
    before.struct_size = sizeof(before);
    CHECK(fflite_session_memory(session, &before) == FFLITE_STATUS_OK);
    CHECK(before.struct_size == sizeof(before));
    CHECK(before.model_bytes == (uint64_t)file_size);
    CHECK(before.device_bytes == 0 && before.expert_slot_bytes == 0);
    CHECK(fflite_session_prepare(session) == FFLITE_STATUS_OK);
    CHECK(fflite_session_prepare(session) == FFLITE_STATUS_OK);
    mem.struct_size = sizeof(mem);
    CHECK(fflite_session_memory(session, &mem) == FFLITE_STATUS_OK);
    if (backends[b] == FFLITE_BACKEND_XNNPACK) {
      /* Packed: at least the dense layer's three f32 matrices (64 x 16 each), by the model where
       * its sessions share them (fflite's GEMM: the session above made them already), else by
       * this session. */
      CHECK(mem.model_prepared_bytes >= 3 * 64 * 16 * 4 ||
            mem.prepared_bytes >= before.prepared_bytes + 3 * 64 * 16 * 4);
      CHECK(mem.scratch_bytes >= 4 * 16 * 4);
    } else {
      CHECK(mem.prepared_bytes == before.prepared_bytes);
    }
    CHECK(fflite_session_run(session, 0, in, 4, inplace) == FFLITE_STATUS_OK);
    CHECK(memcmp(out0, inplace, sizeof(out0)) == 0); /* prepared: the same bits */
    before = mem;
    CHECK(fflite_session_memory(session, &mem) == FFLITE_STATUS_OK);
    CHECK(mem.prepared_bytes == before.prepared_bytes); /* nothing more packed on the run */
    fflite_session_free(session);
  }
}

static void test_expert_counts(const fflite_model* model) {
  fflite_session* s[2] = {NULL, NULL};
  fflite_session_options opts;
  float in[16 * 4], out[16 * 4];
  uint64_t counts[2][5];
  size_t num = 99, i;
  int k;
  for (i = 0; i < 16 * 4; ++i) in[i] = (float)((i * 29) % 17) / 8.0f - 1.0f;
  for (k = 0; k < 2; ++k) {
    fflite_session_options_init(&opts);
    CHECK(opts.expert_budget_bytes == 0);
    opts.max_tokens = 4;
    opts.backend = k == 0 ? FFLITE_BACKEND_REFERENCE : FFLITE_BACKEND_XNNPACK;
    opts.expert_budget_bytes = k == 0 ? 0 : 1;
    CHECK(fflite_session_create(model, &opts, &s[k]) == FFLITE_STATUS_OK);
    if (s[k] == NULL) return;
    CHECK(fflite_session_run(s[k], 1, in, 4, out) == FFLITE_STATUS_OK);
    CHECK(fflite_session_run(s[k], 1, in + 16, 1, out) == FFLITE_STATUS_OK);
    CHECK(fflite_session_expert_counts(s[k], 1, NULL, 0, &num) == FFLITE_STATUS_OK && num == 4);
    memset(counts[k], 0, sizeof(counts[k]));
    CHECK(fflite_session_expert_counts(s[k], 1, counts[k], 5, &num) == FFLITE_STATUS_OK);
    CHECK(counts[k][0] + counts[k][1] + counts[k][2] + counts[k][3] == 5 * 2); /* top-2 */
    CHECK(fflite_session_expert_counts(s[k], 0, counts[k], 5, &num) == FFLITE_STATUS_OK &&
          num == 0);
  }
  CHECK(memcmp(counts[0], counts[1], sizeof(counts[0])) == 0);
  /* Expert statistics: the budgeted xnnpack session streams its experts (a model loaded from a
   * file) through one slot; the reference keeps none. */
  {
    fflite_expert_stats st;
    memset(&st, 0xff, sizeof(st));
    st.struct_size = sizeof(st);
    CHECK(fflite_session_expert_stats(s[0], &st) == FFLITE_STATUS_OK);
    CHECK(st.struct_size == sizeof(st) && st.misses == 0 && st.reads == 0 && st.slots == 0);
    memset(&st, 0xff, sizeof(st));
    st.struct_size = sizeof(st);
    CHECK(fflite_session_expert_stats(s[1], &st) == FFLITE_STATUS_OK);
    CHECK(st.slots == 1 && st.slot_bytes % 4096 == 0 && st.slot_bytes > 0);
    CHECK(st.misses > 0 && st.reads > 0 && st.reads <= st.misses);
    CHECK(st.bytes_read_buffered + st.bytes_read_direct > 0);
    CHECK(st.bytes_read_buffered + st.bytes_read_direct <= st.reads * st.slot_bytes);
    CHECK(st.read_wait_seconds >= 0.0 && st.prefetches_used == 0 && st.prefetches_wasted == 0);
    /* An older, smaller struct gets only its own fields. */
    memset(&st, 0xff, sizeof(st));
    st.struct_size = offsetof(fflite_expert_stats, hits);
    CHECK(fflite_session_expert_stats(s[1], &st) == FFLITE_STATUS_OK);
    CHECK(st.struct_size == offsetof(fflite_expert_stats, hits) && st.hits == UINT64_MAX);
    st.struct_size = 0;
    CHECK_STATUS(fflite_session_expert_stats(s[1], &st), FFLITE_STATUS_INVALID_ARGUMENT,
                 "struct_size");
    CHECK_STATUS(fflite_session_expert_stats(NULL, &st), FFLITE_STATUS_INVALID_ARGUMENT,
                 "session");
    CHECK_STATUS(fflite_session_expert_stats(s[1], NULL), FFLITE_STATUS_INVALID_ARGUMENT,
                 "out_stats");
  }
  CHECK_STATUS(fflite_session_expert_counts(s[1], 1, counts[0], 3, &num),
               FFLITE_STATUS_INVALID_ARGUMENT, "capacity 3");
  CHECK(num == 4);
  CHECK_STATUS(fflite_session_expert_counts(s[1], 2, counts[0], 5, &num),
               FFLITE_STATUS_OUT_OF_RANGE, "layer 2");
  CHECK_STATUS(fflite_session_expert_counts(NULL, 1, counts[0], 5, &num),
               FFLITE_STATUS_INVALID_ARGUMENT, "session");
  CHECK_STATUS(fflite_session_expert_counts(s[1], 1, counts[0], 5, NULL),
               FFLITE_STATUS_INVALID_ARGUMENT, "out_num_experts");
  CHECK(fflite_session_reset_expert_counts(s[1]) == FFLITE_STATUS_OK);
  CHECK(fflite_session_expert_counts(s[1], 1, counts[1], 5, &num) == FFLITE_STATUS_OK);
  CHECK(counts[1][0] == 0 && counts[1][1] == 0 && counts[1][2] == 0 && counts[1][3] == 0);
  CHECK_STATUS(fflite_session_reset_expert_counts(NULL), FFLITE_STATUS_INVALID_ARGUMENT,
               "session");
  /* A negative budget is refused. */
  fflite_session_options_init(&opts);
  opts.expert_budget_bytes = -1;
  {
    fflite_session* bad = NULL;
    CHECK_STATUS(fflite_session_create(model, &opts, &bad), FFLITE_STATUS_INVALID_ARGUMENT,
                 "expert_budget_bytes");
    CHECK(bad == NULL);
  }
  fflite_session_free(s[0]);
  fflite_session_free(s[1]);
}

int main(int argc, char** argv) {
  fflite_model* model = NULL;
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.fflite\n", argv[0]);
    return 2;
  }
  {
    /* The library's version is the header's, in both forms (one version, written in CMake). */
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", FFLITE_VERSION_MAJOR, FFLITE_VERSION_MINOR,
             FFLITE_VERSION_PATCH);
    CHECK(strcmp(fflite_version(), expected) == 0);
    CHECK(strcmp(fflite_version(), FFLITE_VERSION_STRING) == 0);
  }
  CHECK(strcmp(fflite_status_name(FFLITE_STATUS_INVALID_MODEL), "INVALID_MODEL") == 0);
  test_loading(argv[1]);
  if (fflite_model_load_file(argv[1], &model) != FFLITE_STATUS_OK) {
    fprintf(stderr, "cannot load %s: %s\n", argv[1], fflite_last_error_message());
    return 1;
  }
  test_queries(model);
  test_session_options(model);
  test_run(model);
  test_embedding(model, argv[1]);
  test_expert_counts(model);
  fflite_model_free(model);
  printf("c_api_test: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
