#include "lru_policy.h"

#include <stdexcept>

#include "kvtier/core/key_list.h"

namespace kvtier {

LruPolicy::LruPolicy() : keys_(std::make_unique<KeyList>()) {}
LruPolicy::~LruPolicy() = default;

void LruPolicy::insert(const ChunkKey& key) {
  keys_->push_mru(key);
}

void LruPolicy::touch(const ChunkKey& key) {
  keys_->move_to_mru(key);
}

void LruPolicy::remove(const ChunkKey& key) {
  keys_->erase(key);
}

std::vector<ChunkKey> LruPolicy::choose_victims(size_t n,
                                                const EvictablePredicate& evictable) const {
  std::vector<ChunkKey> victims;
  for (auto it = keys_->begin(); it != keys_->end() && victims.size() < n; ++it) {
    if (evictable(*it)) victims.push_back(*it);
  }
  return victims;
}

void LruPolicy::evict(const ChunkKey& key) {
  if (!keys_->erase(key)) throw std::logic_error("LruPolicy::evict: not resident: " + key.hex());
}

bool LruPolicy::contains(const ChunkKey& key) const {
  return keys_->contains(key);
}

size_t LruPolicy::size() const {
  return keys_->size();
}

}  // namespace kvtier
