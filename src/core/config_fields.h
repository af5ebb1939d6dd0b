// The config field table: every field of Config, declared once with its name, doc and value
// type (config_value.h). Private to src/core: config.cpp drives parsing, overrides,
// validation, to_yaml() and describe() from it.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/config.h"

namespace kvtier::config_internal {

// One row: a member of Config, seen through text. Errors from set() and check() say what was
// expected and what was given; the caller prefixes key() and appends the source.
struct Field {
  std::string section;
  std::string name;
  std::string doc;
  std::string values;                                    // what it accepts
  std::function<Status(Config&, std::string_view)> set;  // parse, check, then store
  std::function<Status(const Config&)> check;
  std::function<std::string(const Config&)> get;  // text that set() reads back exactly

  std::string key() const { return section + "." + name; }  // "section.field"
  std::string env_var() const;                              // KVTIER_SECTION_FIELD
};

// Sections in order, fields in order within each. Thread-safe (built once, never changed).
const std::vector<Field>& config_fields();

// nullptr if no field has that key.
const Field* find_field(std::string_view key);
bool has_section(std::string_view section);

}  // namespace kvtier::config_internal
