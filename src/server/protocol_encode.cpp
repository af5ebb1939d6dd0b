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

// A msgpack stream into a fixed buffer, for a message of known small size (one append).
struct FixedStream {
  char data[96];
  size_t size = 0;
  void write(const char* p, size_t n) {
    std::memcpy(data + size, p, n);
    size += n;
  }
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

void pack_lookup(msgpack::packer<msgpack::sbuffer>& pk, uint64_t id, std::span<const ChunkKey> keys,
                 uint64_t lock_ms) {
  pk.pack_map(5);
  pk.pack("v"), pk.pack(kProtocolVersion);
  pk.pack("id"), pk.pack(id);
  const std::string_view op = to_string(Op::kLookup);
  pk.pack("op"), pk.pack_str(static_cast<uint32_t>(op.size())),
      pk.pack_str_body(op.data(), op.size());
  pack_keys(pk, keys);
  pk.pack("lock_ms"), pk.pack(lock_ms);
}

void pack_request(msgpack::packer<msgpack::sbuffer>& pk, const Request& r) {
  if (r.op == Op::kLookup && r.hook == TestHook::kNone) {
    pack_lookup(pk, r.id, r.keys, r.lock_ms);
    return;
  }
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
  uint32_t n =
      3 + static_cast<uint32_t>(r.fields.size()) + (r.ok ? 0 : 2) + (r.event.empty() ? 0 : 1);
  pk.pack_map(n);
  pk.pack("v"), pk.pack(kProtocolVersion);
  pk.pack("id"), pk.pack(r.id);
  pk.pack("ok"), pk.pack(r.ok);
  if (!r.ok) {
    pk.pack("code"), pk.pack(r.code);
    pk.pack("msg"), pk.pack(r.message.substr(0, kMaxErrorMessage));
  }
  if (!r.event.empty()) pk.pack("event"), pk.pack(r.event);
  for (const auto& [k, v] : r.fields) pk.pack(k), pk.pack(v);
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
  append_packed(frame, [&](msgpack::packer<msgpack::sbuffer>& pk) { pack_request(pk, r); });
}

void append_lookup_request(std::string& frame, uint64_t id, std::span<const ChunkKey> keys,
                           uint64_t lock_ms) {
  append_packed(frame,
                [&](msgpack::packer<msgpack::sbuffer>& pk) { pack_lookup(pk, id, keys, lock_ms); });
}

void append_reply(std::string& frame, const Reply& r) {
  append_packed(frame, [&](msgpack::packer<msgpack::sbuffer>& pk) { pack_reply(pk, r); });
}

void append_lookup_reply(std::string& frame, uint64_t id, uint64_t hits, bool pending,
                         uint64_t lock) {
  FixedStream stream;  // at most 1 + 2 + 2 + 3 + 9 + 3 + 1 + 5 + 9 + 5 + 9 + 8 + 1 = 58 bytes
  msgpack::packer<FixedStream> pk(stream);
  pk.pack_map(6);  // the fields LookupAnswer::reply sets, as append_reply packs them
  pk.pack("v"), pk.pack(kProtocolVersion);
  pk.pack("id"), pk.pack(id);
  pk.pack("ok"), pk.pack(true);
  pk.pack("hits"), pk.pack(hits);
  pk.pack("pending"), pk.pack(uint64_t{pending ? 1u : 0u});
  pk.pack("lock"), pk.pack(lock);
  frame.append(stream.data, stream.size);
}

std::string encode_batch(size_t count, std::string_view body) {
  std::string frame;
  frame.reserve(body.size() + 5);
  append_packed(frame, [&](msgpack::packer<msgpack::sbuffer>& pk) {
    pk.pack_array(static_cast<uint32_t>(count));
  });
  frame += body;
  return frame;
}

}  // namespace kvtier::server
