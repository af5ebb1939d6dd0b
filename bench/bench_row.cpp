#include "bench_row.h"

#include <iomanip>
#include <sstream>

namespace kvtier::bench {

void emit(std::ostream& out, bool json, const nlohmann::ordered_json& row) {
  if (json) {
    out << row.dump() << "\n";
    return;
  }
  for (const auto& [k, v] : row.items()) {
    if (k == "bench") continue;
    std::ostringstream cell;
    if (v.is_number_float()) {
      cell << std::fixed << std::setprecision(v.get<double>() >= 1000 ? 0 : 2) << v.get<double>();
    } else if (v.is_string()) {
      cell << v.get<std::string>();
    } else {
      cell << v.dump();
    }
    out << k << "=" << std::left << std::setw(12) << cell.str() << " ";
  }
  out << "\n";
}

}  // namespace kvtier::bench
