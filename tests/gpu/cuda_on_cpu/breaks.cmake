# The deliberate breaks: one kernel bug each (in a kernel source, or in a
# header the kernels share), of the kinds that hide in reductions and vector
# loads, which the GPU self-test on the CPU must catch
# (tools/gpu_selftest_cpu.sh builds each into its build's self-test, runs the
# family, and fails unless the run fails with a line that matches <expect>,
# which names the family and the case). A break whose text is no longer in
# its kernel stops the build (cmake/TfOpsApplyBreak.cmake): update it here.
#
# tf_ops_selftest_break(<name> <build> <family> <kernel source> <expect>
#                       <why> <text> <replacement>)

tf_ops_selftest_break(missing-syncthreads tsan norm
  tf_ops/cu/core/row_groups.cuh
  "^FAIL norm [a-z0-9]+ [A-Za-z]+ \\[[0-9]+, [0-9]+\\] [a-z]+ launch: .*ThreadSanitizer: data race"
  "the __syncthreads between the warps' values and their reading, in a block row's reduction"
  [=[
  if (threadIdx.x % kWarpSize == 0) shared[warp] = v;
  __syncthreads();
  C r = shared[0];
]=] [=[
  if (threadIdx.x % kWarpSize == 0) shared[warp] = v;
  C r = shared[0];
]=])

tf_ops_selftest_break(grid-stride-tail asan forward
  tf_ops/cu/activation/activation_gpu.cu
  "^FAIL [A-Za-z]+ forward (float16|bfloat16|float32|float64) n=[0-9]+.*launch error .*AddressSanitizer: heap-buffer-overflow"
  "the one-element tail loop running to i <= n"
  [=[
  for (int64_t i = done + GlobalThread(); i < n; i += GlobalThreads()) {
    y[i] = ForwardOne(op, x[i]);
]=] [=[
  for (int64_t i = done + GlobalThread(); i <= n; i += GlobalThreads()) {
    y[i] = ForwardOne(op, x[i]);
]=])

tf_ops_selftest_break(shuffle-offset plain softmax
  tf_ops/cu/core/row_groups.cuh
  "^FAIL softmax [a-z_ -]+ [0-9]+x[0-9]+"
  "the warp butterfly starting at offset 8, not 16 (each half-warp reduces alone)"
  [=[
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
]=] [=[
  for (int offset = kWarpSize / 4; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
]=])

tf_ops_selftest_break(misaligned-load asan forward
  tf_ops/cu/activation/activation_gpu.cu
  "^FAIL [A-Za-z]+ forward float64 n=[0-9]+ unaligned: launch error .*misaligned"
  "the 16-byte packs taken where a buffer is only 8-byte aligned"
  [=[
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
]=] [=[
  return reinterpret_cast<uintptr_t>(p) % 8 == 0;
]=])

tf_ops_selftest_break(attention-tile-tail asan attention
  tf_ops/cu/attention/attention_gpu.cu
  "^FAIL attention (float16|bfloat16|float32|float64) B=[0-9]+ T=[0-9]+ S=[0-9]+ .* (forward|backward) launch: .*AddressSanitizer: heap-buffer-overflow"
  "a short tile of queries, keys or values loaded one row too far (i <= rows)"
  [=[
    tile[i * ld + e] = i < rows ? Load(src[offset(i) + e]) : C(0);
]=] [=[
    tile[i * ld + e] = i <= rows ? Load(src[offset(i) + e]) : C(0);
]=])

tf_ops_selftest_break(group-norm-row-tail asan group_norm
  tf_ops/cu/group_norm/group_norm_gpu.cu
  "^FAIL group_norm [a-z0-9]+ [A-Za-z]+ \\[n [0-9]+, b [0-9]+, c [0-9]+, i 1\\] groups [0-9]+ (forward|grad) launch: .*AddressSanitizer: heap-buffer-overflow"
  "a channels-last row tile's sums running a whole tile of rows past the last row (no clamp to b)"
  [=[
      const int64_t r1 = r0 + kGpuRowBlock < s.b ? r0 + kGpuRowBlock : s.b;
]=] [=[
      const int64_t r1 = r0 + kGpuRowBlock;
]=])
