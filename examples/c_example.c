/* Runs every layer of a .fflite model on a few tokens through the C API and prints outputs. */
#include <stdio.h>
#include <stdlib.h>

#include <fflite/fflite.h>

int main(int argc, char** argv) {
  fflite_model* model = NULL;
  fflite_session* session = NULL;
  fflite_session_options opts;
  int32_t n_layers = 0, d_model = 0;
  const size_t n_tokens = 2;

  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL.fflite\n", argv[0]);
    return 2;
  }
  /* The model must outlive every session created from it. */
  if (fflite_model_load_file(argv[1], &model) != FFLITE_STATUS_OK) {
    fprintf(stderr, "load: %s\n", fflite_last_error_message());
    return 1;
  }
  fflite_model_num_layers(model, &n_layers);
  fflite_model_d_model(model, &d_model);

  fflite_session_options_init(&opts); /* sets opts.struct_size; fields are only ever appended */
  opts.num_threads = 2;
  opts.max_tokens = 64;
  if (fflite_session_create(model, &opts, &session) != FFLITE_STATUS_OK) {
    fprintf(stderr, "session: %s\n", fflite_last_error_message());
    fflite_model_free(model);
    return 1;
  }

  float* x = calloc(n_tokens * (size_t)d_model, sizeof(float)); /* [n_tokens, d_model] */
  float* y = calloc(n_tokens * (size_t)d_model, sizeof(float)); /* [n_tokens, d_model] */
  for (size_t i = 0; i < n_tokens * (size_t)d_model; ++i) x[i] = (float)(i % 7) * 0.25f - 0.75f;
  for (int32_t layer = 0; layer < n_layers; ++layer) {
    if (fflite_session_run(session, layer, x, n_tokens, y) != FFLITE_STATUS_OK) {
      fprintf(stderr, "run: %s\n", fflite_last_error_message());
      break;
    }
    printf("layer %d (%s): y[0][0..2] = %.5f %.5f %.5f\n", layer,
           fflite_session_backend_name(session), y[0], y[1], y[2]);
  }
  free(x);
  free(y);
  fflite_session_free(session);
  fflite_model_free(model);
  return 0;
}
