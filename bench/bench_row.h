// One result row of a `kvtier bench` run: a JSON object printed as one JSON Lines line, or as
// "key=value" cells for people (the "bench" field left out, floats with 2 decimals).
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

namespace kvtier::bench {

void emit(std::ostream& out, bool json, const nlohmann::ordered_json& row);

}  // namespace kvtier::bench
