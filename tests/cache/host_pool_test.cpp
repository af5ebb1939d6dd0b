#include "kvtier/cache/host_pool.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "kvtier/device/device_fault.h"
#include "kvtier/device/host_device.h"

namespace kvtier {
namespace {

// Records host registrations; optionally refuses them with a DeviceFault. Only what HostPool
// calls is implemented.
class RegistrationDevice final : public Device {
 public:
  bool fail_registration = false;
  std::map<void*, size_t> registered;
  int unregistrations = 0;

  std::string name() const override { return "registration-fake"; }
  size_t max_descriptors_per_call() const override { return 1; }
  DeviceAddress register_host(void* ptr, size_t bytes) override {
    if (fail_registration) throw DeviceFault("injected registration fault");
    registered[ptr] = bytes;
    return 0x1000'0000'0000 + reinterpret_cast<uintptr_t>(ptr) % 4096;  // not the pointer
  }
  void unregister_host(void* ptr) override {
    if (registered.erase(ptr) != 1) throw std::invalid_argument("not registered");
    ++unregistrations;
  }

  DeviceAddress allocate(size_t) override { throw std::logic_error("unused"); }
  void free(DeviceAddress) override { throw std::logic_error("unused"); }
  StreamHandle create_stream() override { throw std::logic_error("unused"); }
  void destroy_stream(StreamHandle) override { throw std::logic_error("unused"); }
  EventHandle create_event() override { throw std::logic_error("unused"); }
  void destroy_event(EventHandle) override { throw std::logic_error("unused"); }
  void record(EventHandle, StreamHandle) override { throw std::logic_error("unused"); }
  bool query(EventHandle) override { throw std::logic_error("unused"); }
  void synchronize(EventHandle) override { throw std::logic_error("unused"); }
  double elapsed_ms(EventHandle, EventHandle) override { throw std::logic_error("unused"); }
  void wait_event(StreamHandle, EventHandle) override { throw std::logic_error("unused"); }
  void copy_batch(StreamHandle, CopyKind, std::span<const CopyDescriptor>) override {
    throw std::logic_error("unused");
  }
  void launch_host_func(StreamHandle, std::function<void()>) override {
    throw std::logic_error("unused");
  }
};

std::string unique_shm_name(const char* what) {
  static int counter = 0;
  return "/kvtier-cache-test-" + std::to_string(getpid()) + "-" + what + "-" +
         std::to_string(counter++);
}

TEST(HostPool, AnonymousPoolIsPageAlignedRegisteredAndSliced) {
  RegistrationDevice device;
  {
    auto pool = HostPool::create(device, 1000, 5);
    ASSERT_TRUE(pool.has_value()) << pool.error().to_string();
    HostPool& p = **pool;
    EXPECT_EQ(p.bytes(), 5000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.base()) % sysconf(_SC_PAGESIZE), 0u);
    ASSERT_EQ(device.registered.size(), 1u);
    EXPECT_EQ(device.registered.begin()->first, p.base());
    EXPECT_EQ(device.registered.begin()->second, 5000u);
    EXPECT_TRUE(p.shm_name().empty());
    const DeviceAddress base = p.slot_address(0);
    for (SlotId s = 0; s < 5; ++s) {
      EXPECT_EQ(p.slot_ptr(s), p.base() + s * 1000);
      EXPECT_EQ(p.slot_address(s), base + s * 1000);
      std::memset(p.slot_ptr(s), 'a' + s, 1000);  // every byte is writable
    }
    EXPECT_EQ(static_cast<char>(p.slot_ptr(4)[999]), 'e');
    EXPECT_THROW(p.slot_ptr(5), std::out_of_range);
    EXPECT_THROW(p.slot_address(5), std::out_of_range);
  }
  EXPECT_TRUE(device.registered.empty());
  EXPECT_EQ(device.unregistrations, 1);
}

TEST(HostPool, RejectsZeroAndOverflowingSizesByName) {
  RegistrationDevice device;
  auto zero = HostPool::create(device, 0, 4);
  ASSERT_FALSE(zero.has_value());
  EXPECT_EQ(zero.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(zero.error().message.find("4 slots x 0 bytes"), std::string::npos);

  auto overflow = HostPool::create(device, size_t{1} << 40, size_t{1} << 30);
  ASSERT_FALSE(overflow.has_value());
  EXPECT_EQ(overflow.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(overflow.error().message.find("1073741824 slots"), std::string::npos)
      << overflow.error().message;
  EXPECT_TRUE(device.registered.empty());
}

TEST(HostPool, ImpossibleSizeIsAnErrorNotASmallerPool) {
  RegistrationDevice device;
  auto huge = HostPool::create(device, size_t{1} << 40, size_t{1} << 20);  // 2^60 bytes
  ASSERT_FALSE(huge.has_value());
  EXPECT_EQ(huge.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(huge.error().message.find(std::to_string(size_t{1} << 60)), std::string::npos)
      << huge.error().message;
}

TEST(HostPool, RejectsBadSharedMemoryNames) {
  RegistrationDevice device;
  for (const char* name : {"/", "no-slash", "/a/b"}) {
    auto pool = HostPool::create(device, 64, 2, name);
    ASSERT_FALSE(pool.has_value()) << name;
    EXPECT_EQ(pool.error().code, ErrorCode::kInvalidArgument) << name;
  }
}

TEST(HostPool, SharedPoolIsVisibleToAnotherProcessAndUnlinkedByItsCreator) {
  RegistrationDevice device;
  const std::string name = unique_shm_name("shared");
  {
    auto owner = HostPool::create(device, 4096, 3, name);
    ASSERT_TRUE(owner.has_value()) << owner.error().to_string();
    EXPECT_EQ((*owner)->shm_name(), name);
    EXPECT_TRUE((*owner)->owns_name());
    std::memset((*owner)->slot_ptr(1), 0x5a, 4096);

    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Another process maps the region, checks the owner's bytes and writes its own.
      RegistrationDevice child_device;
      auto peer = HostPool::open_existing(child_device, name, 4096, 3);
      if (!peer || (*peer)->owns_name()) _exit(2);
      if (static_cast<unsigned char>((*peer)->slot_ptr(1)[4095]) != 0x5a) _exit(3);
      std::memset((*peer)->slot_ptr(2), 0x33, 4096);
      peer->reset();
      _exit(child_device.registered.empty() ? 0 : 4);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(static_cast<unsigned char>((*owner)->slot_ptr(2)[0]), 0x33);
    EXPECT_EQ(static_cast<unsigned char>((*owner)->slot_ptr(2)[4095]), 0x33);
  }
  auto gone = HostPool::open_existing(device, name, 4096, 3);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound);
}

TEST(HostPool, ExistingNameIsAnErrorAndStaysIntact) {
  RegistrationDevice device;
  const std::string name = unique_shm_name("exists");
  auto first = HostPool::create(device, 64, 2, name);
  ASSERT_TRUE(first.has_value()) << first.error().to_string();
  auto second = HostPool::create(device, 64, 2, name);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(second.error().message.find(name), std::string::npos);
  // The failed create did not unlink the first pool's name.
  EXPECT_TRUE(HostPool::open_existing(device, name, 64, 2).has_value());
}

TEST(HostPool, OpenExistingRequiresTheExactSize) {
  RegistrationDevice device;
  const std::string name = unique_shm_name("size");
  auto owner = HostPool::create(device, 64, 4, name);
  ASSERT_TRUE(owner.has_value()) << owner.error().to_string();
  auto wrong = HostPool::open_existing(device, name, 64, 5);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong.error().message.find("256 bytes, expected 320"), std::string::npos)
      << wrong.error().message;
}

TEST(HostPool, RegistrationFaultIsAnErrorAndReleasesEverything) {
  RegistrationDevice device;
  device.fail_registration = true;
  const std::string name = unique_shm_name("fault");
  auto pool = HostPool::create(device, 64, 2, name);
  ASSERT_FALSE(pool.has_value());
  EXPECT_EQ(pool.error().code, ErrorCode::kDeviceFault);
  EXPECT_NE(pool.error().message.find("injected registration fault"), std::string::npos);
  EXPECT_EQ(device.unregistrations, 0);
  // The name was unlinked with the half-built pool.
  device.fail_registration = false;
  EXPECT_EQ(HostPool::open_existing(device, name, 64, 2).error().code, ErrorCode::kNotFound);
}

TEST(HostPool, HostDeviceCopiesIntoASlot) {
  HostDevice device;
  auto pool = HostPool::create(device, 256, 4);
  ASSERT_TRUE(pool.has_value()) << pool.error().to_string();
  const DeviceAddress src = device.allocate(256);
  std::memset(reinterpret_cast<void*>(src), 0x7e, 256);
  const StreamHandle stream = device.create_stream();
  const EventHandle done = device.create_event();
  const CopyDescriptor copy{.src = src, .dst = (*pool)->slot_address(2), .bytes = 256};
  device.copy_batch(stream, CopyKind::kDeviceToHost, std::span(&copy, 1));
  device.record(done, stream);
  device.synchronize(done);
  EXPECT_EQ(static_cast<unsigned char>((*pool)->slot_ptr(2)[255]), 0x7e);
  EXPECT_EQ(static_cast<unsigned char>((*pool)->slot_ptr(1)[255]), 0);
  device.destroy_event(done);
  device.destroy_stream(stream);
  device.free(src);
}

}  // namespace
}  // namespace kvtier
