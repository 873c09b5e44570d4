// The CUDA-on-CPU layer's own test: what each built-in does, and that each
// misuse it claims to catch is caught, as a launch error naming the kernel
// and the source line. Built and run in every build by
// tools/gpu_selftest_cpu.sh; a check that needs a sanitizer (a race under
// ThreadSanitizer, an overrun under AddressSanitizer, a misaligned load
// under UndefinedBehaviorSanitizer) runs only in that build.
// Prints one line per check and `layer test: N passed, M failed`; exit
// status 1 when one failed.

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tf_ops/cu/core/launch_common.cuh"

namespace {

int g_passed = 0, g_failed = 0;

void Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  ++(ok ? g_passed : g_failed);
}

// The launch error (cudaGetLastError's message), or "" for none.
std::string TakeError() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

// Runs `launch`, which must fail with a message containing each of `parts`.
void ExpectError(const std::string& what, const std::function<void()>& launch,
                 const std::vector<std::string>& parts) {
  launch();
  const std::string error = TakeError();
  bool ok = !error.empty();
  for (const std::string& part : parts) {
    ok = ok && error.find(part) != std::string::npos;
  }
  Check(ok, what + (ok ? "" : " (got: \"" + error + "\")"));
}

template <typename T>
struct Buffer {
  T* p = nullptr;
  size_t n;
  explicit Buffer(size_t count, T fill = T()) : n(count) {
    cudaMalloc(&p, sizeof(T) * n);
    std::vector<T> host(n, fill);
    cudaMemcpy(p, host.data(), sizeof(T) * n, cudaMemcpyHostToDevice);
  }
  ~Buffer() { cudaFree(p); }
  std::vector<T> Host() const {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost);
    return host;
  }
};

// ------------------------------------------------------------ kernels ----

__global__ void Indices(int* out) {
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int per_block = blockDim.x * blockDim.y * blockDim.z;
  out[b * per_block + t] += b * per_block + t + 1;
}

// Tree sum over a 256-thread block in static shared memory.
__global__ void BlockSum(const float* in, float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void Shuffles(int* out) {
  const int lane = threadIdx.x % 32;
  int sum = lane;
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  const int down = __shfl_down_sync(0xffffffffu, lane, 3);
  const int up = __shfl_up_sync(0xffffffffu, lane, 2);
  const int idx8 = __shfl_sync(0xffffffffu, lane * 10, 5, 8);
  const double wide = __shfl_xor_sync(0xffffffffu, lane + 0.5, 1);
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  const int all = __all_sync(0xffffffffu, lane < 32);
  const int any = __any_sync(0xffffffffu, lane == 7);
  __syncwarp();
  int* o = out + threadIdx.x * 8;
  o[0] = sum;
  o[1] = down;
  o[2] = up;
  o[3] = idx8;
  o[4] = static_cast<int>(wide * 2);
  o[5] = static_cast<int>(ballot);
  o[6] = all;
  o[7] = any;
}

// Two half-warps meet separately, each with its own mask.
__global__ void HalfWarps(int* out) {
  const int lane = threadIdx.x % 32;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  int sum = lane;
  for (int offset = 8; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(mask, sum, offset);
  }
  out[threadIdx.x] = sum;
}

// A block of 48 threads: its second warp has 16 lanes; a full mask names
// lanes that do not exist, which take no part (but must not be read).
__global__ void PartialWarp(int* out, int first_offset) {
  int v = 1;
  for (int offset = first_offset; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  out[threadIdx.x] = v;
}

__global__ void DynamicSum(int n, float* out) {
  TF_OPS_DYNAMIC_SHARED(float, values);
  for (int i = threadIdx.x; i < n; i += blockDim.x) values[i] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += values[i];
    out[0] = s;
  }
}

__global__ void Atomics(int* counter, float* total, unsigned* biggest) {
  atomicAdd(counter, 1);
  atomicAdd(total, 0.5f);
  atomicMax(biggest, threadIdx.x);
}

__global__ void Votes(int* out) {
  const int count = __syncthreads_count(threadIdx.x % 2);
  const int all = __syncthreads_and(threadIdx.x < 1000);
  const int any = __syncthreads_or(threadIdx.x == 5);
  if (threadIdx.x == 0) {
    out[0] = count;
    out[1] = all;
    out[2] = any;
  }
}

__global__ void CountRuns(int* runs) {
  atomicAdd(&runs[threadIdx.x], 1);
  __syncthreads();  // a thread run twice would arrive twice
}

__global__ void Nothing() {}

__global__ void DisagreeingLanes(int* out) {
  if (threadIdx.x % 2 == 0) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  } else {
    __syncwarp();
  }
}

__global__ void MaskWithoutCaller(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xfffffffeu, 1, 1);
}

__global__ void ReadsOutsideMask(int* out) {
  // Lane 15 reads lane 16, which is not in the mask.
  if (threadIdx.x < 16) {
    out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, 1, 1, 32);
  }
}

__global__ void EarlyReturn(int* out) {
  if (threadIdx.x >= 200) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// Half of each warp waits at __syncthreads for the other half, which waits
// at __syncwarp for the first.
__global__ void Deadlock() {
  if (threadIdx.x % 32 < 16) {
    __syncthreads();
  } else {
    __syncwarp();
  }
}

__global__ void Segfault(int* p) { p[threadIdx.x] = 1; }

__global__ void Trapping() {
  if (threadIdx.x == 3) __trap();
}


// ------------------------------------------------------------- checks ----

void CheckIndices() {
  const dim3 grid(3, 2, 2), block(4, 3, 5);
  const int total = 12 * 60;
  Buffer<int> out(total, 0);
  TF_OPS_LAUNCH(grid, block, 0, nullptr, Indices)(out.p);
  bool ok = TakeError().empty();
  const std::vector<int> host = out.Host();
  for (int i = 0; i < total; ++i) ok = ok && host[i] == i + 1;
  Check(ok, "3-d grid and block: every thread once, with its indices");
}

void CheckBlockSum() {
  std::vector<float> values(256 * 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7);
  Buffer<float> in(values.size()), out(5);
  cudaMemcpy(in.p, values.data(), sizeof(float) * values.size(),
             cudaMemcpyHostToDevice);
  TF_OPS_LAUNCH(5, 256, 0, nullptr, BlockSum)(in.p, out.p);
  bool ok = TakeError().empty();
  const std::vector<float> host = out.Host();
  for (int b = 0; b < 5; ++b) {
    float want = 0;
    for (int i = 0; i < 256; ++i) want += values[b * 256 + i];
    ok = ok && host[b] == want;
  }
  Check(ok, "__syncthreads: a tree sum in static shared memory");
}

void CheckShuffles() {
  Buffer<int> out(64 * 8, -1);
  TF_OPS_LAUNCH(1, 64, 0, nullptr, Shuffles)(out.p);
  bool ok = TakeError().empty();
  const std::vector<int> h = out.Host();
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    const int* o = &h[t * 8];
    ok = ok && o[0] == 496 && o[1] == (lane + 3 < 32 ? lane + 3 : lane) &&
         o[2] == (lane >= 2 ? lane - 2 : lane) &&
         o[3] == (lane / 8 * 8 + 5) * 10 &&
         o[4] == static_cast<int>(((lane ^ 1) + 0.5) * 2) &&
         o[5] == static_cast<int>(ballot) && o[6] == 1 && o[7] == 1;
  }
  Check(ok, "warp shuffles (xor, down, up, indexed with width 8, 8 bytes), "
            "ballot, all, any, __syncwarp");
}

void CheckHalfWarps() {
  Buffer<int> out(32, -1);
  TF_OPS_LAUNCH(1, 32, 0, nullptr, HalfWarps)(out.p);
  bool ok = TakeError().empty();
  const std::vector<int> h = out.Host();
  for (int l = 0; l < 32; ++l) ok = ok && h[l] == (l < 16 ? 120 : 376);
  Check(ok, "two half-warps meeting apart, each under its own mask");
}

void CheckPartialWarp() {
  Buffer<int> out(48, -1);
  TF_OPS_LAUNCH(1, 48, 0, nullptr, PartialWarp)(out.p, 8);
  bool ok = TakeError().empty();
  const std::vector<int> h = out.Host();
  for (int t = 0; t < 48; ++t) ok = ok && h[t] == 16;
  Check(ok, "a full mask over a warp of 16 lanes (a block of 48 threads)");
  ExpectError("... reading a lane the block does not have",
              [&] { TF_OPS_LAUNCH(1, 48, 0, nullptr, PartialWarp)(out.p, 16); },
              {"which does not take part", "PartialWarp"});
}

void CheckDynamicShared() {
  Buffer<float> out(1, 0.0f);
  TF_OPS_LAUNCH(1, 128, 1000 * sizeof(float), nullptr, DynamicSum)(1000, out.p);
  Check(TakeError().empty() && out.Host()[0] == 1000.0f,
        "dynamic shared memory (TF_OPS_DYNAMIC_SHARED)");
  ExpectError(
      "more than 48 KiB of dynamic shared memory is refused",
      [&] {
        TF_OPS_LAUNCH(1, 32, 50000 * sizeof(float), nullptr, DynamicSum)(
            50000, out.p);
      },
      {"invalid launch configuration", "dynamic shared memory", "DynamicSum"});
  cudaFuncSetAttribute(DynamicSum, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       50000 * sizeof(float));
  TF_OPS_LAUNCH(1, 32, 50000 * sizeof(float), nullptr, DynamicSum)(50000,
                                                                    out.p);
  Check(TakeError().empty() && out.Host()[0] == 50000.0f,
        "... and allowed after cudaFuncSetAttribute");
}

void CheckAtomicsAndVotes() {
  Buffer<int> counter(1, 0);
  Buffer<float> total(1, 0.0f);
  Buffer<unsigned> biggest(1, 0u);
  TF_OPS_LAUNCH(4, 256, 0, nullptr, Atomics)(counter.p, total.p, biggest.p);
  Check(TakeError().empty() && counter.Host()[0] == 1024 &&
            total.Host()[0] == 512.0f && biggest.Host()[0] == 255u,
        "atomicAdd (int, float), atomicMax");
  Buffer<int> votes(3, -1);
  TF_OPS_LAUNCH(1, 256, 0, nullptr, Votes)(votes.p);
  const std::vector<int> v = votes.Host();
  Check(TakeError().empty() && v[0] == 128 && v[1] == 1 && v[2] == 1,
        "__syncthreads_count, _and, _or");
}

// Blocks of 40 and 64 threads in turn: the workers past 40 in the second
// warp wake with it and go back to sleep; one that wakes late must still run
// each later block once (a worker pairing an old wake-up with a new block
// ran it twice, on a busy machine).
void CheckEachBlockRunsEachThreadOnce() {
  constexpr int kRounds = 200;
  Buffer<int> runs(64, 0);
  bool ok = true;
  for (int r = 0; r < kRounds && ok; ++r) {
    TF_OPS_LAUNCH(2, r % 2 == 0 ? 40 : 64, 0, nullptr, CountRuns)(runs.p);
    ok = TakeError().empty();
  }
  const std::vector<int> host = runs.Host();
  for (int t = 0; t < 64 && ok; ++t) {
    ok = host[t] == (t < 40 ? 2 * kRounds : kRounds);
  }
  Check(ok, "blocks of 40 and 64 threads in turn: each thread once a block");
}

void CheckLimits() {
  ExpectError("1025 threads per block are refused",
              [] { TF_OPS_LAUNCH(1, 1025, 0, nullptr, Nothing)(); },
              {"invalid launch configuration", "1025 threads", "Nothing",
               "layer_test.cu:"});
  ExpectError("a grid y of 65536 is refused",
              [] { TF_OPS_LAUNCH(dim3(1, 65536), 32, 0, nullptr, Nothing)(); },
              {"invalid launch configuration", "grid dimension"});
  ExpectError("an empty grid is refused",
              [] { TF_OPS_LAUNCH(0, 32, 0, nullptr, Nothing)(); },
              {"invalid launch configuration", "empty"});
  TF_OPS_LAUNCH(1, 1024, 0, nullptr, Nothing)();
  Check(TakeError().empty(), "1024 threads per block run");
}

void CheckMisuse() {
  Buffer<int> out(256, 0);
  ExpectError("lanes at different warp intrinsics",
              [&] { TF_OPS_LAUNCH(1, 32, 0, nullptr, DisagreeingLanes)(out.p); },
              {"lanes disagree", "__shfl_xor_sync", "__syncwarp",
               "DisagreeingLanes", "layer_test.cu:"});
  ExpectError("a mask without the calling lane",
              [&] { TF_OPS_LAUNCH(1, 32, 0, nullptr, MaskWithoutCaller)(out.p); },
              {"leaves out the calling lane 0"});
  ExpectError("a shuffle reading a lane outside the mask",
              [&] { TF_OPS_LAUNCH(1, 32, 0, nullptr, ReadsOutsideMask)(out.p); },
              {"reads lane 16", "does not take part"});
  ExpectError("threads returning before a __syncthreads the others reach",
              [&] { TF_OPS_LAUNCH(1, 256, 0, nullptr, EarlyReturn)(out.p); },
              {"__syncthreads at", "56 of the block's 256 threads gone"});
  ExpectError("a deadlock (a warp split between __syncwarp and "
              "__syncthreads)",
              [] { TF_OPS_LAUNCH(1, 64, 0, nullptr, Deadlock)(); },
              {"is deadlocked", "wait at __syncwarp", "wait at __syncthreads"});
  ExpectError("a fault (writing through a null pointer)",
              [] {
                TF_OPS_LAUNCH(1, 32, 0, nullptr, Segfault)(
                    static_cast<int*>(nullptr));
              },
              {"SIGSEGV", "Segfault"});
  ExpectError("__trap", [] { TF_OPS_LAUNCH(1, 32, 0, nullptr, Trapping)(); },
              {"thread (3,0,0)", "__trap() at", "layer_test.cu:"});
  Buffer<int> again(32, 0);
  TF_OPS_LAUNCH(1, 32, 0, nullptr, Indices)(again.p);
  Check(TakeError().empty(), "a launch after failed ones runs");
}

#if defined(__SANITIZE_THREAD__)
// The same tree with the barriers left out: a race on s.
__global__ void BlockSumRacy(const float* in, float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = in[threadIdx.x];
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half];
  }
  if (threadIdx.x == 0) out[0] = s[0];
}

#endif
#if defined(__SANITIZE_ADDRESS__)
__global__ void ReadsPastEnd(const float* in, float* out, int n) {
  out[threadIdx.x] = in[threadIdx.x + n - 1];  // in[n] for thread 1
}

__global__ void MisalignedLoad(const float* in, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(in + 1);
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
#endif

void CheckSanitizers() {
#if defined(__SANITIZE_THREAD__)
  Buffer<float> in(256, 1.0f), out(1);
  ExpectError("ThreadSanitizer: a tree sum without its barriers races",
              [&] { TF_OPS_LAUNCH(1, 256, 0, nullptr, BlockSumRacy)(in.p, out.p); },
              {"ThreadSanitizer: data race", "BlockSumRacy"});
  Buffer<float> sums(1);
  TF_OPS_LAUNCH(1, 256, 0, nullptr, BlockSum)(in.p, sums.p);
  Check(TakeError().empty() && sums.Host()[0] == 256.0f,
        "ThreadSanitizer: ... and none with them");
#endif
#if defined(__SANITIZE_ADDRESS__)
  Buffer<float> in(33, 1.0f), out(32);
  ExpectError("AddressSanitizer: a read one past a cudaMalloc buffer",
              [&] { TF_OPS_LAUNCH(1, 32, 0, nullptr, ReadsPastEnd)(in.p, out.p, 33); },
              {"AddressSanitizer: heap-buffer-overflow", "ReadsPastEnd"});
  Buffer<float> aligned(8, 1.0f), result(32);
  ExpectError("UndefinedBehaviorSanitizer: a float4 load off its 16 bytes",
              [&] {
                TF_OPS_LAUNCH(1, 32, 0, nullptr, MisalignedLoad)(aligned.p,
                                                                  result.p);
              },
              {"misaligned", "MisalignedLoad"});
#endif
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CheckIndices();
  CheckBlockSum();
  CheckShuffles();
  CheckHalfWarps();
  CheckPartialWarp();
  CheckDynamicShared();
  CheckAtomicsAndVotes();
  CheckEachBlockRunsEachThreadOnce();
  CheckLimits();
  CheckMisuse();
  CheckSanitizers();
  std::printf("layer test: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
