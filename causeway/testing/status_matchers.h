// GoogleTest helpers for absl::Status / absl::StatusOr, which Debian's abseil
// does not ship.
//
//   EXPECT_OK(DoThing());
//   ASSERT_OK_AND_ASSIGN(auto x, MakeX());
//   EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("array")));
#ifndef CAUSEWAY_TESTING_STATUS_MATCHERS_H_
#define CAUSEWAY_TESTING_STATUS_MATCHERS_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace causeway::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()),
                                       result_listener);
}

}  // namespace causeway::testing

#define CW_TESTING_CONCAT_INNER_(a, b) a##b
#define CW_TESTING_CONCAT_(a, b) CW_TESTING_CONCAT_INNER_(a, b)

#define EXPECT_OK(expr) EXPECT_TRUE(::causeway::testing::GetStatus(expr).ok()) \
    << ::causeway::testing::GetStatus(expr).ToString()
#define ASSERT_OK(expr)                                              \
  do {                                                               \
    const ::absl::Status cw_s_ = ::causeway::testing::GetStatus(expr); \
    ASSERT_TRUE(cw_s_.ok()) << cw_s_.ToString();                     \
  } while (false)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(CW_TESTING_CONCAT_(cw_statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(var, lhs, expr) \
  auto var = (expr);                               \
  ASSERT_TRUE(var.ok()) << var.status().ToString(); \
  lhs = std::move(var).value()

#endif  // CAUSEWAY_TESTING_STATUS_MATCHERS_H_
