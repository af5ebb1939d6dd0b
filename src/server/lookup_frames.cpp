#include "lookup_frames.h"

#include <cstring>
#include <string_view>

namespace kvtier::server {
namespace {

// A MessagePack reader over a frame for the few formats a LOOKUP frame uses. A read of anything
// else, or past the end, fails and leaves the reader failed.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> frame)
      : p_(reinterpret_cast<const uint8_t*>(frame.data())), end_(p_ + frame.size()) {}

  bool at_end() const { return ok_ && p_ == end_; }

  bool array(uint32_t& n) { return header(n, 0x90, 0xdc, 0xdd); }
  bool map(uint32_t& n) { return header(n, 0x80, 0xde, 0xdf); }

  bool uint(uint64_t& v) {
    const uint8_t t = byte();
    if (!ok_) return false;
    if (t <= 0x7f) {
      v = t;
      return true;
    }
    if (t < 0xcc || t > 0xcf) return fail();
    return big_endian(size_t{1} << (t - 0xcc), v);
  }

  bool str(std::string_view& s) {
    const uint8_t t = byte();
    uint64_t n = 0;
    if (!ok_) return false;
    if ((t & 0xe0) == 0xa0) {
      n = t & 0x1f;
    } else if (t < 0xd9 || t > 0xdb || !big_endian(size_t{1} << (t - 0xd9), n)) {
      return fail();
    }
    const uint8_t* body = bytes(n);
    if (!body) return false;
    s = std::string_view(reinterpret_cast<const char*>(body), n);
    return true;
  }

  bool boolean(bool& v) {
    const uint8_t t = byte();
    if (!ok_ || (t != 0xc2 && t != 0xc3)) return fail();
    v = t == 0xc3;
    return true;
  }

  // A 16-byte bin, as a key.
  bool key(ChunkKey& k) {
    if (byte() != 0xc4 || byte() != 16) return fail();
    const uint8_t* body = bytes(16);
    if (!body) return false;
    std::memcpy(&k.lo, body, 8);  // little-endian host, as the general decoder
    std::memcpy(&k.hi, body + 8, 8);
    return true;
  }

 private:
  bool fail() {
    ok_ = false;
    return false;
  }
  uint8_t byte() {
    if (!ok_ || p_ == end_) return fail(), 0;
    return *p_++;
  }
  const uint8_t* bytes(uint64_t n) {
    if (!ok_ || static_cast<uint64_t>(end_ - p_) < n) return fail(), nullptr;
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  bool big_endian(size_t width, uint64_t& v) {
    const uint8_t* b = bytes(width);
    if (!b) return false;
    v = 0;
    for (size_t i = 0; i < width; ++i) v = (v << 8) | b[i];
    return true;
  }
  // fix (low nibble), 16-bit or 32-bit count.
  bool header(uint32_t& n, uint8_t fix, uint8_t t16, uint8_t t32) {
    const uint8_t t = byte();
    if (!ok_) return false;
    if ((t & 0xf0) == fix) {
      n = t & 0x0f;
      return true;
    }
    uint64_t v = 0;
    if ((t != t16 && t != t32) || !big_endian(t == t16 ? 2 : 4, v)) return fail();
    n = static_cast<uint32_t>(v);
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

// One LOOKUP request map; its keys are appended to `keys`.
bool read_lookup(Reader& in, LookupItem& item, std::vector<ChunkKey>& keys) {
  uint32_t fields = 0;
  if (!in.map(fields)) return false;
  enum : unsigned { kV = 1, kId = 2, kOp = 4, kKeys = 8, kLockMs = 16 };
  unsigned seen = 0;
  item = LookupItem{.first_key = keys.size()};
  for (uint32_t f = 0; f < fields; ++f) {
    std::string_view name;
    if (!in.str(name)) return false;
    unsigned bit = 0;
    if (name == "v") {
      uint64_t v = 0;
      if (!in.uint(v) || v != kProtocolVersion) return false;
      bit = kV;
    } else if (name == "id") {
      if (!in.uint(item.id)) return false;
      bit = kId;
    } else if (name == "op") {
      std::string_view op;
      if (!in.str(op) || op != to_string(Op::kLookup)) return false;
      bit = kOp;
    } else if (name == "keys") {
      uint32_t n = 0;
      if (!in.array(n) || n > kMaxKeysPerRequest) return false;
      for (uint32_t k = 0; k < n; ++k) {
        if (!in.key(keys.emplace_back())) return false;
      }
      item.num_keys = n;
      bit = kKeys;
    } else if (name == "lock_ms") {
      if (!in.uint(item.lock_ms)) return false;
      bit = kLockMs;
    }
    if (bit == 0 || (seen & bit) != 0) return false;  // unknown or repeated
    seen |= bit;
  }
  return (seen | kLockMs) == (kV | kId | kOp | kKeys | kLockMs);
}

// One LOOKUP success reply map: each of its six fields exactly once.
bool read_lookup_reply(Reader& in, LookupReplyItem& reply) {
  uint32_t fields = 0;
  if (!in.map(fields) || fields != 6) return false;
  // Bit i of `seen`: kUnsigned[i] read; the last bit: "ok".
  static constexpr std::pair<std::string_view, uint64_t LookupReplyItem::*> kUnsigned[] = {
      {"id", &LookupReplyItem::id},
      {"v", &LookupReplyItem::v},
      {"hits", &LookupReplyItem::hits},
      {"pending", &LookupReplyItem::pending},
      {"lock", &LookupReplyItem::lock}};
  constexpr unsigned kOk = 1u << std::size(kUnsigned);
  unsigned seen = 0;
  for (uint32_t f = 0; f < fields; ++f) {
    std::string_view name;
    if (!in.str(name)) return false;
    unsigned bit = 0;
    bool read = false;
    if (name == "ok") {
      bool ok = false;
      read = in.boolean(ok) && ok;
      bit = kOk;
    }
    for (size_t i = 0; i < std::size(kUnsigned) && bit == 0; ++i) {
      if (name != kUnsigned[i].first) continue;
      read = in.uint(reply.*kUnsigned[i].second);
      bit = 1u << i;
    }
    if (!read || (seen & bit) != 0) return false;  // unknown, malformed or repeated
    seen |= bit;
  }
  return true;  // six fields, none repeated: every one of them
}

}  // namespace

bool read_lookup_frame(std::span<const std::byte> frame, const DecodeLimits& limits,
                       LookupFrame& out) {
  if (frame.size() > limits.max_frame_bytes) return false;
  out.items.clear();
  out.keys.clear();
  Reader in(frame);
  uint32_t count = 1;
  out.batch = is_batch_frame(frame);
  if (out.batch && (!in.array(count) || count == 0 || count > kMaxBatchRequests)) return false;
  for (uint32_t i = 0; i < count; ++i) {
    if (!read_lookup(in, out.items.emplace_back(), out.keys)) return false;
  }
  return in.at_end();
}

Reply LookupReplyItem::to_reply() const {
  Reply r{.id = id, .ok = true};
  r.fields = {{"v", v}, {"hits", hits}, {"pending", pending}, {"lock", lock}};
  return r;
}

bool read_lookup_replies(std::span<const std::byte> frame, std::vector<LookupReplyItem>& out) {
  Reader in(frame);
  uint32_t count = 0;
  // The count is the peer's word: bounded before anything is allocated for it (a server sends
  // at most one reply per request of a batch).
  if (!is_batch_frame(frame) || !in.array(count) || count == 0 || count > kMaxBatchRequests) {
    return false;
  }
  out.resize(count);
  for (LookupReplyItem& reply : out) {
    if (!read_lookup_reply(in, reply)) return false;
  }
  return in.at_end();
}

}  // namespace kvtier::server
