#include "arc_policy.h"

#include <algorithm>
#include <stdexcept>

#include "kvtier/core/key_list.h"

namespace kvtier {

ArcPolicy::ArcPolicy(size_t capacity)
    : capacity_(capacity),
      t1_(std::make_unique<KeyList>()),
      t2_(std::make_unique<KeyList>()),
      b1_(std::make_unique<KeyList>()),
      b2_(std::make_unique<KeyList>()) {
  if (capacity == 0) throw std::invalid_argument("ArcPolicy: capacity must be > 0");
}

ArcPolicy::~ArcPolicy() = default;

KeyList& ArcPolicy::list(List which) const {
  switch (which) {
    case List::kT1:
      return *t1_;
    case List::kT2:
      return *t2_;
    case List::kB1:
      return *b1_;
    case List::kB2:
      return *b2_;
    case List::kNone:
      break;
  }
  throw std::invalid_argument("ArcPolicy: List::kNone has no list");
}

ArcPolicy::List ArcPolicy::list_of(const ChunkKey& key) const {
  for (List l : {List::kT1, List::kT2, List::kB1, List::kB2}) {
    if (list(l).contains(key)) return l;
  }
  return List::kNone;
}

size_t ArcPolicy::list_size(List which) const {
  return which == List::kNone ? 0 : list(which).size();
}

void ArcPolicy::insert(const ChunkKey& key) {
  if (contains(key)) throw std::logic_error("ArcPolicy::insert: already resident: " + key.hex());
  if (b1_->contains(key)) {
    // Wanted again soon after leaving T1: T1 was too small.
    p_ = std::min(capacity_, p_ + std::max<size_t>(1, b2_->size() / b1_->size()));
    b1_->erase(key);
    t2_->push_mru(key);
  } else if (b2_->contains(key)) {
    // Wanted again soon after leaving T2: T2 was too small.
    p_ -= std::min(p_, std::max<size_t>(1, b1_->size() / b2_->size()));
    b2_->erase(key);
    t2_->push_mru(key);
  } else {
    t1_->push_mru(key);
  }
  trim_ghosts();
}

void ArcPolicy::touch(const ChunkKey& key) {
  if (t1_->erase(key)) {
    t2_->push_mru(key);
  } else {
    t2_->move_to_mru(key);
  }
}

void ArcPolicy::remove(const ChunkKey& key) {
  if (!t1_->erase(key)) t2_->erase(key);
}

std::vector<ChunkKey> ArcPolicy::choose_victims(size_t n,
                                                const EvictablePredicate& evictable) const {
  std::vector<ChunkKey> victims;
  auto it1 = t1_->begin();
  auto it2 = t2_->begin();
  auto skip = [&](KeyList::const_iterator& it, const KeyList& l) {
    while (it != l.end() && !evictable(*it)) ++it;
    return it != l.end();
  };
  size_t t1_size = t1_->size();  // |T1| once the victims chosen so far are gone
  while (victims.size() < n) {
    const bool t1_has = skip(it1, *t1_);
    const bool t2_has = skip(it2, *t2_);
    if (!t1_has && !t2_has) break;
    // ARC's REPLACE, with the fallback to the other list when the preferred one is exhausted.
    const bool from_t1 = t1_size > p_ ? t1_has : !t2_has;
    if (from_t1) {
      victims.push_back(*it1++);
      --t1_size;
    } else {
      victims.push_back(*it2++);
    }
  }
  return victims;
}

void ArcPolicy::evict(const ChunkKey& key) {
  if (t1_->erase(key)) {
    b1_->push_mru(key);
  } else if (t2_->erase(key)) {
    b2_->push_mru(key);
  } else {
    throw std::logic_error("ArcPolicy::evict: not resident: " + key.hex());
  }
  trim_ghosts();
}

void ArcPolicy::trim_ghosts() {
  while (!b1_->empty() && t1_->size() + b1_->size() > capacity_) b1_->pop_lru();
  while (b1_->size() + b2_->size() > capacity_) {
    (b2_->empty() ? *b1_ : *b2_).pop_lru();
  }
}

bool ArcPolicy::contains(const ChunkKey& key) const {
  return t1_->contains(key) || t2_->contains(key);
}

size_t ArcPolicy::size() const {
  return t1_->size() + t2_->size();
}

}  // namespace kvtier
