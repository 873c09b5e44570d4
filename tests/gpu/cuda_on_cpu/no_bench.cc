// The CPU run's --bench: there is none. Timing CUDA threads that are OS
// threads measures the layer's thread switches, not the kernels, so
// gpu_bench.cu is left out of the CUDA-on-CPU builds (about a tenth of their
// compile time) and this takes the place of its RunBenchmarks.

#include <cstdint>
#include <cstdio>

namespace tf_ops {

int RunBenchmarks(int64_t /*n*/) {
  std::fprintf(stderr,
               "--bench: no benchmarks on the CPU (CUDA-on-CPU would time its "
               "own thread switches, not the kernels); run it on a GPU\n");
  return 64;
}

}  // namespace tf_ops
