// `kvtier bench transfer`: the transfer engine on a device against plain memcpy of the same
// descriptor list, measured side by side in one run, for each (layout, chunk size, direction).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace kvtier::bench {

struct TransferBenchOptions {
  bool json = false;
  size_t total_bytes = size_t{64} << 20;  // moved per measurement
  int repeat = 5;                         // measurements per side; the best of each is kept
  std::vector<size_t> chunk_bytes = {16 << 10,  32 << 10,  64 << 10, 128 << 10,
                                     256 << 10, 512 << 10, 1 << 20,  2 << 20};
  size_t max_batch_descriptors = 8192;
  std::string device = "host";  // "host" or "cuda"
  int cuda_ordinal = 0;
};

// Writes JSON Lines (json) or a table. Returns a process exit code.
int run_transfer_bench(const TransferBenchOptions& options, std::ostream& out);

// `--device cuda`: the transfer engine on a GPU, loads (H2D) and stores (D2H), beside one
// cudaMemcpyAsync of a contiguous pinned buffer of the same total size (what the PCIe/C2C link
// allows), as `ratio`. Without a GPU, or in a build without CUDA, writes why to `err` and
// returns 1.
int run_cuda_transfer_bench(const TransferBenchOptions& options, std::ostream& out,
                            std::ostream& err);

}  // namespace kvtier::bench
