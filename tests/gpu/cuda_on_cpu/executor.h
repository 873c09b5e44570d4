// CUDA-on-CPU: what the executor (executor.cc) and the runtime
// (runtime_api.cc) tell each other. Internal to the layer.

#ifndef TF_OPS_TESTS_GPU_CUDA_ON_CPU_EXECUTOR_H_
#define TF_OPS_TESTS_GPU_CUDA_ON_CPU_EXECUTOR_H_

#include <cstddef>
#include <string>

#include "tests/gpu/cuda_on_cpu/cuda_on_cpu.h"

namespace cuda_on_cpu {

// Makes `message` the pending error (cudaGetLastError) under a code of its
// own, and returns that code; `kind` is the CUDA error it stands for.
cudaError_t RecordError(cudaError_t kind, const std::string& message);

// The dynamic shared memory a kernel may use (cudaFuncSetAttribute), 48 KiB
// unless raised.
size_t MaxDynamicShared(const void* kernel);
constexpr size_t kDefaultSharedBytes = 48 * 1024;
constexpr size_t kOptinSharedBytes = 227 * 1024;  // sm_90's opt-in limit
constexpr int kMaxThreadsPerBlock = 1024;

// "tf_ops/cu/norm/norm_gpu.cu" out of an absolute path: from the last
// "/tf_ops/" or "/tests/" on.
const char* ShortPath(const char* path);

// Called for every sanitizer report (sanitizer_hooks.cc): one made in a
// CUDA thread becomes its launch's error; others are counted.
void NoteSanitizerReport(const char* summary);
// Sanitizer reports seen outside any kernel (the host code of the program).
int HostSanitizerReports();

}  // namespace cuda_on_cpu

#endif  // TF_OPS_TESTS_GPU_CUDA_ON_CPU_EXECUTOR_H_
