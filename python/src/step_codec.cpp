// StepMetadata as bytes: little-endian fixed-width integers and length-prefixed strings, read
// back exactly. Truncated or trailing bytes are kvtier.Error(invalid_argument).
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "binding.h"

namespace kvtier::python {
namespace {

static_assert(std::endian::native == std::endian::little, "the codec writes native integers");

constexpr uint32_t kMagic = 0x4b565331;  // "KVS1"

class Writer {
 public:
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  uint32_t u32() {
    uint32_t v;
    raw(&v, sizeof v);
    return v;
  }
  uint64_t u64() {
    uint64_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    const uint64_t n = count(1);
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  // A length that the remaining bytes can hold at `min_bytes` per element.
  uint64_t count(size_t min_bytes) {
    const uint64_t n = u64();
    if (n > in_.size() / min_bytes) bad();
    return n;
  }
  void end() const {
    if (!in_.empty()) bad();
  }

 private:
  [[noreturn]] static void bad() {
    throw KvError(ErrorCode::kInvalidArgument, "StepMetadata bytes: truncated or malformed");
  }
  void raw(void* p, size_t n) {
    if (in_.size() < n) bad();
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
  }
  std::string_view in_;
};

void write_jobs(Writer& w, const std::vector<TransferJob>& jobs) {
  w.u64(jobs.size());
  for (const TransferJob& j : jobs) {
    w.u64(j.job);
    w.str(j.request);
    w.u64(j.chunks.size());
    for (const ChunkTransfer& c : j.chunks) {
      w.u32(c.group);
      w.u32(c.slot);
      w.u32(c.first_block);
      w.u64(c.blocks.size());
      for (uint32_t b : c.blocks) w.u32(b);
    }
    w.u64(j.keys.size());
    for (const ChunkKey& k : j.keys) {
      w.u64(k.lo);
      w.u64(k.hi);
    }
  }
}

std::vector<TransferJob> read_jobs(Reader& r) {
  std::vector<TransferJob> jobs(r.count(24));
  for (TransferJob& j : jobs) {
    j.job = r.u64();
    j.request = r.str();
    j.chunks.resize(r.count(20));
    for (ChunkTransfer& c : j.chunks) {
      c.group = r.u32();
      c.slot = r.u32();
      c.first_block = r.u32();
      c.blocks.resize(r.count(4));
      for (uint32_t& b : c.blocks) b = r.u32();
    }
    j.keys.resize(r.count(16));
    for (ChunkKey& k : j.keys) {
      k.lo = r.u64();
      k.hi = r.u64();
    }
  }
  return jobs;
}

}  // namespace

std::string encode_step_metadata(const StepMetadata& metadata) {
  Writer w;
  w.u32(kMagic);
  w.u64(metadata.step);
  write_jobs(w, metadata.loads);
  write_jobs(w, metadata.stores);
  w.u64(metadata.flush.size());
  for (JobId j : metadata.flush) w.u64(j);
  return w.take();
}

StepMetadata decode_step_metadata(std::string_view bytes) {
  Reader r(bytes);
  if (r.u32() != kMagic) {
    throw KvError(ErrorCode::kInvalidArgument, "StepMetadata bytes: not kvtier step metadata");
  }
  StepMetadata m;
  m.step = r.u64();
  m.loads = read_jobs(r);
  m.stores = read_jobs(r);
  m.flush.resize(r.count(8));
  for (JobId& j : m.flush) j = r.u64();
  r.end();
  return m;
}

}  // namespace kvtier::python
