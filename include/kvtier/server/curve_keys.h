// CURVE key pairs: kvtierd's authentication over tcp:// (ZeroMQ's CurveZMQ; docs/operations.md).
// A key is 32 bytes written as 40 characters of Z85. kvtierd has one key pair and admits the
// clients whose public keys its tenants file lists; a client has its own key pair and knows the
// server's public key.
//
// A key pair file (what `kvtier keygen` writes) is YAML of two quoted strings, and must not be
// readable by group or others (it holds the secret key):
//   public: "<40 Z85 characters>"
//   secret: "<40 Z85 characters>"
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kvtier/core/status.h"

namespace kvtier::server {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// Whether this libzmq was built with CURVE (zmq_has("curve")).
bool curve_available();
// Whether `z85` is a key: 40 characters that decode as Z85.
bool valid_curve_key(std::string_view z85);
// A fresh key pair; kUnimplemented when libzmq has no CURVE.
Result<CurveKeyPair> generate_curve_key_pair();
// Writes a new key pair file with mode 0600; an existing file is an error (never overwritten).
Status write_curve_key_pair(const std::filesystem::path& path, const CurveKeyPair& keys);
// Reads a key pair file. kInvalidArgument naming the file when it cannot be read, is readable
// by group or others, is not the format above, holds an invalid key, or its public key is not
// the secret key's.
Result<CurveKeyPair> read_curve_key_pair(const std::filesystem::path& path);

}  // namespace kvtier::server
