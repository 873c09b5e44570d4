// CUDA-on-CPU: the runtime API of runtime_api.h over host memory.

#include "tests/gpu/cuda_on_cpu/runtime_api.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tests/gpu/cuda_on_cpu/executor.h"

namespace cuda_on_cpu {
namespace {

std::mutex g_mu;
std::map<uintptr_t, size_t>* g_allocations = nullptr;  // begin -> bytes
std::vector<std::string>* g_messages = nullptr;       // per recorded error
cudaError_t g_pending = cudaSuccess;
std::map<const void*, size_t>* g_dynamic_shared = nullptr;

std::map<uintptr_t, size_t>& Allocations() {
  if (g_allocations == nullptr) g_allocations = new std::map<uintptr_t, size_t>;
  return *g_allocations;
}

cudaError_t Fail(cudaError_t error) {
  g_pending = error;
  return error;
}

// Whether [p, p + bytes) lies inside one device allocation.
bool IsDeviceRange(const void* p, size_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const auto& a = Allocations();
  auto it = a.upper_bound(at);
  if (it == a.begin()) return false;
  --it;
  return at >= it->first && at + bytes <= it->first + it->second;
}

struct Event {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

}  // namespace

cudaError_t RecordError(cudaError_t kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_messages == nullptr) g_messages = new std::vector<std::string>;
  g_messages->push_back(message.empty() ? "unknown error" : message);
  (void)kind;
  return Fail(static_cast<cudaError_t>(cudaErrorCudaOnCpuFirst +
                                       g_messages->size() - 1));
}

size_t MaxDynamicShared(const void* kernel) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_dynamic_shared != nullptr) {
    auto it = g_dynamic_shared->find(kernel);
    if (it != g_dynamic_shared->end()) return it->second;
  }
  return kDefaultSharedBytes;
}

}  // namespace cuda_on_cpu

using cuda_on_cpu::Allocations;
using cuda_on_cpu::Fail;
using cuda_on_cpu::g_mu;
using cuda_on_cpu::IsDeviceRange;

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue);
  // Exactly `bytes` (AddressSanitizer then reports an access past them),
  // 256-byte aligned as cudaMalloc's.
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) {
    return Fail(cudaErrorMemoryAllocation);
  }
  std::memset(p, 0xff, bytes);  // NaN in every float type
  std::lock_guard<std::mutex> lock(g_mu);
  Allocations()[reinterpret_cast<uintptr_t>(p)] = bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Allocations().find(reinterpret_cast<uintptr_t>(ptr));
  if (it == Allocations().end()) return Fail(cudaErrorInvalidDevicePointer);
  Allocations().erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue);
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  return *ptr == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes,
                       cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const bool dst_device =
        kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool src_device =
        kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
      return Fail(cudaErrorInvalidMemcpyDirection);
    }
    if ((dst_device && !IsDeviceRange(dst, bytes)) ||
        (src_device && !IsDeviceRange(src, bytes))) {
      return Fail(cudaErrorInvalidValue);
    }
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!IsDeviceRange(ptr, bytes)) return Fail(cudaErrorInvalidValue);
  }
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes,
                            cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::mutex> lock(g_mu);
  return cuda_on_cpu::g_pending;  // an error stays until it is fetched
}

cudaError_t cudaDeviceReset() { return cudaSuccess; }

cudaError_t cudaGetLastError() {
  std::lock_guard<std::mutex> lock(g_mu);
  const cudaError_t e = cuda_on_cpu::g_pending;
  cuda_on_cpu::g_pending = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  std::lock_guard<std::mutex> lock(g_mu);
  return cuda_on_cpu::g_pending;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: break;
  }
  return error >= cudaErrorCudaOnCpuFirst ? "cudaErrorLaunchFailure"
                                          : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: break;
  }
  if (error >= cudaErrorCudaOnCpuFirst) {
    std::lock_guard<std::mutex> lock(g_mu);
    const size_t i = static_cast<size_t>(error - cudaErrorCudaOnCpuFirst);
    if (cuda_on_cpu::g_messages != nullptr &&
        i < cuda_on_cpu::g_messages->size()) {
      return (*cuda_on_cpu::g_messages)[i].c_str();
    }
  }
  return "unknown error";
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : Fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name),
                "none: CUDA-on-CPU (tests/gpu/cuda_on_cpu)");
  prop->totalGlobalMem = size_t{1} << 34;
  prop->sharedMemPerBlock = cuda_on_cpu::kDefaultSharedBytes;
  prop->sharedMemPerBlockOptin = cuda_on_cpu::kOptinSharedBytes;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = cuda_on_cpu::kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 0;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->maxThreadsPerMultiProcessor = cuda_on_cpu::kMaxThreadsPerBlock;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr,
                                   int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    return Fail(cudaErrorInvalidDevice);
  }
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    default: return Fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

// The CUDA API this layer follows.
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

// Streams: every operation runs at once, in order, so a stream is only a
// handle.
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = reinterpret_cast<cudaStream_t>(new char);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  return cudaStreamCreate(stream);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaDeviceSynchronize();
}

cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new cuda_on_cpu::Event());
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<cuda_on_cpu::Event*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  auto* e = reinterpret_cast<cuda_on_cpu::Event*>(event);
  e->at = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return cudaEventSynchronize(event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  auto* a = reinterpret_cast<cuda_on_cpu::Event*>(start);
  auto* b = reinterpret_cast<cuda_on_cpu::Event*>(end);
  if (a == nullptr || b == nullptr || !a->recorded || !b->recorded) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
  return cudaSuccess;
}

cudaError_t CudaOnCpuFuncSetAttribute(const void* func, cudaFuncAttribute attr,
                                      int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<size_t>(value) > cuda_on_cpu::kOptinSharedBytes) {
    return Fail(cudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (cuda_on_cpu::g_dynamic_shared == nullptr) {
    cuda_on_cpu::g_dynamic_shared = new std::map<const void*, size_t>;
  }
  (*cuda_on_cpu::g_dynamic_shared)[func] = static_cast<size_t>(value);
  return cudaSuccess;
}
