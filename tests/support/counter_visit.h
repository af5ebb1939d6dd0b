// expect_visits_every_field<T>(): checks that visit_counters(const T&, f) (counter_kind.h)
// reports every field of the counter struct T exactly once, with its value, under a name of its
// own. So a field added to T without a line in its visitor fails the test of T.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

#include "kvtier/core/counter_kind.h"

namespace kvtier::testing {

// The kind visit_counters reported for each name, after checking every field was visited.
template <class T>
std::map<std::string, CounterKind> expect_visits_every_field() {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % sizeof(uint64_t) == 0,
                "a counter struct holds 64-bit fields only (uint64_t, size_t)");
  constexpr size_t kFields = sizeof(T) / sizeof(uint64_t);
  // Field i holds 1000 + i, so each value says which field it came from.
  uint64_t values[kFields];
  for (size_t i = 0; i < kFields; ++i) values[i] = 1000 + i;
  T counters;
  std::memcpy(&counters, values, sizeof counters);
  std::map<std::string, CounterKind> kinds;
  std::set<uint64_t> seen;
  visit_counters(counters, [&](std::string_view name, uint64_t value, CounterKind kind) {
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(kinds.emplace(std::string(name), kind).second) << "name visited twice: " << name;
    EXPECT_TRUE(value >= 1000 && value < 1000 + kFields) << name << " is not a field's value";
    EXPECT_TRUE(seen.insert(value).second) << name << " repeats field " << value - 1000;
  });
  EXPECT_EQ(seen.size(), kFields) << "every field is visited";
  return kinds;
}

}  // namespace kvtier::testing
