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

// The transfer engine over its own device cache and pinned pool on `device`.
struct EngineSide {
  EngineSide(Device& device, const KvLayout& layout, const TransferBenchOptions& o)
      : setup(device, layout, o.total_bytes, false),
        compute(device.create_stream()),
        engine(device, layout, setup.caches, setup.slots, compute,
               TransferOptions{.max_batch_descriptors = o.max_batch_descriptors}) {}
  Setup setup;
  StreamHandle compute;
  TransferEngine engine;
};

}  // namespace

int run_cuda_transfer_bench(const TransferBenchOptions& o, std::ostream& out, std::ostream& err) {
  const CudaDeviceOptions options{.ordinal = o.cuda_ordinal,
                                  .max_descriptors_per_call = o.max_batch_descriptors};
  auto opened = CudaDevice::open(options);
  if (!opened) {
    err << "kvtier bench transfer --device cuda: " << opened.error().message << "\n";
    return 1;
  }
  CudaDevice& device = **opened;
  // The same engine on a device that issues one cudaMemcpyAsync per descriptor: what the batch
  // API buys. Only when the driver has the batch API (otherwise both are the same).
  std::unique_ptr<CudaDevice> per_copy;
  if (device.uses_batch_api()) {
    auto second = CudaDevice::open({.ordinal = o.cuda_ordinal,
                                    .max_descriptors_per_call = o.max_batch_descriptors,
                                    .use_batch_api = false});
    if (second) per_copy = std::move(*second);
  }
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
      EngineSide batch(device, layout, o);
      std::unique_ptr<EngineSide> loop;
      if (per_copy) loop = std::make_unique<EngineSide>(*per_copy, layout, o);
      const Setup& s = batch.setup;
      const size_t bytes = size_t{s.num_chunks} * layout.groups[0].chunk_bytes();
      const DeviceAddress contiguous = device.allocate(bytes);
      for (Direction dir : {Direction::kLoad, Direction::kStore}) {
        const CopyKind kind =
            dir == Direction::kLoad ? CopyKind::kHostToDevice : CopyKind::kDeviceToHost;
        const size_t descriptors =
            build_copy_descriptors(layout, s.caches, s.slots, dir, s.chunks, true).size();
        double best_engine = 1e30, best_loop = 1e30, best_contiguous = 1e30;
        // Warm pools, pages and the link, then interleave so every side sees the same noise.
        time_engine(batch.engine, s, dir, next_job);
        if (loop) time_engine(loop->engine, loop->setup, dir, next_job);
        time_contiguous(device, copy_stream, done, kind, contiguous, s.slots.base, bytes);
        for (int r = 0; r < o.repeat; ++r) {
          best_contiguous = std::min(
              best_contiguous,
              time_contiguous(device, copy_stream, done, kind, contiguous, s.slots.base, bytes));
          best_engine = std::min(best_engine, time_engine(batch.engine, s, dir, next_job));
          if (loop) {
            best_loop = std::min(best_loop, time_engine(loop->engine, loop->setup, dir, next_job));
          }
        }
        const double kvtier_gbps = double(bytes) / best_engine / 1e9;
        const double contiguous_gbps = double(bytes) / best_contiguous / 1e9;
        nlohmann::ordered_json row{{"bench", "transfer_cuda"},
                                   {"device", device.gpu_name()},
                                   {"batch_api", device.uses_batch_api()},
                                   {"layout", to_string(layout_kind)},
                                   {"chunk_bytes", layout.groups[0].chunk_bytes()},
                                   {"direction", kind == CopyKind::kHostToDevice ? "h2d" : "d2h"},
                                   {"descriptors", descriptors},
                                   {"kvtier_gbps", kvtier_gbps},
                                   {"contiguous_gbps", contiguous_gbps},
                                   {"ratio", kvtier_gbps / contiguous_gbps}};
        if (loop) row["per_copy_gbps"] = double(bytes) / best_loop / 1e9;
        emit(out, o.json, row);
      }
      device.free(contiguous);
    }
  }
  return 0;
}

}  // namespace kvtier::bench
