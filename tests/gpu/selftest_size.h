// How much of each family the GPU self-test runs; gpu_selftest.cu sets it
// from its flags, each family reads it.
//   kFull   the GPU machine's run (no flag);
//   kQuick  --quick: small sizes, one attribute variant per activation (for
//           compute-sanitizer);
//   kSmall  --small: the run on the CPU (tools/gpu_selftest_cpu.sh), where
//           each CUDA thread is an OS thread and every barrier or warp
//           shuffle costs a thread switch per thread. Every family, dtype
//           and code path stays (both sides of each warp/block switch, odd
//           sizes, tails, grid-stride loops that go round, aliasing and in
//           place), with fewer activations and shapes than kQuick.
// A family given `quick` also gets it for kSmall, and narrows it further
// where SmallShapes() says so.

#ifndef TF_OPS_TESTS_GPU_SELFTEST_SIZE_H_
#define TF_OPS_TESTS_GPU_SELFTEST_SIZE_H_

namespace tf_ops {

enum class SelftestSize { kFull, kQuick, kSmall };

inline SelftestSize& CurrentSelftestSize() {
  static SelftestSize size = SelftestSize::kFull;
  return size;
}

inline bool SmallShapes() {
  return CurrentSelftestSize() == SelftestSize::kSmall;
}

}  // namespace tf_ops

#endif  // TF_OPS_TESTS_GPU_SELFTEST_SIZE_H_
