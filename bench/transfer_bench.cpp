#include "transfer_bench.h"

#include "kvtier/device/host_device.h"
#include "transfer_bench_setup.h"

namespace kvtier::bench {
namespace {

double time_memcpy(const std::vector<CopyDescriptor>& descriptors) {
  const auto t0 = BenchClock::now();
  for (const CopyDescriptor& d : descriptors) {
    std::memcpy(reinterpret_cast<void*>(d.dst), reinterpret_cast<const void*>(d.src), d.bytes);
  }
  return seconds_since(t0);
}

}  // namespace

int run_transfer_bench(const TransferBenchOptions& o, std::ostream& out) {
  HostDevice device(o.max_batch_descriptors);
  const StreamHandle compute = device.create_stream();
  JobId next_job = 1;
  if (!o.json) out << "transfer engine on the host device vs memcpy of the same descriptors\n";
  for (DeviceLayout layout_kind : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    for (size_t chunk_bytes : o.chunk_bytes) {
      const KvLayout layout = bench_layout(layout_kind, chunk_bytes);
      Setup s(device, layout, o.total_bytes, true);
      TransferEngine engine(device, layout, s.caches, s.slots, compute,
                            TransferOptions{.max_batch_descriptors = o.max_batch_descriptors});
      for (Direction dir : {Direction::kStore, Direction::kLoad}) {
        const auto descriptors =
            build_copy_descriptors(layout, s.caches, s.slots, dir, s.chunks, true);
        double best_engine = 1e30, best_memcpy = 1e30;
        time_engine(engine, s, dir, next_job);  // warm pools and pages
        for (int r = 0; r < o.repeat; ++r) {    // interleaved: both sides see the same noise
          best_memcpy = std::min(best_memcpy, time_memcpy(descriptors));
          best_engine = std::min(best_engine, time_engine(engine, s, dir, next_job));
        }
        const double bytes = double(s.num_chunks) * layout.groups[0].chunk_bytes();
        const double kvtier_gbps = bytes / best_engine / 1e9;
        const double memcpy_gbps = bytes / best_memcpy / 1e9;
        emit(out, o.json,
             {{"bench", "transfer"},
              {"layout", to_string(layout_kind)},
              {"chunk_bytes", layout.groups[0].chunk_bytes()},
              {"direction", to_string(dir)},
              {"descriptors", descriptors.size()},
              {"kvtier_gbps", kvtier_gbps},
              {"memcpy_gbps", memcpy_gbps},
              {"ratio", kvtier_gbps / memcpy_gbps}});
      }
    }
  }
  // Submission cost with and without coalescing: the same store, descriptor-bound.
  if (!o.json) out << "\ndescriptor throughput with and without coalescing (store)\n";
  for (DeviceLayout layout_kind : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    const size_t chunk_bytes = 256 << 10;
    const KvLayout layout = bench_layout(layout_kind, chunk_bytes);
    Setup s(device, layout, o.total_bytes, true);
    for (bool coalesce : {false, true}) {
      TransferEngine engine(
          device, layout, s.caches, s.slots, compute,
          TransferOptions{.max_batch_descriptors = o.max_batch_descriptors, .coalesce = coalesce});
      const size_t descriptors =
          build_copy_descriptors(layout, s.caches, s.slots, Direction::kStore, s.chunks, coalesce)
              .size();
      double best = 1e30;
      time_engine(engine, s, Direction::kStore, next_job);
      for (int r = 0; r < o.repeat; ++r) {
        best = std::min(best, time_engine(engine, s, Direction::kStore, next_job));
      }
      const double bytes = double(s.num_chunks) * layout.groups[0].chunk_bytes();
      emit(out, o.json,
           {{"bench", "transfer_coalescing"},
            {"layout", to_string(layout_kind)},
            {"chunk_bytes", layout.groups[0].chunk_bytes()},
            {"coalesce", coalesce},
            {"descriptors", descriptors},
            {"descriptors_per_s", descriptors / best},
            {"chunks_per_s", s.num_chunks / best},
            {"kvtier_gbps", bytes / best / 1e9}});
    }
  }
  return 0;
}

}  // namespace kvtier::bench
