// CUDA-on-CPU: what nvcc and the CUDA runtime give a .cu file, for g++ or
// clang compiling it as C++ (-x c++ -include this header; the include/
// folder beside it stands in for cuda_runtime.h, cuda_fp16.h, cuda_bf16.h).
// It exists to run tf_ops's CUDA kernels and their self-test (tests/gpu/)
// where there is no GPU, under AddressSanitizer, UndefinedBehaviorSanitizer
// and ThreadSanitizer; what it can and cannot show is in docs/gpu.md.
//
// The model:
//   - every CUDA thread of a block is an OS thread (a pool, reused across
//     blocks and launches), so ThreadSanitizer sees two threads of a block
//     touch memory without a barrier between them; blocks run one after
//     another, a launch has finished when it returns;
//   - __syncthreads is a barrier on atomics (futex sleeps); its
//     acquire/release ordering is the only happens-before between the threads
//     of a block, as on the GPU;
//   - a warp is 32 consecutive threads; the *_sync intrinsics meet their lanes
//     in a rendezvous that checks the lane mask: the caller is in it, every
//     live lane it names calls the same intrinsic with the same mask, a
//     shuffle reads a lane that takes part;
//   - __shared__ is a static variable (one block runs at a time);
//     TF_OPS_DYNAMIC_SHARED (launch_common.cuh) is the launch's buffer of
//     exactly the requested bytes;
//   - a launch checks CUDA's limits (1024 threads, block and grid
//     dimensions, 48 KiB of dynamic shared memory unless raised); a thread
//     that leaves the kernel while others wait at __syncthreads, lanes that
//     disagree at a warp intrinsic, a deadlock, a fault (SIGSEGV, SIGBUS,
//     SIGFPE) and any sanitizer report while a kernel runs become that
//     launch's error (runtime_api.h), naming the kernel, block, thread and
//     source line.
// __CUDACC__ and __CUDA_ARCH__ stay undefined: code shared with the host
// (math_primitives.h) takes its host branch, and the math functions are the
// host's, not CUDA's.

#ifndef TF_OPS_TESTS_GPU_CUDA_ON_CPU_CUDA_ON_CPU_H_
#define TF_OPS_TESTS_GPU_CUDA_ON_CPU_CUDA_ON_CPU_H_

#define TF_OPS_CUDA_ON_CPU 1

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

// ------------------------------------------------------- qualifiers -------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __constant__
// One block runs at a time, so a block's shared variables can be statics.
#define __shared__ static

#include "tests/gpu/cuda_on_cpu/half_types.h"
#include "tests/gpu/cuda_on_cpu/runtime_api.h"
#include "tests/gpu/cuda_on_cpu/vector_types.h"

// ------------------------------------------------ built-in variables ------
// Set by the executor in each thread before it runs the kernel.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace cuda_on_cpu {

// --------------------------------------------- the executor's interface ---
struct LaunchSite {
  const char* kernel;  // the launch's kernel expression, as written
  const char* file;
  int line;
};

// Runs body(closure) in every thread of every block of the grid, then
// returns; a launch error (bad configuration, or found while it ran) is
// left for cudaGetLastError.
using ThreadBody = void (*)(const void* closure);
void RunKernel(const LaunchSite& site, const char* signature,
               const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
               cudaStream_t stream, ThreadBody body, const void* closure);

// The kernel's parameter types, as the compiler spells them.
template <typename... P>
const char* Signature() {
  return __PRETTY_FUNCTION__;
}

// What TF_OPS_LAUNCH(...) gives: called with the kernel's arguments, it
// converts them to the parameter types (as a launch does) and runs the grid.
// Each thread gets its own copy of the parameters.
template <typename... P>
struct KernelLaunch {
  void (*kernel)(P...);
  LaunchSite site;
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;

  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P),
                  "a kernel launched with the wrong number of arguments");
    using Params = std::tuple<std::decay_t<P>...>;
    struct Closure {
      void (*kernel)(P...);
      Params params;
    };
    const Closure closure{kernel, Params(std::forward<A>(args)...)};
    RunKernel(
        site, Signature<P...>(), reinterpret_cast<const void*>(kernel), grid,
        block, shared_bytes, stream,
        [](const void* p) {
          const Closure& c = *static_cast<const Closure*>(p);
          Params mine = c.params;
          std::apply(c.kernel, std::move(mine));
        },
        &closure);
  }
};

template <typename... P>
KernelLaunch<P...> MakeLaunch(const LaunchSite& site, dim3 grid, dim3 block,
                              size_t shared_bytes, cudaStream_t stream,
                              void (*kernel)(P...)) {
  return {kernel, site, grid, block, shared_bytes, stream};
}

// The device side of the executor (executor.cc).
void SyncThreads(const char* file, int line);
// __syncthreads_count (op 0), _and (1), _or (2).
int SyncThreadsReduce(int predicate, int op, const char* file, int line);
enum WarpOp : int {
  kWarpShflIdx,
  kWarpShflUp,
  kWarpShflDown,
  kWarpShflXor,
  kWarpBallot,
  kWarpSync,
};
// One warp-level intrinsic: shuffles return the source lane's value (or the
// caller's own, where CUDA says so), a ballot the mask of participating
// lanes whose value is nonzero, __syncwarp 0.
uint64_t WarpCollective(WarpOp op, unsigned mask, uint64_t value, int arg,
                        int width, const char* file, int line);
unsigned ActiveMask();
void* DynamicShared();
[[noreturn]] void Trap(const char* file, int line);

template <typename T>
uint64_t ToBits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "a warp shuffle moves at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace cuda_on_cpu

// Every launch of the project is written TF_OPS_LAUNCH(grid, block,
// shared_bytes, stream, Kernel<...>)(args...) (launch_common.cuh, which uses
// this definition when it is there).
#define TF_OPS_LAUNCH(grid, block, shared_bytes, stream, ...)             \
  ::cuda_on_cpu::MakeLaunch(                                              \
      ::cuda_on_cpu::LaunchSite{#__VA_ARGS__, __FILE__, __LINE__}, (grid), \
      (block), (shared_bytes), (stream), __VA_ARGS__)
// Grid-stride launches get at most 3 blocks (launch_common.cuh), so that
// small sizes already go round the loops (and fewer blocks run).
#define TF_OPS_MAX_BLOCKS 3
// Dynamic shared memory: the launch's buffer of shared_bytes.
#define TF_OPS_DYNAMIC_SHARED(type, name) \
  type* const name = static_cast<type*>(::cuda_on_cpu::DynamicShared())

// ------------------------------------------------------ synchronisation ---
#define CUDA_ON_CPU_HERE \
  const char *file = __builtin_FILE(), int line = __builtin_LINE()

inline void __syncthreads(CUDA_ON_CPU_HERE) {
  cuda_on_cpu::SyncThreads(file, line);
}
inline int __syncthreads_count(int predicate, CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::SyncThreadsReduce(predicate, 0, file, line);
}
inline int __syncthreads_and(int predicate, CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::SyncThreadsReduce(predicate, 1, file, line);
}
inline int __syncthreads_or(int predicate, CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::SyncThreadsReduce(predicate, 2, file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, CUDA_ON_CPU_HERE) {
  cuda_on_cpu::WarpCollective(cuda_on_cpu::kWarpSync, mask, 0, 0, warpSize,
                              file, line);
}
// Fences order memory between the threads of the grid; ThreadSanitizer does
// not model a fence as a happens-before edge.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ------------------------------------------------------ warp intrinsics ---
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::FromBits<T>(cuda_on_cpu::WarpCollective(
      cuda_on_cpu::kWarpShflIdx, mask, cuda_on_cpu::ToBits(var), src_lane,
      width, file, line));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::FromBits<T>(cuda_on_cpu::WarpCollective(
      cuda_on_cpu::kWarpShflUp, mask, cuda_on_cpu::ToBits(var),
      static_cast<int>(delta), width, file, line));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::FromBits<T>(cuda_on_cpu::WarpCollective(
      cuda_on_cpu::kWarpShflDown, mask, cuda_on_cpu::ToBits(var),
      static_cast<int>(delta), width, file, line));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::FromBits<T>(cuda_on_cpu::WarpCollective(
      cuda_on_cpu::kWarpShflXor, mask, cuda_on_cpu::ToBits(var), lane_mask,
      width, file, line));
}
inline unsigned __ballot_sync(unsigned mask, int predicate, CUDA_ON_CPU_HERE) {
  return static_cast<unsigned>(
      cuda_on_cpu::WarpCollective(cuda_on_cpu::kWarpBallot, mask,
                                  predicate != 0, 0, warpSize, file, line));
}
inline int __all_sync(unsigned mask, int predicate, CUDA_ON_CPU_HERE) {
  const unsigned ballot = static_cast<unsigned>(
      cuda_on_cpu::WarpCollective(cuda_on_cpu::kWarpBallot, mask,
                                  predicate != 0, 0, warpSize, file, line));
  // The ballot holds the participating lanes whose predicate is true.
  const unsigned participants = static_cast<unsigned>(
      cuda_on_cpu::WarpCollective(cuda_on_cpu::kWarpBallot, mask, 1, 0,
                                  warpSize, file, line));
  return ballot == participants;
}
inline int __any_sync(unsigned mask, int predicate, CUDA_ON_CPU_HERE) {
  return cuda_on_cpu::WarpCollective(cuda_on_cpu::kWarpBallot, mask,
                                     predicate != 0, 0, warpSize, file,
                                     line) != 0;
}
inline unsigned __activemask() { return cuda_on_cpu::ActiveMask(); }
inline unsigned __lanemask_lt() {
  const unsigned lane =
      (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) %
      warpSize;
  return (1u << lane) - 1u;
}

#undef CUDA_ON_CPU_HERE

// ------------------------------------------------------------- atomics ----
// Relaxed, as on the GPU: an atomic gives no happens-before edge to other
// memory, so ThreadSanitizer still sees a missing barrier around it.
#define CUDA_ON_CPU_ATOMIC_RMW(name, builtin)                 \
  template <typename T>                                       \
  T name(T* address, T value) {                               \
    static_assert(std::is_integral<T>::value, #name);         \
    return builtin(address, value, __ATOMIC_RELAXED);         \
  }
CUDA_ON_CPU_ATOMIC_RMW(atomicSub, __atomic_fetch_sub)
CUDA_ON_CPU_ATOMIC_RMW(atomicAnd, __atomic_fetch_and)
CUDA_ON_CPU_ATOMIC_RMW(atomicOr, __atomic_fetch_or)
CUDA_ON_CPU_ATOMIC_RMW(atomicXor, __atomic_fetch_xor)
#undef CUDA_ON_CPU_ATOMIC_RMW

template <typename T>
T atomicExch(T* address, T value) {
  return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
inline float atomicExch(float* address, float value) {
  float old;
  __atomic_exchange(address, &value, &old, __ATOMIC_RELAXED);
  return old;
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  __atomic_compare_exchange_n(address, &compare, value, false,
                              __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // the old value, whether or not it was replaced
}
// Read-modify-write by compare-and-swap, for the operations without a
// builtin (floating-point adds, min and max).
template <typename T, typename Fn>
T AtomicUpdate(T* address, Fn fn) {
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired = fn(old);
  while (!__atomic_compare_exchange(address, &old, &desired, false,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    desired = fn(old);
  }
  return old;
}
template <typename T>
T atomicAdd(T* address, T value) {
  if constexpr (std::is_integral<T>::value) {
    return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
  } else {
    return AtomicUpdate(address, [value](T old) { return T(old + value); });
  }
}
template <typename T>
T atomicMin(T* address, T value) {
  return AtomicUpdate(address,
                      [value](T old) { return value < old ? value : old; });
}
template <typename T>
T atomicMax(T* address, T value) {
  return AtomicUpdate(address,
                      [value](T old) { return value > old ? value : old; });
}
inline unsigned atomicInc(unsigned* address, unsigned limit) {
  return AtomicUpdate(address, [limit](unsigned old) {
    return old >= limit ? 0u : old + 1u;
  });
}
inline unsigned atomicDec(unsigned* address, unsigned limit) {
  return AtomicUpdate(address, [limit](unsigned old) {
    return old == 0u || old > limit ? limit : old - 1u;
  });
}

// ------------------------------------------- math and bit intrinsics ------
// The host's functions: close to CUDA's, not bit for bit (the fast-math
// __expf family is the accurate one here).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanhf(float x) { return std::tanh(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline double __fma_rn(double x, double y, double z) {
  return std::fma(x, y, z);
}
inline float __saturatef(float x) {
  return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
}
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float_as_int(float x) { return cuda_on_cpu::FromBits<int>(cuda_on_cpu::ToBits(x)); }
inline unsigned __float_as_uint(float x) {
  return cuda_on_cpu::FromBits<unsigned>(cuda_on_cpu::ToBits(x));
}
inline float __int_as_float(int x) {
  return cuda_on_cpu::FromBits<float>(cuda_on_cpu::ToBits(x));
}
inline float __uint_as_float(unsigned x) {
  return cuda_on_cpu::FromBits<float>(cuda_on_cpu::ToBits(x));
}
inline long long __double_as_longlong(double x) {
  return cuda_on_cpu::FromBits<long long>(cuda_on_cpu::ToBits(x));
}
inline double __longlong_as_double(long long x) {
  return cuda_on_cpu::FromBits<double>(cuda_on_cpu::ToBits(x));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x));
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
// CUDA's integer and floating-point min and max, one overload per type.
#define CUDA_ON_CPU_MIN_MAX(T)                          \
  inline T min(T a, T b) { return b < a ? b : a; }      \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDA_ON_CPU_MIN_MAX(int)
CUDA_ON_CPU_MIN_MAX(unsigned int)
CUDA_ON_CPU_MIN_MAX(long)
CUDA_ON_CPU_MIN_MAX(unsigned long)
CUDA_ON_CPU_MIN_MAX(long long)
CUDA_ON_CPU_MIN_MAX(unsigned long long)
#undef CUDA_ON_CPU_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline long long clock64() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}
inline void __trap(const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  cuda_on_cpu::Trap(file, line);
}

#endif  // TF_OPS_TESTS_GPU_CUDA_ON_CPU_CUDA_ON_CPU_H_
