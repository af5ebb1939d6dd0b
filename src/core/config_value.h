// ConfigValue<T>: how a config field of type T is read from text, checked and written back.
// Private to config.cpp: each field of the table pairs a member with one of these.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "kvtier/core/config.h"
#include "kvtier/core/kv_layout.h"
#include "kvtier/core/status.h"

namespace kvtier::config_internal {

// Error messages say what was expected and what was given ("must be ..., got ..."); the
// caller prefixes the field and appends the source.
template <class T>
struct ConfigValue {
  std::string values;                                // what it accepts, for docs and --help
  std::function<Result<T>(std::string_view)> parse;  // the syntax of T, nothing more
  std::function<Status(const T&)> check;             // the field's rule
  std::function<std::string(const T&)> format;       // text that parse() reads back exactly
};

// A finite number of seconds > 0 (F8: a nonfinite or nonpositive deadline never fires or
// fires at once).
ConfigValue<double> positive_seconds();
// A finite number of seconds >= 0, where 0 turns the setting off.
ConfigValue<double> seconds_or_zero();
ConfigValue<uint32_t> integer_in(uint32_t lo, uint32_t hi);
// A probability: a finite number in [0, 1].
ConfigValue<double> fraction();
ConfigValue<bool> boolean();
// A byte count > 0: an integer, or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB,
// TiB) that is a whole number of bytes: "4GiB", "1.5GB". Never rounded or wrapped.
ConfigValue<uint64_t> byte_size();
ConfigValue<std::string> text();
ConfigValue<std::string> one_of(std::initializer_list<std::string_view> names);
ConfigValue<DeviceLayout> device_layout();
ConfigValue<CacheMode> cache_mode();
ConfigValue<TransferGranularity> transfer_granularity();
ConfigValue<FaultDirection> fault_direction();

}  // namespace kvtier::config_internal
