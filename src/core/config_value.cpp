#include "config_value.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace kvtier {
namespace {

constexpr std::array kCacheModes{CacheMode::kLocal, CacheMode::kServer};
constexpr std::array kGranularities{TransferGranularity::kLayer, TransferGranularity::kRequest};
constexpr std::array kFaultDirections{FaultDirection::kBoth, FaultDirection::kLoad,
                                      FaultDirection::kStore};

}  // namespace

std::string_view to_string(CacheMode mode) {
  switch (mode) {
    case CacheMode::kLocal:
      return "local";
    case CacheMode::kServer:
      return "server";
  }
  return "?";
}

std::string_view to_string(TransferGranularity granularity) {
  switch (granularity) {
    case TransferGranularity::kLayer:
      return "layer";
    case TransferGranularity::kRequest:
      return "request";
  }
  return "?";
}

std::string_view to_string(FaultDirection direction) {
  switch (direction) {
    case FaultDirection::kBoth:
      return "both";
    case FaultDirection::kLoad:
      return "load";
    case FaultDirection::kStore:
      return "store";
  }
  return "?";
}

}  // namespace kvtier

namespace kvtier::config_internal {
namespace {

__extension__ using Uint128 = unsigned __int128;

std::unexpected<Error> invalid(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

// The whole of `text` as a T, or nothing: no leading blanks, no trailing characters, no
// wrap-around (from_chars reports values out of T's range).
template <class T>
std::optional<T> parse_whole(std::string_view text) {
  T value{};
  const char* end = text.data() + text.size();
  // from_chars reads [data, end), never up to a terminator.
  // NOLINTNEXTLINE(bugprone-suspicious-stringview-data-usage)
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::string format_double(double value) {
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, value);  // shortest exact form
  return std::string(buf, ptr);
}

struct Unit {
  std::string_view name;
  uint64_t bytes;
};
constexpr Unit kUnits[] = {
    {"B", 1},
    {"KB", 1'000},
    {"MB", 1'000'000},
    {"GB", 1'000'000'000},
    {"TB", 1'000'000'000'000},
    {"KiB", uint64_t{1} << 10},
    {"MiB", uint64_t{1} << 20},
    {"GiB", uint64_t{1} << 30},
    {"TiB", uint64_t{1} << 40},
};

// Exact decimal arithmetic: "1.1GB" is 1100000000 bytes, "0.1KiB" (102.4) is an error.
Result<uint64_t> parse_byte_count(std::string_view text) {
  uint64_t digits = 0;  // every digit, the point removed
  int fraction_digits = 0;
  bool any_digit = false;
  bool point = false;
  size_t i = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    any_digit = true;
    fraction_digits += point ? 1 : 0;
    if (__builtin_mul_overflow(digits, uint64_t{10}, &digits) ||
        __builtin_add_overflow(digits, uint64_t(c - '0'), &digits)) {
      return invalid("must be at most 2^64-1 bytes, got " + quoted(text));
    }
  }
  std::string_view unit_name = text.substr(i);
  unit_name.remove_prefix(std::min(unit_name.find_first_not_of(' '), unit_name.size()));
  const Unit* unit = unit_name.empty() ? &kUnits[0] : nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit_name) unit = &u;
  }
  if (!any_digit || unit == nullptr) {
    return invalid(
        "must be a number of bytes, optionally with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, "
        "TiB), e.g. 512MiB or 1.5GB; got " +
        quoted(text));
  }
  // scaled < 2^64 * 2^40 < 10^32, so capping the divisor at 10^33 keeps the result exact.
  const Uint128 scaled = Uint128{digits} * unit->bytes;
  Uint128 divisor = 1;
  for (int k = 0; k < std::min(fraction_digits, 33); ++k) divisor *= 10;
  if (scaled % divisor != 0) return invalid("must be a whole number of bytes, got " + quoted(text));
  if (scaled / divisor > std::numeric_limits<uint64_t>::max()) {
    return invalid("must be at most 2^64-1 bytes, got " + quoted(text));
  }
  return static_cast<uint64_t>(scaled / divisor);
}

// The largest binary unit that divides `bytes`: 1073741824 is "1GiB".
std::string format_byte_count(uint64_t bytes) {
  static constexpr const char* kBinaryUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  for (int i = 3; i >= 0; --i) {
    const uint64_t unit = uint64_t{1} << (10 * (i + 1));
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + kBinaryUnits[i];
  }
  return std::to_string(bytes);
}

template <class T>
Status accept_any(const T&) {
  return {};
}

// "a | b | c": the names of `all`, in order.
template <class E, size_t N>
std::string names_of(const std::array<E, N>& all) {
  std::string names;
  for (E value : all) names += (names.empty() ? "" : " | ") + std::string(to_string(value));
  return names;
}

// The value of `all` named `text` exactly.
template <class E, size_t N>
Result<E> parse_name(std::string_view text, const std::array<E, N>& all) {
  for (E value : all) {
    if (to_string(value) == text) return value;
  }
  return invalid("must be one of " + names_of(all) + ", got " + quoted(text));
}

template <class E, size_t N>
ConfigValue<E> enumeration(const std::array<E, N>& all) {
  return {
      .values = names_of(all),
      .parse = [all](std::string_view text) { return parse_name(text, all); },
      .check = accept_any<E>,
      .format = [](const E& value) { return std::string(to_string(value)); },
  };
}

// Every duration is at most a year: a time point that far ahead still fits a clock's
// nanoseconds (a much larger one would wrap to the past, or overflow converting to them).
constexpr double kMaxSeconds = 365.0 * 24 * 3600;

Status at_most_a_year(double seconds) {
  if (seconds <= kMaxSeconds) return {};
  return invalid("must be at most one year (31536000 s), got " + format_double(seconds));
}

// And a duration other than 0 is at least a microsecond: one that is less may truncate to 0 ns
// (a deadline of 1e-10 s would pass at once).
constexpr double kMinSeconds = 1e-6;

}  // namespace

ConfigValue<double> positive_seconds() {
  return {
      .values = "seconds, from a microsecond (0.000001) to a year (31536000)",
      .parse = [](std::string_view text) -> Result<double> {
        // from_chars reads "nan" and "inf" too: the rule below, not the syntax, rejects them.
        if (auto value = parse_whole<double>(text)) return *value;
        return invalid("must be a number of seconds, got " + quoted(text));
      },
      .check = [](const double& value) -> Status {
        if (!std::isfinite(value) || value < kMinSeconds) {
          return invalid("must be a finite number of at least 0.000001 (a microsecond), got " +
                         format_double(value));
        }
        return at_most_a_year(value);
      },
      .format = format_double,
  };
}

ConfigValue<double> seconds_or_zero() {
  ConfigValue<double> value = positive_seconds();
  value.values = "seconds, 0 (off) or from a microsecond (0.000001) to a year (31536000)";
  value.check = [](const double& seconds) -> Status {
    if (!std::isfinite(seconds) || seconds < 0 || (seconds > 0 && seconds < kMinSeconds)) {
      return invalid("must be 0 or a finite number of at least 0.000001 (a microsecond), got " +
                     format_double(seconds));
    }
    return at_most_a_year(seconds);
  };
  return value;
}

ConfigValue<double> fraction() {
  return {
      .values = "a number in [0, 1]",
      .parse = [](std::string_view text) -> Result<double> {
        if (auto value = parse_whole<double>(text)) return *value;
        return invalid("must be a number in [0, 1], got " + quoted(text));
      },
      .check = [](const double& value) -> Status {
        if (!std::isfinite(value) || value < 0 || value > 1) {
          return invalid("must be a number in [0, 1], got " + format_double(value));
        }
        return {};
      },
      .format = format_double,
  };
}

ConfigValue<uint32_t> integer_in(uint32_t lo, uint32_t hi) {
  const std::string values = "integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return {
      .values = values,
      .parse = [values](std::string_view text) -> Result<uint32_t> {
        if (auto value = parse_whole<uint32_t>(text)) return *value;
        return invalid("must be an " + values + ", got " + quoted(text));
      },
      .check = [values, lo, hi](const uint32_t& value) -> Status {
        if (value < lo || value > hi) {
          return invalid("must be an " + values + ", got " + std::to_string(value));
        }
        return {};
      },
      .format = [](const uint32_t& value) { return std::to_string(value); },
  };
}

ConfigValue<bool> boolean() {
  return {
      .values = "true | false",
      .parse = [](std::string_view text) -> Result<bool> {
        if (text == "true") return true;
        if (text == "false") return false;
        return invalid("must be true or false, got " + quoted(text));
      },
      .check = accept_any<bool>,
      .format = [](const bool& value) -> std::string { return value ? "true" : "false"; },
  };
}

ConfigValue<uint64_t> byte_size() {
  return {
      .values = "size > 0: bytes, or with a unit, e.g. 512MiB, 4GiB, 1.5GB",
      .parse = parse_byte_count,
      .check = [](const uint64_t& bytes) -> Status {
        if (bytes == 0) return invalid("must be > 0 bytes, got 0");
        return {};
      },
      .format = format_byte_count,
  };
}

ConfigValue<std::string> text() {
  return {
      .values = "string",
      .parse = [](std::string_view text) -> Result<std::string> { return std::string(text); },
      .check = accept_any<std::string>,
      .format = [](const std::string& value) { return value; },
  };
}

ConfigValue<std::string> one_of(std::initializer_list<std::string_view> names) {
  ConfigValue<std::string> value = text();
  std::vector<std::string> accepted(names.begin(), names.end());
  value.values.clear();
  for (const std::string& name : accepted) {
    value.values += (value.values.empty() ? "" : " | ") + name;
  }
  value.check = [accepted, values = value.values](const std::string& name) -> Status {
    if (std::ranges::find(accepted, name) == accepted.end()) {
      return invalid("must be one of " + values + ", got " + quoted(std::string_view(name)));
    }
    return {};
  };
  return value;
}

ConfigValue<DeviceLayout> device_layout() {
  std::string values;
  for (DeviceLayout layout : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    values += (values.empty() ? "" : " | ") + std::string(to_string(layout));
  }
  return {
      .values = values,
      .parse = [values](std::string_view text) -> Result<DeviceLayout> {
        if (auto layout = parse_device_layout(text)) return *layout;
        return invalid("must be one of " + values + ", got " + quoted(text));
      },
      .check = accept_any<DeviceLayout>,
      .format = [](const DeviceLayout& layout) { return std::string(to_string(layout)); },
  };
}

ConfigValue<CacheMode> cache_mode() {
  return enumeration(kCacheModes);
}

ConfigValue<TransferGranularity> transfer_granularity() {
  return enumeration(kGranularities);
}

ConfigValue<FaultDirection> fault_direction() {
  return enumeration(kFaultDirections);
}

}  // namespace kvtier::config_internal

namespace kvtier {

Result<CacheMode> parse_cache_mode(std::string_view name) {
  return config_internal::parse_name(name, kCacheModes);
}

Result<TransferGranularity> parse_transfer_granularity(std::string_view name) {
  return config_internal::parse_name(name, kGranularities);
}

Result<FaultDirection> parse_fault_direction(std::string_view name) {
  return config_internal::parse_name(name, kFaultDirections);
}

}  // namespace kvtier
