// gMock matchers for absl::Status / absl::StatusOr (Abseil 2022 ships none):
//   EXPECT_THAT(st, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("layers[0].ffn.up")));
//   EXPECT_THAT(st, IsOk());   ASSERT_OK_AND_ASSIGN(auto v, MakeV());
#ifndef FFLITE_TESTS_TESTING_STATUS_MATCHERS_H_
#define FFLITE_TESTS_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace fflite {
namespace testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has code ") + absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher, negation)) {
  const absl::Status& st = GetStatus(arg);
  *result_listener << "status is " << st;
  return st.code() == code &&
         ::testing::Matches(message_matcher)(std::string(st.message()));
}

MATCHER(IsOk, "is OK") {
  const absl::Status& st = GetStatus(arg);
  *result_listener << "status is " << st;
  return st.ok();
}

}  // namespace testing
}  // namespace fflite

#define FFLITE_TEST_CONCAT_INNER_(a, b) a##b
#define FFLITE_TEST_CONCAT_(a, b) FFLITE_TEST_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(FFLITE_TEST_CONCAT_(statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(so, lhs, expr)  \
  auto so = (expr);                                \
  ASSERT_TRUE(so.ok()) << so.status();             \
  lhs = std::move(so).value()
#define ASSERT_OK(expr) ASSERT_TRUE((expr).ok()) << (expr)
#define EXPECT_OK(expr) EXPECT_TRUE((expr).ok()) << (expr)

#endif  // FFLITE_TESTS_TESTING_STATUS_MATCHERS_H_
