#include "kvtier/core/keep_forever.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace kvtier {

void keep_forever(const void* object) {
#if defined(__SANITIZE_ADDRESS__)
  if (object != nullptr) __lsan_ignore_object(object);
#else
  static_cast<void>(object);
#endif
}

}  // namespace kvtier
