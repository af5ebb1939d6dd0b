#include "kvtier/tier/tier.h"

#include <stdexcept>

namespace kvtier {

std::string_view to_string(ChunkStatus status) {
  switch (status) {
    case ChunkStatus::kOk:
      return "ok";
    case ChunkStatus::kMiss:
      return "miss";
    case ChunkStatus::kCorrupt:
      return "corrupt";
    case ChunkStatus::kError:
      return "error";
    case ChunkStatus::kSkipped:
      return "skipped";
  }
  return "unknown";
}

Result<std::vector<ChunkStatus>> Tier::put(std::span<const ChunkKey> keys,
                                           std::span<const std::span<const std::byte>> chunks,
                                           Duration timeout) {
  if (keys.size() != chunks.size()) {
    throw std::invalid_argument("Tier::put: " + std::to_string(keys.size()) + " keys but " +
                                std::to_string(chunks.size()) + " chunks");
  }
  Result<std::vector<ChunkStatus>> result = do_put(keys, chunks, timeout);
  if (!result) {
    cells_.errors += 1;
    return result;
  }
  if (result->size() != keys.size()) {
    throw std::logic_error("Tier::put: " + name() + " returned the wrong number of statuses");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*result)[i] == ChunkStatus::kOk) {
      cells_.chunks_written += 1;
      cells_.bytes_written += chunks[i].size();
    } else if ((*result)[i] == ChunkStatus::kSkipped) {
      cells_.skipped_keys += 1;
    } else {
      cells_.errors += 1;
    }
  }
  return result;
}

void Tier::publish_events(KvEventPublisher* publisher, uint32_t block_size) {
  block_size_ = block_size;
  publisher_ = publisher;
}

Result<std::vector<ChunkStatus>> Tier::get(std::span<const ChunkKey> keys,
                                           std::span<const std::span<std::byte>> dst,
                                           Duration timeout) {
  if (keys.size() != dst.size()) {
    throw std::invalid_argument("Tier::get: " + std::to_string(keys.size()) + " keys but " +
                                std::to_string(dst.size()) + " destinations");
  }
  Result<std::vector<ChunkStatus>> result = do_get(keys, dst, timeout);
  if (!result) {
    cells_.errors += 1;
    return result;
  }
  if (result->size() != keys.size()) {
    throw std::logic_error("Tier::get: " + name() + " returned the wrong number of statuses");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    switch ((*result)[i]) {
      case ChunkStatus::kOk:
        cells_.hits += 1;
        cells_.bytes_read += dst[i].size();
        break;
      case ChunkStatus::kMiss:
        cells_.misses += 1;
        break;
      case ChunkStatus::kCorrupt:
        cells_.corrupt += 1;
        break;
      case ChunkStatus::kError:
        cells_.errors += 1;
        break;
      case ChunkStatus::kSkipped:
        cells_.skipped_keys += 1;
        break;
    }
  }
  return result;
}

Result<std::vector<bool>> Tier::contains(std::span<const ChunkKey> keys, Duration timeout) {
  Result<std::vector<bool>> result = do_contains(keys, timeout);
  if (!result) {
    cells_.errors += 1;
  } else if (result->size() != keys.size()) {
    throw std::logic_error("Tier::contains: " + name() + " returned the wrong number of answers");
  }
  return result;
}

Status Tier::ping(Duration timeout) {
  Status ok = do_ping(timeout);
  if (!ok) cells_.errors += 1;
  return ok;
}

TierCounters Tier::counters() const {
  return TierCounters{.hits = cells_.hits,
                      .misses = cells_.misses,
                      .corrupt = cells_.corrupt,
                      .errors = cells_.errors,
                      .chunks_written = cells_.chunks_written,
                      .bytes_read = cells_.bytes_read,
                      .bytes_written = cells_.bytes_written,
                      .skipped_keys = cells_.skipped_keys};
}

}  // namespace kvtier
