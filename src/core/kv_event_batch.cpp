#include "kvtier/core/kv_event_batch.h"

#include <cmath>
#include <msgpack.hpp>

namespace kvtier {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_key(Packer& pk, const ChunkKey& key) {
  // As kvtierd's protocol writes a key: lo, then hi, each 8 bytes little-endian.
  char bytes[16];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<char>(key.lo >> (8 * i));
    bytes[8 + i] = static_cast<char>(key.hi >> (8 * i));
  }
  pk.pack_bin(16);
  pk.pack_bin_body(bytes, 16);
}

void pack_keys(Packer& pk, const std::vector<ChunkKey>& keys) {
  pk.pack_array(static_cast<uint32_t>(keys.size()));
  for (const ChunkKey& key : keys) pack_key(pk, key);
}

void pack_event(Packer& pk, const KvEvent& e) {
  switch (e.kind) {
    case KvEventKind::kBlockStored:
      pk.pack_array(7);
      pk.pack(std::string_view("BlockStored"));
      pack_keys(pk, e.block_hashes);
      if (e.parent) {
        pack_key(pk, *e.parent);
      } else {
        pk.pack_nil();
      }
      pk.pack(e.token_ids);
      pk.pack(e.block_size);
      pk.pack_nil();  // lora_id
      pk.pack(e.medium);
      return;
    case KvEventKind::kBlockRemoved:
      pk.pack_array(3);
      pk.pack(std::string_view("BlockRemoved"));
      pack_keys(pk, e.block_hashes);
      pk.pack(e.medium);
      return;
    case KvEventKind::kAllBlocksCleared:
      pk.pack_array(1);
      pk.pack(std::string_view("AllBlocksCleared"));
      return;
  }
}

// Decoding: each reader names the field it reads in its error.
struct Bad {
  std::string what;
};

const msgpack::object_array& as_array(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::ARRAY) throw Bad{std::string(field) + " is not an array"};
  return o.via.array;
}

std::string as_string(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::STR) throw Bad{std::string(field) + " is not a string"};
  return std::string(o.via.str.ptr, o.via.str.size);
}

uint64_t as_uint(const msgpack::object& o, std::string_view field, uint64_t max) {
  if (o.type != msgpack::type::POSITIVE_INTEGER || o.via.u64 > max) {
    throw Bad{std::string(field) + " is not an integer in [0, " + std::to_string(max) + "]"};
  }
  return o.via.u64;
}

ChunkKey as_key(const msgpack::object& o, std::string_view field) {
  if (o.type != msgpack::type::BIN || o.via.bin.size != 16) {
    throw Bad{std::string(field) + " is not a 16-byte block hash"};
  }
  ChunkKey key;
  for (int i = 7; i >= 0; --i) {
    key.lo = (key.lo << 8) | static_cast<uint8_t>(o.via.bin.ptr[i]);
    key.hi = (key.hi << 8) | static_cast<uint8_t>(o.via.bin.ptr[8 + i]);
  }
  return key;
}

std::vector<ChunkKey> as_keys(const msgpack::object& o) {
  std::vector<ChunkKey> keys;
  for (const msgpack::object& k :
       std::span(as_array(o, "block_hashes").ptr, as_array(o, "block_hashes").size)) {
    keys.push_back(as_key(k, "a block hash"));
  }
  return keys;
}

KvEvent as_event(const msgpack::object& o) {
  const msgpack::object_array& a = as_array(o, "an event");
  if (a.size == 0) throw Bad{"an event is an empty array"};
  const std::string tag = as_string(a.ptr[0], "an event's tag");
  auto want = [&](uint32_t n) {
    if (a.size != n) {
      throw Bad{tag + " has " + std::to_string(a.size) + " elements, not " + std::to_string(n)};
    }
  };
  KvEvent e;
  if (tag == "BlockStored") {
    want(7);
    e.kind = KvEventKind::kBlockStored;
    e.block_hashes = as_keys(a.ptr[1]);
    if (a.ptr[2].type != msgpack::type::NIL) e.parent = as_key(a.ptr[2], "parent_block_hash");
    for (const msgpack::object& t :
         std::span(as_array(a.ptr[3], "token_ids").ptr, as_array(a.ptr[3], "token_ids").size)) {
      e.token_ids.push_back(static_cast<TokenId>(as_uint(t, "a token id", UINT32_MAX)));
    }
    e.block_size = static_cast<uint32_t>(as_uint(a.ptr[4], "block_size", UINT32_MAX));
    if (a.ptr[5].type != msgpack::type::NIL) as_uint(a.ptr[5], "lora_id", UINT64_MAX);
    e.medium = as_string(a.ptr[6], "medium");
  } else if (tag == "BlockRemoved") {
    want(3);
    e.kind = KvEventKind::kBlockRemoved;
    e.block_hashes = as_keys(a.ptr[1]);
    e.medium = as_string(a.ptr[2], "medium");
  } else if (tag == "AllBlocksCleared") {
    want(1);
    e.kind = KvEventKind::kAllBlocksCleared;
  } else {
    throw Bad{"unknown event tag '" + tag + "'"};
  }
  return e;
}

}  // namespace

std::string encode_kv_event_batch(const KvEventBatch& batch) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack(batch.ts);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const KvEvent& e : batch.events) pack_event(pk, e);
  if (batch.data_parallel_rank) {
    pk.pack(*batch.data_parallel_rank);
  } else {
    pk.pack_nil();
  }
  return std::string(buffer.data(), buffer.size());
}

Result<KvEventBatch> decode_kv_event_batch(std::string_view payload) {
  try {
    msgpack::object_handle handle = msgpack::unpack(payload.data(), payload.size());
    const msgpack::object_array& a = as_array(handle.get(), "the batch");
    if (a.size != 3) throw Bad{"the batch has " + std::to_string(a.size) + " elements, not 3"};
    KvEventBatch batch;
    if (a.ptr[0].type == msgpack::type::FLOAT64 || a.ptr[0].type == msgpack::type::FLOAT32) {
      batch.ts = a.ptr[0].via.f64;
      // A subscriber orders batches by it (a publisher's restart): one of inf would hide every
      // later batch.
      if (!std::isfinite(batch.ts)) throw Bad{"ts is not a finite number"};
    } else {
      batch.ts = static_cast<double>(as_uint(a.ptr[0], "ts", UINT64_MAX));
    }
    for (const msgpack::object& e :
         std::span(as_array(a.ptr[1], "events").ptr, as_array(a.ptr[1], "events").size)) {
      batch.events.push_back(as_event(e));
    }
    if (a.ptr[2].type == msgpack::type::POSITIVE_INTEGER) {
      batch.data_parallel_rank =
          static_cast<int64_t>(as_uint(a.ptr[2], "data_parallel_rank", uint64_t{INT64_MAX}));
    } else if (a.ptr[2].type != msgpack::type::NIL) {
      throw Bad{"data_parallel_rank is neither an integer nor nil"};
    }
    return batch;
  } catch (const Bad& bad) {
    return make_error(ErrorCode::kInvalidArgument, "bad KV event batch: " + bad.what);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidArgument,
                      std::string("bad KV event batch: not MessagePack: ") + e.what());
  }
}

std::string encode_sequence(uint64_t seq) {
  std::string frame(8, '\0');
  for (int i = 0; i < 8; ++i) frame[i] = static_cast<char>(seq >> (56 - 8 * i));
  return frame;
}

std::optional<uint64_t> decode_sequence(std::string_view frame) {
  if (frame.size() != 8) return std::nullopt;
  uint64_t seq = 0;
  for (char c : frame) seq = (seq << 8) | static_cast<uint8_t>(c);
  return seq;
}

}  // namespace kvtier
