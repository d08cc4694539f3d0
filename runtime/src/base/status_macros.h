// Status helpers for fallible C++ code: Abseil 2022 ships no RETURN_IF_ERROR, so we write it once.
// Use FFLITE_RETURN_IF_ERROR(expr) and FFLITE_ASSIGN_OR_RETURN(lhs, expr) everywhere.
#ifndef FFLITE_RUNTIME_SRC_BASE_STATUS_MACROS_H_
#define FFLITE_RUNTIME_SRC_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FFLITE_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::absl::Status fflite_status_ = (expr);       \
    if (!fflite_status_.ok()) return fflite_status_; \
  } while (0)

#define FFLITE_CONCAT_INNER_(a, b) a##b
#define FFLITE_CONCAT_(a, b) FFLITE_CONCAT_INNER_(a, b)

#define FFLITE_ASSIGN_OR_RETURN(lhs, expr) \
  FFLITE_ASSIGN_OR_RETURN_IMPL_(FFLITE_CONCAT_(fflite_statusor_, __LINE__), lhs, expr)

#define FFLITE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // FFLITE_RUNTIME_SRC_BASE_STATUS_MACROS_H_
