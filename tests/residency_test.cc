// The backend-neutral expert residency list: least recently used entries are dropped first, only
// as many as the budget needs, nothing without a budget, and the bytes add up.
#include "moe/residency.h"

#include <vector>

#include "gtest/gtest.h"

namespace fflite {
namespace {

TEST(ExpertResidencyTest, DropsLeastRecentlyUsedUntilTheNewEntryFits) {
  ExpertResidency r;
  r.Init(4, /*budget=*/250);
  for (size_t e = 0; e < 4; ++e) r.SetBytes(e, 100);
  std::vector<size_t> evicted;
  auto make = [&](size_t e) {
    r.MakeRoom(e, [&](size_t victim) { evicted.push_back(victim); });
    r.Insert(e);
  };
  make(0);
  make(1);
  EXPECT_EQ(r.resident_bytes(), 200u);
  EXPECT_TRUE(evicted.empty());
  r.Touch(0);  // 1 is now the least recently used
  make(2);     // 300 > 250: drops 1 only
  EXPECT_EQ(evicted, std::vector<size_t>{1});
  EXPECT_TRUE(r.resident(0) && !r.resident(1) && r.resident(2));
  EXPECT_EQ(r.resident_bytes(), 200u);
  make(3);  // drops 0 (used before 2)
  EXPECT_EQ(evicted, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(r.resident_bytes(), 200u);
}

TEST(ExpertResidencyTest, BudgetBelowOneEntryKeepsOnlyTheOneInUse) {
  ExpertResidency r;
  r.Init(3, /*budget=*/1);
  for (size_t e = 0; e < 3; ++e) r.SetBytes(e, 10 + e);
  std::vector<size_t> evicted;
  for (size_t e = 0; e < 3; ++e) {
    r.MakeRoom(e, [&](size_t victim) { evicted.push_back(victim); });
    r.Insert(e);
    EXPECT_EQ(r.resident_bytes(), 10 + e);
  }
  EXPECT_EQ(evicted, (std::vector<size_t>{0, 1}));
}

TEST(ExpertResidencyTest, NoBudgetDropsNothing) {
  ExpertResidency r;
  r.Init(5, /*budget=*/0);
  for (size_t e = 0; e < 5; ++e) {
    r.SetBytes(e, 1000);
    r.MakeRoom(e, [](size_t) { ADD_FAILURE() << "evicted without a budget"; });
    r.Insert(e);
    r.Touch(e);
  }
  EXPECT_EQ(r.resident_bytes(), 5000u);
}

}  // namespace
}  // namespace fflite
