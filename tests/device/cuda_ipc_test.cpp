// CUDA IPC through export_memory / import_memory, across two real processes: this test binary
// starts itself again to run the child side (CudaIpcChild, disabled unless started that way).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kvtier/device/cuda_device.h"
#include "support/device_io.h"

extern char** environ;

namespace kvtier::testing {
namespace {

constexpr size_t kBytes = 64 << 10;
constexpr const char* kDescriptionVariable = "KVTIER_TEST_IPC_DESCRIPTION";

std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += kDigits[std::to_integer<int>(b) >> 4];
    out += kDigits[std::to_integer<int>(b) & 15];
  }
  return out;
}

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// Runs this binary's CudaIpcChild test in a new process; returns its exit status.
int run_child(const std::string& description_hex) {
  setenv(kDescriptionVariable, description_hex.c_str(), 1);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=CudaIpcChild.*";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, environ);
  unsetenv(kDescriptionVariable);
  if (spawned != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(CudaIpc, AnotherProcessReadsAndWritesExportedMemory) {
  auto opened = CudaDevice::open();
  if (!opened) GTEST_SKIP() << opened.error().message;
  CudaDevice& device = **opened;
  const DeviceAddress dev = device.allocate(kBytes);
  write_device(device, dev, kBytes, 21);
  auto description = device.export_memory(dev);
  ASSERT_TRUE(description.has_value()) << description.error().message;
  EXPECT_FALSE(device.export_memory(dev + 4096).has_value()) << "only an allocation's start";
  // The child checks pattern 21 through its imported address, then writes pattern 22.
  ASSERT_EQ(run_child(to_hex(*description)), 0) << "the child process failed (its output is above)";
  EXPECT_TRUE(has_pattern(read_device(device, dev, kBytes).data(), kBytes, 22));
  device.free(dev);
}

TEST(CudaIpc, ForeignDescriptionsAreErrorValues) {
  auto opened = CudaDevice::open();
  if (!opened) GTEST_SKIP() << opened.error().message;
  const std::vector<std::byte> garbage(80, std::byte{1});
  const auto imported = (*opened)->import_memory(garbage);
  ASSERT_FALSE(imported.has_value());
  EXPECT_EQ(imported.error().code, ErrorCode::kInvalidArgument);
}

// The child side, started by AnotherProcessReadsAndWritesExportedMemory.
TEST(CudaIpcChild, DISABLED_ImportsReadsAndWrites) {
  const char* hex = std::getenv(kDescriptionVariable);
  if (!hex) GTEST_SKIP() << "run by CudaIpc.AnotherProcessReadsAndWritesExportedMemory";
  auto opened = CudaDevice::open();
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  CudaDevice& device = **opened;
  auto imported = device.import_memory(from_hex(hex));
  ASSERT_TRUE(imported.has_value()) << imported.error().message;
  EXPECT_TRUE(has_pattern(read_device(device, *imported, kBytes).data(), kBytes, 21));
  write_device(device, *imported, kBytes, 22);
  EXPECT_THROW(device.free(*imported), std::invalid_argument) << "close_imported, not free";
  device.close_imported(*imported);
}

}  // namespace
}  // namespace kvtier::testing
