// The backend-neutral expert residency list: least recently used entries are dropped first (or,
// frequency-aware, the least used lately among them), only as many as the budget needs, nothing
// without a budget, and the bytes add up.
#include "moe/residency.h"

#include <vector>

#include "gtest/gtest.h"

namespace fflite {
namespace {

TEST(ExpertResidencyTest, DropsLeastRecentlyUsedUntilTheNewEntryFits) {
  ExpertResidency r;
  r.Init(4, /*budget=*/250, ResidencyPolicy::kLru);
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

// The frequency-aware policy drops the entry used least often lately among the least recently
// used ones (the least recent on ties), and old uses fade: an entry used often long ago goes.
TEST(ExpertResidencyTest, FrequencyAwareKeepsTheOftenUsed) {
  // Four entries of 100 bytes under `budget`, recording what the list drops.
  struct List {
    ExpertResidency r;
    std::vector<size_t> evicted;
    List(uint64_t budget, ResidencyPolicy policy) {
      r.Init(4, budget, policy);
      for (size_t e = 0; e < 4; ++e) r.SetBytes(e, 100);
    }
    void Make(size_t e) {
      r.MakeRoom(e, [this](size_t victim) { evicted.push_back(victim); });
      r.Insert(e);
    }
  };
  for (const ResidencyPolicy policy : {ResidencyPolicy::kLru, ResidencyPolicy::kFrequency}) {
    List l(300, policy);
    l.Make(0);
    for (int i = 0; i < 5; ++i) l.r.Touch(0);
    l.Make(1);
    l.Make(2);
    l.Make(3);  // LRU drops 0 (the least recent); frequency-aware drops 1 (1 use, before 2)
    EXPECT_EQ(l.evicted, std::vector<size_t>{policy == ResidencyPolicy::kLru ? 0u : 1u});
  }
  List l(300, ResidencyPolicy::kFrequency);  // half-life: 64 touches
  l.Make(0);
  for (int i = 0; i < 8; ++i) l.r.Touch(0);
  l.Make(1);
  l.Make(2);
  for (int i = 0; i < 300; ++i) l.r.Touch(1 + i % 2);  // 9 uses of 0 fade to ~0.4
  l.Make(3);
  EXPECT_EQ(l.evicted, std::vector<size_t>{0});
  // Victim honours what may not be dropped.
  EXPECT_EQ(l.r.Victim([](size_t x) { return x == 2; }), 2);
  EXPECT_EQ(l.r.Victim([](size_t) { return false; }), -1);
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
