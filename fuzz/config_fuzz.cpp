// libFuzzer target for the configuration: a YAML document and --set overrides. The input is the
// YAML text, then after a NUL byte the overrides, one per NUL-separated piece. Every input must
// load or give an error with a message (never crash, hang, leak or trip a sanitizer), and a
// loaded configuration must be valid, survive to_yaml() and parse back equal, and read back each
// overridden field through config_value() as the value that sets it again unchanged.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/config.h"

namespace {

void check_error(const kvtier::Error& error) {
  if (error.code != kvtier::ErrorCode::kInvalidArgument || error.message.empty()) std::abort();
}

// A loaded configuration is valid and reads back equal through its YAML form. The YAML round
// trip is most of an execution's time, so a configuration seen lately is not checked again.
void check_loaded(const kvtier::Config& config) {
  static std::vector<kvtier::Config> checked;
  if (std::ranges::find(checked, config) != checked.end()) return;
  if (checked.size() == 256) checked.clear();
  checked.push_back(config);
  if (!config.validate()) std::abort();
  auto again = kvtier::parse_config_yaml(kvtier::to_yaml(config));
  if (!again || *again != config) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string_view::npos && at < input.size();) {
    const size_t next = input.find('\0', at + 1);
    overrides.emplace_back(
        input.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    at = next;
  }

  kvtier::Config config;
  if (auto loaded = kvtier::parse_config_yaml(yaml); loaded) {
    check_loaded(*loaded);
    config = *loaded;
  } else {
    check_error(loaded.error());
  }
  if (overrides.empty()) return 0;
  auto overridden = kvtier::with_overrides(config, overrides);
  if (!overridden) {
    check_error(overridden.error());
    return 0;
  }
  check_loaded(*overridden);
  for (const std::string& override : overrides) {
    const std::string key = override.substr(0, override.find('='));
    auto value = kvtier::config_value(*overridden, key);
    if (!value) std::abort();
    auto again = kvtier::with_overrides(*overridden, {key + "=" + *value});
    if (!again || *again != *overridden) std::abort();
  }
  return 0;
}
