#include "record_flips.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

namespace kvtier::bench {
namespace {

constexpr size_t kBlock = 4096;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

bool flip_disk_record(const std::filesystem::path& directory, std::mt19937_64& rng) {
  std::vector<std::filesystem::path> segments;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec)) {
    if (entry.path().extension() == ".kvs") segments.push_back(entry.path());
  }
  if (segments.empty()) return false;
  const std::filesystem::path segment = segments[rng() % segments.size()];
  const int fd = ::open(segment.c_str(), O_RDWR | O_DIRECT);
  if (fd < 0) return false;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const std::unique_ptr<unsigned char, FreeDeleter> page(
      static_cast<unsigned char*>(std::aligned_alloc(kBlock, kBlock)));
  bool flipped = false;
  for (int attempt = 0; attempt < 32 && size >= static_cast<off_t>(kBlock) && !flipped; ++attempt) {
    const off_t offset =
        static_cast<off_t>(rng() % (static_cast<uint64_t>(size) / kBlock) * kBlock);
    if (::pread(fd, page.get(), kBlock, offset) != static_cast<ssize_t>(kBlock)) break;
    if (std::all_of(page.get(), page.get() + kBlock, [](unsigned char b) { return b == 0; }))
      continue;
    page.get()[rng() % kBlock] ^= static_cast<unsigned char>(1u << (rng() % 8));
    flipped = ::pwrite(fd, page.get(), kBlock, offset) == static_cast<ssize_t>(kBlock);
  }
  ::close(fd);
  return flipped;
}

bool flip_redis_record(const RedisServerProcess& redis, std::mt19937_64& rng) {
  const auto timeout = std::chrono::milliseconds(200);
  const Result<std::string> key = redis.command({"RANDOMKEY"}, timeout);
  if (!key || key->empty()) return false;
  const Result<std::string> length = redis.command({"STRLEN", *key}, timeout);
  if (!length) return false;
  const uint64_t n = std::strtoull(length->c_str(), nullptr, 10);
  if (n == 0) return false;
  const std::string at = std::to_string(rng() % n);
  const Result<std::string> byte = redis.command({"GETRANGE", *key, at, at}, timeout);
  if (!byte || byte->size() != 1) return false;
  std::string flipped = *byte;
  flipped[0] = static_cast<char>(flipped[0] ^ static_cast<char>(1u << (rng() % 8)));
  return redis.command({"SETRANGE", *key, at, flipped}, timeout).has_value();
}

}  // namespace kvtier::bench
