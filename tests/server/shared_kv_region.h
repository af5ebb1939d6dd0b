// SharedKvRegion: a client's "device" KV cache in a POSIX shared-memory object, laid out as
// kPerLayer tensors of the small test layout, plus helpers to fill and read block bytes. This
// is what a worker registers with kvtierd on the host device.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvtier/server/client.h"
#include "support/transfer_rig.h"

namespace kvtier::testing {

class SharedKvRegion {
 public:
  explicit SharedKvRegion(uint32_t num_blocks = 32)
      : layout_(small_layout(DeviceLayout::kPerLayer)), num_blocks_(num_blocks) {
    static std::atomic<int> n{0};
    name_ = "/kvtier-test-kv-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    tensor_bytes_ = layout_.tensor_bytes(0, num_blocks).value();
    bytes_ = layout_.total_bytes(num_blocks).value();
    const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
      throw std::runtime_error("SharedKvRegion: cannot create " + name_);
    }
    base_ =
        static_cast<std::byte*>(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    if (base_ == MAP_FAILED) throw std::runtime_error("SharedKvRegion: mmap failed");
  }
  ~SharedKvRegion() {
    munmap(base_, bytes_);
    shm_unlink(name_.c_str());
  }

  server::Registration registration(uint32_t rank = 0) const {
    server::GroupTensors tensors{.num_blocks = num_blocks_};
    for (size_t l = 0; l < layout_.tensors_per_group(0); ++l)
      tensors.offsets.push_back(l * tensor_bytes_);
    return server::Registration{
        .rank = rank,
        .layout = layout_,
        .memory = server::SharedKvMemory{.shm_name = name_, .bytes = bytes_, .groups = {tensors}}};
  }

  // Every layer's bytes of `block`.
  std::vector<std::byte> block_bytes(uint32_t block) const {
    const size_t lb = layout_.groups[0].layer_block_bytes();
    std::vector<std::byte> out;
    for (uint32_t l = 0; l < layout_.groups[0].layers; ++l) {
      const std::byte* p = base_ + l * tensor_bytes_ + block * lb;
      out.insert(out.end(), p, p + lb);
    }
    return out;
  }
  void fill_block(uint32_t block, uint64_t seed) {
    const size_t lb = layout_.groups[0].layer_block_bytes();
    for (uint32_t l = 0; l < layout_.groups[0].layers; ++l) {
      std::byte* p = base_ + l * tensor_bytes_ + block * lb;
      for (size_t i = 0; i < lb; ++i)
        p[i] = static_cast<std::byte>((seed * 131 + l * 17 + i) & 0xff);
    }
  }
  const KvLayout& layout() const { return layout_; }
  uint32_t blocks_per_chunk() const { return layout_.groups[0].blocks_per_chunk; }

 private:
  KvLayout layout_;
  uint32_t num_blocks_;
  std::string name_;
  size_t tensor_bytes_ = 0;
  size_t bytes_ = 0;
  std::byte* base_ = nullptr;
};

}  // namespace kvtier::testing
