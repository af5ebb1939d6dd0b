#include "kvtier/server/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace kvtier::server {
namespace {

constexpr size_t kZ85KeyChars = 40;

std::unexpected<Error> bad_file(const std::filesystem::path& path, const std::string& what) {
  return make_error(ErrorCode::kInvalidArgument, "key pair file " + path.string() + ": " + what);
}

}  // namespace

bool curve_available() {
  return zmq_has("curve") != 0;
}

bool valid_curve_key(std::string_view z85) {
  if (z85.size() != kZ85KeyChars) return false;
  std::array<uint8_t, 32> raw{};
  const std::string text(z85);
  return zmq_z85_decode(raw.data(), text.c_str()) != nullptr;
}

Result<CurveKeyPair> generate_curve_key_pair() {
  if (!curve_available()) {
    return make_error(ErrorCode::kUnimplemented, "this libzmq was built without CURVE");
  }
  std::array<char, kZ85KeyChars + 1> pub{};
  std::array<char, kZ85KeyChars + 1> sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return make_error(ErrorCode::kInternal,
                      std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{.public_key = pub.data(), .secret_key = sec.data()};
}

Status write_curve_key_pair(const std::filesystem::path& path, const CurveKeyPair& keys) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot create " + path.string() + ": " + std::strerror(errno));
  }
  const std::string text =
      "# kvtier CURVE key pair (kvtier keygen). Keep it secret: the public key alone goes to\n"
      "# the other side (a client's into kvtierd's tenants file, the server's into its clients'\n"
      "# server.curve_server_key).\n"
      "public: \"" +
      keys.public_key + "\"\nsecret: \"" + keys.secret_key + "\"\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return make_error(ErrorCode::kInternal,
                      "cannot write " + path.string() + ": " + std::strerror(write_errno));
  }
  return {};
}

Result<CurveKeyPair> read_curve_key_pair(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return bad_file(path, std::strerror(errno));
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return bad_file(path, "holds a secret key but is readable by group or others (chmod 600)");
  }
  CurveKeyPair keys;
  try {
    const YAML::Node doc = YAML::LoadFile(path.string());
    if (!doc.IsMap() || !doc["public"] || !doc["secret"]) {
      return bad_file(path, "expected the fields 'public' and 'secret' (kvtier keygen)");
    }
    keys.public_key = doc["public"].as<std::string>();
    keys.secret_key = doc["secret"].as<std::string>();
  } catch (const YAML::Exception& e) {
    return bad_file(path, e.what());
  }
  if (!valid_curve_key(keys.public_key)) return bad_file(path, "'public' is not a Z85 key");
  if (!valid_curve_key(keys.secret_key)) return bad_file(path, "'secret' is not a Z85 key");
  std::array<char, kZ85KeyChars + 1> derived{};
  if (zmq_curve_public(derived.data(), keys.secret_key.c_str()) != 0 ||
      keys.public_key != derived.data()) {
    return bad_file(path, "'public' is not the public key of 'secret'");
  }
  return keys;
}

}  // namespace kvtier::server
