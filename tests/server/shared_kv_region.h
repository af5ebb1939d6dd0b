// SharedKvRegion: a client's "device" KV cache, laid out as kPerLayer tensors of the small test
// layout, plus helpers to fill and read block bytes. This is what a worker registers with
// kvtierd on the host device: a sealed memfd (server::SealedMemory), as the protocol requires.
// Hostile tests back it with memory kvtierd must refuse instead (Backing): a POSIX shm object
// or a memfd without seals, which the test can shrink under the server (truncate()).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvtier/server/client.h"
#include "kvtier/server/sealed_memory.h"
#include "support/transfer_rig.h"

namespace kvtier::testing {

enum class Backing {
  kSealedMemfd,    // what clients must register
  kPosixShm,       // shm_open: cannot be sealed
  kUnsealedMemfd,  // a memfd without F_SEAL_SHRINK
};

class SharedKvRegion {
 public:
  explicit SharedKvRegion(uint32_t num_blocks = 32, Backing backing = Backing::kSealedMemfd,
                          uint32_t blocks_per_chunk = 4)
      : layout_(small_layout(DeviceLayout::kPerLayer, blocks_per_chunk)),
        num_blocks_(num_blocks),
        backing_(backing) {
    static std::atomic<int> n{0};
    name_ = "/kvtier-test-kv-" + std::to_string(getpid()) + "-" + std::to_string(n++);
    tensor_bytes_ = layout_.tensor_bytes(0, num_blocks).value();
    bytes_ = layout_.total_bytes(num_blocks).value();
    if (backing == Backing::kSealedMemfd) {
      auto memory = server::SealedMemory::create(bytes_, name_.substr(1));
      if (!memory) throw std::runtime_error("SharedKvRegion: " + memory.error().message);
      sealed_ = std::move(*memory);
      base_ = sealed_->data();
      return;
    }
    fd_ = backing == Backing::kPosixShm ? shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)
                                        : memfd_create(name_.c_str() + 1, MFD_CLOEXEC);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) {
      throw std::runtime_error("SharedKvRegion: cannot create " + name_);
    }
    base_ =
        static_cast<std::byte*>(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    if (base_ == MAP_FAILED) throw std::runtime_error("SharedKvRegion: mmap failed");
  }
  ~SharedKvRegion() {
    if (sealed_) return;
    munmap(base_, bytes_);
    close(fd_);
    if (backing_ == Backing::kPosixShm) shm_unlink(name_.c_str());
  }
  SharedKvRegion(const SharedKvRegion&) = delete;
  SharedKvRegion& operator=(const SharedKvRegion&) = delete;

  server::Registration registration(uint32_t rank = 0) const {
    server::GroupTensors tensors{.num_blocks = num_blocks_};
    for (size_t l = 0; l < layout_.tensors_per_group(0); ++l)
      tensors.offsets.push_back(l * tensor_bytes_);
    server::SharedKvMemory memory;
    if (sealed_) {
      memory = sealed_->describe({tensors});
    } else if (backing_ == Backing::kPosixShm) {
      memory = server::SharedKvMemory{.shm_name = name_, .bytes = bytes_, .groups = {tensors}};
    } else {
      memory = server::SharedKvMemory{.pid = static_cast<uint32_t>(getpid()),
                                      .fd = static_cast<uint32_t>(fd_),
                                      .bytes = bytes_,
                                      .groups = {tensors}};
    }
    return server::Registration{.rank = rank, .layout = layout_, .memory = memory};
  }

  // Shrinks the memory to `bytes` as a hostile client would; -1 with errno set when the kernel
  // refuses (EPERM: sealed). Only this process's mapping is left as it was: reading it past
  // the new end would fault here, so the test must not touch block bytes afterwards.
  int truncate(size_t bytes) {
    return ftruncate(sealed_ ? sealed_->fd() : fd_, static_cast<off_t>(bytes));
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
  Backing backing_;
  std::string name_;
  size_t tensor_bytes_ = 0;
  size_t bytes_ = 0;
  std::unique_ptr<server::SealedMemory> sealed_;
  int fd_ = -1;
  std::byte* base_ = nullptr;
};

}  // namespace kvtier::testing
