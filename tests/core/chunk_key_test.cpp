#include "kvtier/core/chunk_key.h"

#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <unordered_set>
#include <vector>

namespace kvtier {
namespace {

constexpr size_t kChunk = 4;

KeyNamespace Namespace() {
  return KeyNamespace{.model = "tiny-llama@rev1", .layout_fingerprint = 0x1234, .group = 0};
}

// 0, 1, 2, ... n-1
std::vector<TokenId> Tokens(size_t n) {
  std::vector<TokenId> tokens(n);
  std::iota(tokens.begin(), tokens.end(), TokenId{0});
  return tokens;
}

TEST(ChunkKey, EqualPrefixesGiveEqualKeys) {
  const std::vector<TokenId> tokens = Tokens(5 * kChunk);
  EXPECT_EQ(chunk_keys(Namespace(), tokens, kChunk), chunk_keys(Namespace(), tokens, kChunk));

  // A longer sequence with the same prefix shares the keys of the prefix's chunks.
  const std::vector<TokenId> longer = Tokens(8 * kChunk);
  const std::vector<ChunkKey> short_keys = chunk_keys(Namespace(), tokens, kChunk);
  const std::vector<ChunkKey> long_keys = chunk_keys(Namespace(), longer, kChunk);
  ASSERT_EQ(long_keys.size(), 8u);
  EXPECT_EQ(std::vector<ChunkKey>(long_keys.begin(), long_keys.begin() + 5), short_keys);
}

TEST(ChunkKey, OneChangedTokenChangesThatKeyAndEveryLaterKeyOnly) {
  const std::vector<TokenId> tokens = Tokens(5 * kChunk);
  const std::vector<ChunkKey> keys = chunk_keys(Namespace(), tokens, kChunk);
  for (size_t position = 0; position < tokens.size(); ++position) {
    std::vector<TokenId> changed = tokens;
    changed[position] += 1000;
    const std::vector<ChunkKey> changed_keys = chunk_keys(Namespace(), changed, kChunk);
    const size_t chunk = position / kChunk;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i < chunk) {
        EXPECT_EQ(changed_keys[i], keys[i]) << "token " << position << ", key " << i;
      } else {
        EXPECT_NE(changed_keys[i], keys[i]) << "token " << position << ", key " << i;
      }
    }
  }
}

TEST(ChunkKey, EveryNamespaceFieldChangesEveryKey) {
  const std::vector<TokenId> tokens = Tokens(3 * kChunk);
  const std::vector<ChunkKey> base = chunk_keys(Namespace(), tokens, kChunk);
  std::vector<KeyNamespace> variants(4, Namespace());
  variants[0].model = "tiny-llama@rev2";
  variants[1].layout_fingerprint ^= 1;
  variants[2].group = 1;
  variants[3].cache_salt = "tenant-a";
  for (size_t v = 0; v < variants.size(); ++v) {
    EXPECT_NE(namespace_root(variants[v]), namespace_root(Namespace())) << "variant " << v;
    const std::vector<ChunkKey> keys = chunk_keys(variants[v], tokens, kChunk);
    for (size_t i = 0; i < keys.size(); ++i) EXPECT_NE(keys[i], base[i]) << "variant " << v;
  }
}

TEST(ChunkKey, NamespaceStringsDoNotRunTogether) {
  KeyNamespace a = Namespace();
  KeyNamespace b = Namespace();
  a.model = "ab";
  a.cache_salt = "c";
  b.model = "a";
  b.cache_salt = "bc";
  EXPECT_NE(namespace_root(a), namespace_root(b));
}

TEST(ChunkKey, KeysChainFromTheNamespaceRoot) {
  const std::vector<TokenId> tokens = Tokens(3 * kChunk);
  const std::vector<ChunkKey> keys = chunk_keys(Namespace(), tokens, kChunk);
  ChunkKey parent = namespace_root(Namespace());
  for (size_t i = 0; i < keys.size(); ++i) {
    parent = next_chunk_key(parent, std::span(tokens).subspan(i * kChunk, kChunk));
    EXPECT_EQ(keys[i], parent);
  }
}

TEST(ChunkKey, TrailingPartialChunkHasNoKey) {
  EXPECT_EQ(chunk_keys(Namespace(), Tokens(2 * kChunk + kChunk - 1), kChunk).size(), 2u);
  EXPECT_EQ(chunk_keys(Namespace(), Tokens(2 * kChunk + kChunk - 1), kChunk),
            chunk_keys(Namespace(), Tokens(2 * kChunk), kChunk));
  EXPECT_TRUE(chunk_keys(Namespace(), Tokens(kChunk - 1), kChunk).empty());
  EXPECT_TRUE(chunk_keys(Namespace(), {}, kChunk).empty());
}

TEST(ChunkKey, ZeroChunkTokensThrows) {
  EXPECT_THROW(chunk_keys(Namespace(), Tokens(8), 0), std::invalid_argument);
}

TEST(ChunkKey, HexIs32LowercaseDigitsHighHalfFirst) {
  EXPECT_EQ((ChunkKey{.lo = 0x1, .hi = 0xABCDEF}).hex(), "0000000000abcdef0000000000000001");
  EXPECT_EQ((ChunkKey{.lo = ~uint64_t{0}, .hi = 0}).hex(), "0000000000000000ffffffffffffffff");
  EXPECT_EQ(ChunkKey{}.hex(), std::string(32, '0'));
}

// Keys are shared between machines and processes (L2 disk, L3 Redis), so the same tokens must
// give the same key in every build. A change to the hash is a format change: bump the domain
// string ("kvtier.chunk_key.v1") and update this value.
TEST(ChunkKey, KeysAreStableAcrossBuilds) {
  const std::vector<ChunkKey> keys = chunk_keys(Namespace(), Tokens(kChunk), kChunk);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].hex(), "93049379346cb607ad8fe267b2df8149");
}

TEST(ChunkKey, EqualKeysHashEqualAndDistinctKeysSpread) {
  const std::vector<ChunkKey> keys = chunk_keys(Namespace(), Tokens(64 * kChunk), kChunk);
  std::unordered_set<ChunkKey, ChunkKeyHash> set(keys.begin(), keys.end());
  EXPECT_EQ(set.size(), keys.size());
  EXPECT_EQ(ChunkKeyHash{}(keys[3]), ChunkKeyHash{}(ChunkKey{keys[3]}));
  EXPECT_TRUE(set.contains(keys[17]));
}

}  // namespace
}  // namespace kvtier
