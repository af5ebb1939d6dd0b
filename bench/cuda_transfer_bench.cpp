#include "kvtier/device/cuda_device.h"
#include "transfer_bench.h"
#include "transfer_bench_setup.h"

namespace kvtier::bench {
namespace {

// One copy of the whole pool between a contiguous device buffer and the pinned pool: a
// one-descriptor copy_batch, which CudaDevice issues as a single cudaMemcpyAsync.
double time_contiguous(Device& device, StreamHandle stream, EventHandle done, CopyKind kind,
                       DeviceAddress dev, DeviceAddress host, size_t bytes) {
  const std::vector<CopyDescriptor> one{kind == CopyKind::kHostToDevice
                                            ? CopyDescriptor{host, dev, bytes}
                                            : CopyDescriptor{dev, host, bytes}};
  const auto t0 = BenchClock::now();
  device.copy_batch(stream, kind, one);
  device.record(done, stream);
  device.synchronize(done);
  return seconds_since(t0);
}

}  // namespace

int run_cuda_transfer_bench(const TransferBenchOptions& o, std::ostream& out, std::ostream& err) {
  auto opened = CudaDevice::open(
      {.ordinal = o.cuda_ordinal, .max_descriptors_per_call = o.max_batch_descriptors});
  if (!opened) {
    err << "kvtier bench transfer --device cuda: " << opened.error().message << "\n";
    return 1;
  }
  CudaDevice& device = **opened;
  const StreamHandle compute = device.create_stream();
  const StreamHandle copy_stream = device.create_stream();
  const EventHandle done = device.create_event();
  JobId next_job = 1;
  if (!o.json) {
    out << "transfer engine on " << device.name() << " (" << device.gpu_name() << ", "
        << (device.uses_batch_api() ? "cuMemcpyBatchAsync" : "cudaMemcpyAsync per copy")
        << ") vs one contiguous cudaMemcpyAsync of the same bytes\n";
  }
  for (DeviceLayout layout_kind : {DeviceLayout::kPerLayer, DeviceLayout::kCrossLayer}) {
    for (size_t chunk_bytes : o.chunk_bytes) {
      const KvLayout layout = bench_layout(layout_kind, chunk_bytes);
      Setup s(device, layout, o.total_bytes, false);
      const size_t bytes = size_t{s.num_chunks} * layout.groups[0].chunk_bytes();
      const DeviceAddress contiguous = device.allocate(bytes);
      TransferEngine engine(device, layout, s.caches, s.slots, compute,
                            TransferOptions{.max_batch_descriptors = o.max_batch_descriptors});
      for (Direction dir : {Direction::kLoad, Direction::kStore}) {
        const CopyKind kind =
            dir == Direction::kLoad ? CopyKind::kHostToDevice : CopyKind::kDeviceToHost;
        const size_t descriptors =
            build_copy_descriptors(layout, s.caches, s.slots, dir, s.chunks, true).size();
        double best_engine = 1e30, best_contiguous = 1e30;
        time_engine(engine, s, dir, next_job);  // warm pools, pages and the link
        time_contiguous(device, copy_stream, done, kind, contiguous, s.slots.base, bytes);
        for (int r = 0; r < o.repeat; ++r) {  // interleaved: both sides see the same noise
          best_contiguous = std::min(
              best_contiguous,
              time_contiguous(device, copy_stream, done, kind, contiguous, s.slots.base, bytes));
          best_engine = std::min(best_engine, time_engine(engine, s, dir, next_job));
        }
        const double kvtier_gbps = double(bytes) / best_engine / 1e9;
        const double contiguous_gbps = double(bytes) / best_contiguous / 1e9;
        emit(out, o.json,
             {{"bench", "transfer_cuda"},
              {"device", device.gpu_name()},
              {"batch_api", device.uses_batch_api()},
              {"layout", to_string(layout_kind)},
              {"chunk_bytes", layout.groups[0].chunk_bytes()},
              {"direction", kind == CopyKind::kHostToDevice ? "h2d" : "d2h"},
              {"descriptors", descriptors},
              {"kvtier_gbps", kvtier_gbps},
              {"contiguous_gbps", contiguous_gbps},
              {"ratio", kvtier_gbps / contiguous_gbps}});
      }
      device.free(contiguous);
    }
  }
  return 0;
}

}  // namespace kvtier::bench
