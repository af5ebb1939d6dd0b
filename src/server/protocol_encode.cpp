// MessagePack encoding of kvtierd frames (the decoder is protocol_codec.cpp).
#include <cstring>
#include <msgpack.hpp>

#include "kvtier/server/protocol.h"

namespace kvtier::server {
namespace {

// Packs one message into this thread's reusable buffer, then appends it to `frame` whole
// (a string append per packed piece costs more than the packing).
template <class Pack>
void append_packed(std::string& frame, Pack&& pack) {
  thread_local msgpack::sbuffer buffer;
  buffer.clear();
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pack(pk);
  frame.append(buffer.data(), buffer.size());
}

// MessagePack written by hand into a buffer sized beforehand, in the forms msgpack-c's packer
// picks (the smallest), for the messages sent by the thousand.
class DirectWriter {
 public:
  explicit DirectWriter(char* at) : p_(at) {}
  char* end() const { return p_; }

  void raw(std::string_view bytes) {
    std::memcpy(p_, bytes.data(), bytes.size());
    p_ += bytes.size();
  }
  void uint(uint64_t v) {
    if (v < 0x80) {
      *p_++ = static_cast<char>(v);
    } else if (v <= 0xff) {
      tagged(0xcc, v, 1);
    } else if (v <= 0xffff) {
      tagged(0xcd, v, 2);
    } else if (v <= 0xffffffff) {
      tagged(0xce, v, 4);
    } else {
      tagged(0xcf, v, 8);
    }
  }
  void array(size_t n) {
    if (n < 16) {
      *p_++ = static_cast<char>(0x90 | n);
    } else if (n <= 0xffff) {
      tagged(0xdc, n, 2);
    } else {
      tagged(0xdd, n, 4);
    }
  }
  void key(const ChunkKey& k) {  // a 16-byte bin, little-endian halves as pack_keys packs them
    *p_++ = static_cast<char>(0xc4);
    *p_++ = 16;
    std::memcpy(p_, &k.lo, 8);
    std::memcpy(p_ + 8, &k.hi, 8);
    p_ += 16;
  }

  static constexpr size_t kMaxUint = 9;
  static constexpr size_t kMaxArray = 5;
  static constexpr size_t kKey = 18;

 private:
  void tagged(uint8_t tag, uint64_t v, size_t width) {
    *p_++ = static_cast<char>(tag);
    for (size_t i = width; i-- > 0;) *p_++ = static_cast<char>(v >> (8 * i));
  }
  char* p_;
};

void pack_keys(msgpack::packer<msgpack::sbuffer>& pk, std::span<const ChunkKey> keys) {
  pk.pack("keys");
  pk.pack_array(static_cast<uint32_t>(keys.size()));
  for (const ChunkKey& k : keys) {
    char bytes[16];
    std::memcpy(bytes, &k.lo, 8);
    std::memcpy(bytes + 8, &k.hi, 8);
    pk.pack_bin(16);
    pk.pack_bin_body(bytes, 16);
  }
}

void pack_request(msgpack::packer<msgpack::sbuffer>& pk, const Request& r) {
  const bool keyed = r.op == Op::kLookup || r.op == Op::kStore || r.op == Op::kRetrieve ||
                     r.op == Op::kPin || r.op == Op::kUnpin;
  const bool moves = r.op == Op::kStore || r.op == Op::kRetrieve;
  const bool hooked = r.hook != TestHook::kNone;
  uint32_t n = 3 + (hooked ? 1 : 0);
  if (r.op == Op::kRegister) n += 3;
  if (keyed) n += 1;
  if (r.op == Op::kLookup) n += 1;
  if (moves) n += 2;
  if (r.op == Op::kRetrieve || r.op == Op::kRelease) n += 1;
  if (r.op == Op::kPin) n += 1;
  pk.pack_map(n);
  pk.pack("v"), pk.pack(kProtocolVersion);
  pk.pack("id"), pk.pack(r.id);
  pk.pack("op"), pk.pack(std::string(to_string(r.op)));
  if (hooked) pk.pack("hook"), pk.pack(std::string(to_string(r.hook)));
  if (r.op == Op::kRegister) {
    pk.pack("rank"), pk.pack(r.rank);
    pk.pack("layout");
    pk.pack_map(2);
    pk.pack("device_layout"), pk.pack(std::string(to_string(r.layout.device_layout)));
    pk.pack("groups");
    pk.pack_array(static_cast<uint32_t>(r.layout.groups.size()));
    for (const KvGroup& g : r.layout.groups) {
      pk.pack_map(6);
      pk.pack("layers"), pk.pack(g.layers);
      pk.pack("kv_heads"), pk.pack(g.kv_heads);
      pk.pack("head_dim"), pk.pack(g.head_dim);
      pk.pack("dtype_bytes"), pk.pack(g.dtype_bytes);
      pk.pack("block_size"), pk.pack(g.block_size);
      pk.pack("blocks_per_chunk"), pk.pack(g.blocks_per_chunk);
    }
    pk.pack("memory");
    const bool memfd = r.memory.shm_name.empty();
    pk.pack_map(memfd ? 4 : 3);
    if (memfd) {
      pk.pack("pid"), pk.pack(r.memory.pid);
      pk.pack("fd"), pk.pack(r.memory.fd);
    } else {
      pk.pack("shm_name"), pk.pack(r.memory.shm_name);
    }
    pk.pack("bytes"), pk.pack(r.memory.bytes);
    pk.pack("groups");
    pk.pack_array(static_cast<uint32_t>(r.memory.groups.size()));
    for (const GroupTensors& g : r.memory.groups) {
      pk.pack_map(2);
      pk.pack("offsets"), pk.pack(g.offsets);
      pk.pack("num_blocks"), pk.pack(g.num_blocks);
    }
  }
  if (keyed) pack_keys(pk, r.keys);
  if (r.op == Op::kLookup) pk.pack("lock_ms"), pk.pack(r.lock_ms);
  if (moves) {
    pk.pack("group"), pk.pack(r.group);
    pk.pack("blocks"), pk.pack(r.blocks);
  }
  if (r.op == Op::kRetrieve || r.op == Op::kRelease) pk.pack("lock"), pk.pack(r.lock);
  if (r.op == Op::kPin) pk.pack("ttl_ms"), pk.pack(r.ttl_ms);
}

void pack_reply(msgpack::packer<msgpack::sbuffer>& pk, const Reply& r) {
  // A decoded reply's fields hold its "v" too: packed once, by the envelope (a field named twice
  // is malformed).
  uint32_t n = 3 + (r.ok ? 0 : 2) + (r.event.empty() ? 0 : 1);
  for (const auto& [k, v] : r.fields) n += k == "v" ? 0 : 1;
  pk.pack_map(n);
  pk.pack("v"), pk.pack(kProtocolVersion);
  pk.pack("id"), pk.pack(r.id);
  pk.pack("ok"), pk.pack(r.ok);
  if (!r.ok) {
    pk.pack("code"), pk.pack(r.code);
    pk.pack("msg"), pk.pack(r.message.substr(0, kMaxErrorMessage));
  }
  if (!r.event.empty()) pk.pack("event"), pk.pack(r.event);
  for (const auto& [k, v] : r.fields) {
    if (k != "v") pk.pack(k), pk.pack(v);
  }
}

}  // namespace

std::string encode_request(const Request& r) {
  std::string frame;
  append_request(frame, r);
  return frame;
}

std::string encode_reply(const Reply& r) {
  std::string frame;
  append_reply(frame, r);
  return frame;
}

void append_request(std::string& frame, const Request& r) {
  if (r.op == Op::kLookup && r.hook == TestHook::kNone) {
    append_lookup_request(frame, r.id, r.keys, r.lock_ms);
    return;
  }
  append_packed(frame, [&](msgpack::packer<msgpack::sbuffer>& pk) { pack_request(pk, r); });
}

void append_lookup_request(std::string& frame, uint64_t id, std::span<const ChunkKey> keys,
                           uint64_t lock_ms) {
  // {"v": version, "id": id, "op": "LOOKUP", "keys": [bin16...], "lock_ms": lock_ms}
  static_assert(kProtocolVersion < 0x80 && sizeof(ChunkKey) == 16);
  constexpr std::string_view kHead = "\x85\xa1v";
  constexpr std::string_view kId = "\xa2id";
  constexpr std::string_view kOpKeys = "\xa2op\xa6LOOKUP\xa4keys";
  constexpr std::string_view kLockMs = "\xa7lock_ms";
  const size_t before = frame.size();
  frame.resize(before + kHead.size() + 1 + kId.size() + DirectWriter::kMaxUint + kOpKeys.size() +
               DirectWriter::kMaxArray + keys.size() * DirectWriter::kKey + kLockMs.size() +
               DirectWriter::kMaxUint);
  DirectWriter out(frame.data() + before);
  out.raw(kHead);
  out.uint(kProtocolVersion);
  out.raw(kId);
  out.uint(id);
  out.raw(kOpKeys);
  out.array(keys.size());
  for (const ChunkKey& k : keys) out.key(k);
  out.raw(kLockMs);
  out.uint(lock_ms);
  frame.resize(static_cast<size_t>(out.end() - frame.data()));
}

void append_reply(std::string& frame, const Reply& r) {
  append_packed(frame, [&](msgpack::packer<msgpack::sbuffer>& pk) { pack_reply(pk, r); });
}

void append_lookup_reply(std::string& frame, uint64_t id, uint64_t hits, bool pending,
                         uint64_t lock) {
  // The fields LookupAnswer::reply sets, as append_reply packs them: {"v", "id", "ok": true,
  // "hits", "pending": 0 or 1, "lock"}.
  constexpr std::string_view kHead = "\x86\xa1v";
  constexpr std::string_view kId = "\xa2id";
  constexpr std::string_view kOkHits = "\xa2ok\xc3\xa4hits";
  constexpr std::string_view kPending = "\xa7pending";
  constexpr std::string_view kLock = "\xa4lock";
  const size_t before = frame.size();
  frame.resize(before + kHead.size() + 1 + kId.size() + kOkHits.size() + kPending.size() + 1 +
               kLock.size() + 3 * DirectWriter::kMaxUint);
  DirectWriter out(frame.data() + before);
  out.raw(kHead);
  out.uint(kProtocolVersion);
  out.raw(kId);
  out.uint(id);
  out.raw(kOkHits);
  out.uint(hits);
  out.raw(kPending);
  out.uint(pending ? 1 : 0);
  out.raw(kLock);
  out.uint(lock);
  frame.resize(static_cast<size_t>(out.end() - frame.data()));
}

std::string_view BatchFrame::batch(size_t count) {
  char header[kHeaderRoom];
  DirectWriter out(header);
  out.array(count);
  const size_t n = static_cast<size_t>(out.end() - header);
  std::memcpy(bytes.data() + kHeaderRoom - n, header, n);
  return std::string_view(bytes).substr(kHeaderRoom - n);
}

std::string encode_batch(size_t count, std::string_view body) {
  BatchFrame frame;
  frame.bytes += body;
  return std::string(frame.batch(count));
}

}  // namespace kvtier::server
