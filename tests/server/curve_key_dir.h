// CurveKeyDir: a private temporary directory of CURVE key pair files (as `kvtier keygen` writes
// them) and tenants files for kvtierd's access-control tests; removed with the object.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "kvtier/server/curve_keys.h"

namespace kvtier::testing {

class CurveKeyDir {
 public:
  CurveKeyDir() {
    std::string pattern = "/tmp/kvtier-keys-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~CurveKeyDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  CurveKeyDir(const CurveKeyDir&) = delete;
  CurveKeyDir& operator=(const CurveKeyDir&) = delete;

  // A new key pair, written to <name>.key (mode 0600).
  server::CurveKeyPair make(const std::string& name) {
    auto keys = server::generate_curve_key_pair();
    if (!keys) throw std::runtime_error(keys.error().message);
    if (!server::write_curve_key_pair(file(name + ".key"), *keys)) {
      throw std::runtime_error("cannot write the key pair " + name);
    }
    return *keys;
  }
  std::filesystem::path write(const std::string& name, const std::string& text) {
    std::ofstream(file(name)) << text;
    return file(name);
  }
  std::filesystem::path file(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvtier::testing
