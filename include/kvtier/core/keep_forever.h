// keep_forever: memory kept on purpose until the process ends, never freed: what a copy that
// cannot be shown to have stopped may still read or write (F7). LeakSanitizer does not report it
// (nor what it points to); everything else it reports as before.
#pragma once

#include <memory>

namespace kvtier {

void keep_forever(const void* object);

// Releases `owner` and keeps what it owned forever.
template <class T>
void keep_forever(std::unique_ptr<T>&& owner) {
  keep_forever(static_cast<const void*>(owner.release()));
}

}  // namespace kvtier
