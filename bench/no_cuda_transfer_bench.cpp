// The CUDA transfer benchmark in a build without the CUDA device (KVTIER_CUDA=OFF).
#include "transfer_bench.h"

namespace kvtier::bench {

int run_cuda_transfer_bench(const TransferBenchOptions&, std::ostream&, std::ostream& err) {
  err << "kvtier bench transfer --device cuda: this kvtier was built without the CUDA device "
         "(KVTIER_CUDA=OFF; configure where the CUDA toolkit is installed)\n";
  return 1;
}

}  // namespace kvtier::bench
