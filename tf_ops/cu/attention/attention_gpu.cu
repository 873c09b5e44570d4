// The attention family's CUDA kernels (attention_gpu.h). Every kernel is one
// block of kThreads threads over shared-memory tiles sized at launch from the
// head dims and the compute type (AttentionTiles); the threads of a block
// split each tile product element by element, and every sum runs in a fixed
// order (over d, then over the key or query tiles in order), so a result
// does not depend on scheduling. No tensor cores yet: the products are
// scalar fused multiply-adds from shared memory, whose rows are padded by one
// element so that the threads of a warp walking a column hit distinct banks.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tf_ops/cc/attention/attention_params.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cu/attention/attention_gpu.h"
#include "tf_ops/cu/core/launch_common.cuh"

namespace tf_ops {
namespace attention {
namespace {

using gpu::BlocksFor;
using gpu::DispatchDtype;
using gpu::GlobalThread;
using gpu::GlobalThreads;
using gpu::kThreadsPerBlock;
using gpu::LastError;
using gpu::Load;
using gpu::Store;

// Threads of an attention block: four warps. The row pass of the forward
// gives each query row of a tile one thread, so no tile has more rows.
constexpr int kThreads = 128;
constexpr int kMaxTileRows = 64;
static_assert(kMaxTileRows <= kThreads, "one thread per row of a tile");
// Shared memory past the default 48 KiB needs the kernel's opt-in; beyond
// 96 KiB a block would leave an H100's SM to one block at a time.
constexpr int64_t kDefaultShared = 48 * 1024;
constexpr int64_t kMaxShared = 96 * 1024;

__device__ __forceinline__ float ExpOf(float x) { return expf(x); }
__device__ __forceinline__ double ExpOf(double x) { return exp(x); }
__device__ __forceinline__ float LogOf(float x) { return logf(x); }
__device__ __forceinline__ double LogOf(double x) { return log(x); }
__device__ __forceinline__ float TanhOf(float x) { return tanhf(x); }
__device__ __forceinline__ double TanhOf(double x) { return tanh(x); }

// std::min and std::max are host functions to nvcc.
__host__ __device__ __forceinline__ int64_t Min(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__host__ __device__ __forceinline__ int64_t Max(int64_t a, int64_t b) {
  return a > b ? a : b;
}

template <typename C>
__device__ __forceinline__ C NegInf() {
  return -static_cast<C>(INFINITY);
}

// A block's tile shape: bq query rows by bk key rows; shared rows of q and k
// are D + 1 long, of v and dout Dv + 1 (the padding).
struct Tiles {
  int bq = 0;
  int bk = 0;
  int64_t bytes = 0;
};

struct Dims {
  int d, dv, ld_qk, ld_v;
};

inline Dims DimsOf(const AttentionParams& p) {
  const int d = static_cast<int>(p.head_dim), dv = static_cast<int>(p.value_dim);
  return {d, dv, d + 1, dv + 1};
}

// Shared elements of each kernel for a tile shape.
inline int64_t ForwardElements(const Dims& m, int bq, int bk) {
  // q, the key tile and then the value tile in one buffer, the logits (then
  // probabilities), the output accumulator, and the row max, sum, rescale
  // and whether the row keeps a key.
  return int64_t{bq} * m.ld_qk + int64_t{bk} * std::max(m.ld_qk, m.ld_v) +
         int64_t{bq} * bk + int64_t{bq} * m.dv + 4 * bq;
}
inline int64_t DkDvElements(const Dims& m, int bq, int bk) {
  // k, v, dk, dv of the key tile; q, dout, lse, Delta of the query tile; the
  // probabilities and the logits' gradients.
  return int64_t{bk} * (m.ld_qk + m.ld_v + m.d + m.dv) +
         int64_t{bq} * (m.ld_qk + m.ld_v + 2) + 2 * int64_t{bq} * bk;
}
inline int64_t DqElements(const Dims& m, int bq, int bk) {
  // q, dout, dq, lse, Delta of the query tile; k, v of the key tile; the
  // logits' gradients.
  return int64_t{bq} * (m.ld_qk + m.ld_v + m.d + 2) +
         int64_t{bk} * (m.ld_qk + m.ld_v) + int64_t{bq} * bk;
}

// The largest tile shape whose shared memory fits the budget: large tiles
// read each key (query) tile for more query (key) rows; small head dims get
// 64 x 64, D = 256 in double gets a few rows.
template <typename Elements>
Tiles AttentionTiles(const Dims& m, size_t compute_bytes, int64_t budget,
                     Elements elements) {
  static constexpr int kShapes[][2] = {{64, 64}, {64, 32}, {32, 32}, {32, 16},
                                       {16, 16}, {16, 8},  {8, 8},   {8, 4},
                                       {4, 4},   {2, 2},   {1, 1}};
  for (const auto& s : kShapes) {
    const int64_t bytes =
        elements(m, s[0], s[1]) * static_cast<int64_t>(compute_bytes);
    if (bytes <= budget) return {s[0], s[1], bytes};
  }
  return {};
}

// The shared memory one block may have on this device (its opt-in limit,
// at most kMaxShared).
inline int64_t SharedBudget() {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                             device) != cudaSuccess) {
    cudaGetLastError();  // the default is still there to use
    optin = static_cast<int>(kDefaultShared);
  }
  return std::min<int64_t>(std::max<int64_t>(optin, kDefaultShared),
                           kMaxShared);
}

// Lets kernel take `bytes` of dynamic shared memory.
template <typename Kernel>
const char* AllowShared(Kernel* kernel, int64_t bytes) {
  if (bytes <= kDefaultShared) return nullptr;
  const cudaError_t err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(bytes));
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Keys [*begin, *end) that queries t_first..t_last may keep by position
// (causal, window): the tiles wholly outside are never visited.
__host__ __device__ inline void KeyRange(const AttentionParams& p,
                                         int64_t t_first, int64_t t_last,
                                         int64_t* begin, int64_t* end) {
  int64_t b = 0, e = p.kv_len;
  if (p.causal) e = Min(e, t_last + 1);
  if (p.window >= 0) {
    b = Max(b, t_first - p.window + 1);
    e = Min(e, t_last + p.window);
  }
  *begin = e > b ? b : 0;
  *end = e > b ? e : 0;
}

// Queries [*begin, *end) that may keep keys s_first..s_last by position.
__host__ __device__ inline void QueryRange(const AttentionParams& p,
                                           int64_t s_first, int64_t s_last,
                                           int64_t* begin, int64_t* end) {
  int64_t b = 0, e = p.q_len;
  if (p.causal) b = Max(b, s_first);
  if (p.window >= 0) {
    b = Max(b, s_first - p.window + 1);
    e = Min(e, s_last + p.window);
  }
  *begin = e > b ? b : 0;
  *end = e > b ? e : 0;
}

// Whether query t keeps key s (both in range).
__device__ __forceinline__ bool Kept(const AttentionParams& p, int64_t b,
                                     int64_t n, int64_t t, int64_t s) {
  if (!p.KeptByPosition(t, s)) return false;
  return p.mask.data == nullptr ||
         static_cast<const bool*>(p.mask.data)[p.BroadcastOffset(p.mask, b, n,
                                                                 t, s)];
}

// The logit before the soft cap: scale * <q_t, k_s> + bias. The rows are
// shared tiles in the compute type or global rows in the dtype (R).
template <typename T, typename R>
__device__ __forceinline__ ComputeType<T> RawLogit(const AttentionParams& p,
                                                   int64_t b, int64_t n,
                                                   int64_t t, int64_t s,
                                                   const R* q_row,
                                                   const R* k_row, int d) {
  using C = ComputeType<T>;
  C dot = C(0);
  for (int e = 0; e < d; ++e) dot += Load(q_row[e]) * Load(k_row[e]);
  C x = static_cast<C>(p.scale) * dot;
  if (p.bias.data != nullptr) {
    x += Load(static_cast<const T*>(
        p.bias.data)[p.BroadcastOffset(p.bias, b, n, t, s)]);
  }
  return x;
}

// The gradient of the loss with respect to the raw logit of a kept (t, s)
// of a live row, from the forward's lse and Delta_t = <dout_t, out_t>:
//   p = exp(logit - lse), dS = p * (<dout_t, v_s> - Delta_t), times the soft
// cap's derivative 1 - tanh^2. The dk/dv and dq kernels both call it, so
// they see the same probabilities, and so does the bias gradient's.
template <typename T, typename C, typename R>
__device__ __forceinline__ C LogitGrad(const AttentionParams& p, int64_t b,
                                       int64_t n, int64_t t, int64_t s,
                                       const R* q_row, const R* k_row,
                                       const R* dout_row, const R* v_row,
                                       const Dims& m, C lse, C delta,
                                       C* prob) {
  C x = RawLogit<T>(p, b, n, t, s, q_row, k_row, m.d);
  C dcap = C(1);
  if (p.softcap > 0.0f) {
    const C cap = static_cast<C>(p.softcap);
    const C th = TanhOf(x / cap);
    x = cap * th;
    dcap = C(1) - th * th;
  }
  const C pr = ExpOf(x - lse);
  C dp = C(0);
  for (int e = 0; e < m.dv; ++e) dp += Load(dout_row[e]) * Load(v_row[e]);
  *prob = pr;
  return pr * (dp - delta) * dcap;
}

// Rows [row0, row0 + rows) of a [.., heads, dim] tensor's head into a
// shared tile of `tile_rows` rows `ld` apart, zeros past `rows`.
template <typename T, typename C, typename Offset>
__device__ __forceinline__ void LoadTile(const T* src, Offset offset, int rows,
                                         int tile_rows, int dim, int ld,
                                         C* tile) {
  for (int idx = threadIdx.x; idx < tile_rows * dim; idx += kThreads) {
    const int i = idx / dim, e = idx - i * dim;
    tile[i * ld + e] = i < rows ? Load(src[offset(i) + e]) : C(0);
  }
}

// ---------------------------------------------------------------- forward

template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionForwardKernel(AttentionParams p, Dims m, int bq, int bk,
                           const T* q, const T* k, const T* v, T* out,
                           ComputeType<T>* lse) {
  using C = ComputeType<T>;
  TF_OPS_DYNAMIC_SHARED(unsigned char, smem);
  const int ld_kv = m.ld_qk > m.ld_v ? m.ld_qk : m.ld_v;
  C* s_q = reinterpret_cast<C*>(smem);
  C* s_kv = s_q + bq * m.ld_qk;
  C* s_p = s_kv + bk * ld_kv;
  C* s_o = s_p + bq * bk;
  C* s_max = s_o + bq * m.dv;
  C* s_sum = s_max + bq;
  C* s_rescale = s_sum + bq;
  C* s_kept = s_rescale + bq;  // 1 where the row keeps a key

  const int64_t q_tiles = (p.q_len + bq - 1) / bq;
  const int64_t qt = blockIdx.x % q_tiles;
  const int64_t n = blockIdx.x / q_tiles % p.heads;
  const int64_t b = blockIdx.x / q_tiles / p.heads;
  const int64_t kh = n / p.group();
  const int64_t t0 = qt * bq;
  const int rows = static_cast<int>(Min(bq, p.q_len - t0));
  const int tid = threadIdx.x;

  LoadTile(q, [&](int i) { return p.QOffset(b, t0 + i, n); }, rows, bq, m.d,
           m.ld_qk, s_q);
  for (int idx = tid; idx < bq * m.dv; idx += kThreads) s_o[idx] = C(0);
  for (int i = tid; i < bq; i += kThreads) {
    s_max[i] = NegInf<C>();
    s_sum[i] = C(0);
    s_kept[i] = C(0);
  }
  int64_t s_begin, s_end;
  KeyRange(p, t0, t0 + rows - 1, &s_begin, &s_end);
  for (int64_t s0 = s_begin - s_begin % bk; s0 < s_end; s0 += bk) {
    const int cols = static_cast<int>(Min(bk, p.kv_len - s0));
    LoadTile(k, [&](int j) { return p.KOffset(b, s0 + j, kh); }, cols, bk,
             m.d, ld_kv, s_kv);
    __syncthreads();
    // The tile's logits; -inf where a key is not kept.
    for (int idx = tid; idx < bq * bk; idx += kThreads) {
      const int i = idx / bk, j = idx - i * bk;
      C x = NegInf<C>();
      if (i < rows && j < cols && Kept(p, b, n, t0 + i, s0 + j)) {
        x = RawLogit<T>(p, b, n, t0 + i, s0 + j, s_q + i * m.ld_qk,
                        s_kv + j * ld_kv, m.d);
        if (p.softcap > 0.0f) {
          const C cap = static_cast<C>(p.softcap);
          x = cap * TanhOf(x / cap);
        }
      }
      s_p[idx] = x;
    }
    __syncthreads();
    // The online softmax, a thread per row: the new running max, the old
    // accumulator's rescale exp(old max - new max), the probabilities
    // relative to the new max. Meanwhile the others load the value tile
    // over the key tile.
    if (tid < bq) {
      C* row = s_p + tid * bk;
      // Whether the row keeps a key: a -inf is a key not kept, or a kept
      // one whose bias is -inf (that row is not dead: its weights are
      // NaN, as Keras's softmax of all -inf, and as the CPU engine's).
      bool kept = s_kept[tid] != C(0);
      for (int j = 0; j < cols && !kept && tid < rows; ++j) {
        kept = row[j] != NegInf<C>() || Kept(p, b, n, t0 + tid, s0 + j);
      }
      s_kept[tid] = kept ? C(1) : C(0);
      const C old_max = s_max[tid];
      C mx = old_max;
      for (int j = 0; j < cols; ++j) mx = row[j] > mx ? row[j] : mx;
      const C rescale = mx == NegInf<C>() ? C(1) : ExpOf(old_max - mx);
      C sum = C(0);
      for (int j = 0; j < bk; ++j) {
        const C pr = row[j] == NegInf<C>() ? C(0) : ExpOf(row[j] - mx);
        row[j] = pr;
        sum += pr;
      }
      s_sum[tid] = s_sum[tid] * rescale + sum;
      s_max[tid] = mx;
      s_rescale[tid] = rescale;
    }
    LoadTile(v, [&](int j) { return p.VOffset(b, s0 + j, kh); }, cols, bk,
             m.dv, ld_kv, s_kv);
    __syncthreads();
    for (int idx = tid; idx < bq * m.dv; idx += kThreads) {
      const int i = idx / m.dv, e = idx - i * m.dv;
      const C* pr = s_p + i * bk;
      C acc = s_o[idx] * s_rescale[i];
      for (int j = 0; j < cols; ++j) acc += pr[j] * s_kv[j * ld_kv + e];
      s_o[idx] = acc;
    }
    __syncthreads();
  }
  // Dead rows (no key kept) take the mean of all S values, Keras's uniform
  // weights; a second walk over every value tile, only in blocks that have
  // such a row.
  const bool dead_here = tid < rows && s_kept[tid] == C(0);
  if (__syncthreads_or(dead_here)) {
    for (int64_t s0 = 0; s0 < p.kv_len; s0 += bk) {
      const int cols = static_cast<int>(Min(bk, p.kv_len - s0));
      LoadTile(v, [&](int j) { return p.VOffset(b, s0 + j, kh); }, cols, bk,
               m.dv, ld_kv, s_kv);
      __syncthreads();
      for (int idx = tid; idx < bq * m.dv; idx += kThreads) {
        const int i = idx / m.dv, e = idx - i * m.dv;
        if (i >= rows || s_kept[i] != C(0)) continue;
        C acc = s0 == 0 ? C(0) : s_o[idx];
        for (int j = 0; j < cols; ++j) acc += s_kv[j * ld_kv + e];
        s_o[idx] = acc;
      }
      __syncthreads();
    }
  }
  for (int idx = tid; idx < rows * m.dv; idx += kThreads) {
    const int i = idx / m.dv, e = idx - i * m.dv;
    const bool dead = s_kept[i] == C(0);
    const C value = dead ? (p.kv_len > 0 ? s_o[idx] / static_cast<C>(p.kv_len)
                                         : C(0))
                         : s_o[idx] / s_sum[i];
    out[p.OutOffset(b, t0 + i, n) + e] = Store<T>(value);
  }
  if (tid < rows) {
    lse[p.LseOffset(b, n, t0 + tid)] =
        s_kept[tid] == C(0) ? NegInf<C>() : s_max[tid] + LogOf(s_sum[tid]);
  }
}

// --------------------------------------------------------------- backward

// Delta_t = <dout_t, out_t> for every row [B, N, T] (lse's order), and each
// head's dout summed over its dead rows, [B, N, Dv]: a dead row's gradient
// reaches every value of its head as dout_t / S, which the dk/dv kernel adds
// once per key instead of visiting every query tile.
template <typename T>
__global__ void AttentionBackwardPrepKernel(AttentionParams p, const T* out,
                                            const T* dout,
                                            const ComputeType<T>* lse,
                                            ComputeType<T>* delta,
                                            ComputeType<T>* dead_sum) {
  using C = ComputeType<T>;
  const int64_t rows = p.batch * p.heads * p.q_len;
  const int64_t total = rows + p.batch * p.heads * p.value_dim;
  for (int64_t r = GlobalThread(); r < total; r += GlobalThreads()) {
    if (r < rows) {
      const int64_t t = r % p.q_len, n = r / p.q_len % p.heads,
                    b = r / p.q_len / p.heads;
      const int64_t o = p.OutOffset(b, t, n);
      C acc = C(0);
      for (int64_t e = 0; e < p.value_dim; ++e) {
        acc += Load(dout[o + e]) * Load(out[o + e]);
      }
      delta[r] = acc;
    } else {
      const int64_t i = r - rows;
      const int64_t e = i % p.value_dim, n = i / p.value_dim % p.heads,
                    b = i / p.value_dim / p.heads;
      C acc = C(0);
      for (int64_t t = 0; t < p.q_len; ++t) {
        if (lse[p.LseOffset(b, n, t)] == NegInf<C>()) {
          acc += Load(dout[p.OutOffset(b, t, n) + e]);
        }
      }
      dead_sum[i] = acc;
    }
  }
}

// The bias's gradient, one thread per element of the bias: it walks the
// (b, n, t, s) the element is broadcast over in order and sums dS there
// (LogitGrad, the rows read from global memory), so every element
// has one owner and one order. A plain pass, not tiled: it runs only where
// the bias needs a gradient.
template <typename T>
__global__ void AttentionBiasGradKernel(AttentionParams p, int64_t elements,
                                        const T* q, const T* k, const T* v,
                                        const T* out, const T* dout,
                                        const ComputeType<T>* lse, T* dbias) {
  using C = ComputeType<T>;
  const int64_t full[4] = {p.batch, p.heads, p.q_len, p.kv_len};
  const bool has_bias = p.bias.data != nullptr;
  const Dims m{static_cast<int>(p.head_dim), static_cast<int>(p.value_dim), 0,
               0};
  for (int64_t i = GlobalThread(); i < elements; i += GlobalThreads()) {
    int64_t lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      const int64_t stride = p.bias.strides[j];
      lo[j] = stride != 0 ? i / stride % full[j] : 0;
      hi[j] = stride != 0 ? lo[j] + 1 : full[j];
    }
    C sum = C(0);
    for (int64_t b = lo[0]; has_bias && b < hi[0]; ++b) {
      for (int64_t n = lo[1]; n < hi[1]; ++n) {
        const int64_t kh = n / p.group();
        for (int64_t t = lo[2]; t < hi[2]; ++t) {
          const C l = lse[p.LseOffset(b, n, t)];
          if (l == NegInf<C>()) continue;  // a dead row: P = 0
          const int64_t o = p.OutOffset(b, t, n);
          C delta = C(0);
          for (int64_t e = 0; e < p.value_dim; ++e) {
            delta += Load(dout[o + e]) * Load(out[o + e]);
          }
          for (int64_t s = lo[3]; s < hi[3]; ++s) {
            if (!Kept(p, b, n, t, s)) continue;
            C prob;
            sum += LogitGrad<T>(p, b, n, t, s, q + p.QOffset(b, t, n),
                                k + p.KOffset(b, s, kh), dout + o,
                                v + p.VOffset(b, s, kh), m, l, delta, &prob);
          }
        }
      }
    }
    dbias[i] = Store<T>(sum);
  }
}

// dk and dv of one key tile of one key/value head. Each block owns its keys'
// gradients outright and walks the query tiles of the group's query heads in
// a fixed order, recomputing the probabilities; the dq kernel recomputes them
// once more. That recompute is the price of determinism: one pass that
// produced dq too would need atomics (or a reduction of per-key-tile partial
// dq) to add the key tiles' shares of each dq row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionDkDvKernel(AttentionParams p, Dims m, int bq, int bk, const T* q,
                        const T* k, const T* v, const T* dout,
                        const ComputeType<T>* lse,
                        const ComputeType<T>* delta,
                        const ComputeType<T>* dead_sum, T* dk, T* dv) {
  using C = ComputeType<T>;
  TF_OPS_DYNAMIC_SHARED(unsigned char, smem);
  C* s_k = reinterpret_cast<C*>(smem);
  C* s_v = s_k + bk * m.ld_qk;
  C* s_dk = s_v + bk * m.ld_v;
  C* s_dv = s_dk + bk * m.d;
  C* s_q = s_dv + bk * m.dv;
  C* s_do = s_q + bq * m.ld_qk;
  C* s_lse = s_do + bq * m.ld_v;
  C* s_delta = s_lse + bq;
  C* s_p = s_delta + bq;
  C* s_ds = s_p + bq * bk;

  const int64_t k_tiles = (p.kv_len + bk - 1) / bk;
  const int64_t kt = blockIdx.x % k_tiles;
  const int64_t kh = blockIdx.x / k_tiles % p.kv_heads;
  const int64_t b = blockIdx.x / k_tiles / p.kv_heads;
  const int64_t group = p.group();
  const int64_t s0 = kt * bk;
  const int cols = static_cast<int>(Min(bk, p.kv_len - s0));
  const int tid = threadIdx.x;

  LoadTile(k, [&](int j) { return p.KOffset(b, s0 + j, kh); }, cols, bk, m.d,
           m.ld_qk, s_k);
  LoadTile(v, [&](int j) { return p.VOffset(b, s0 + j, kh); }, cols, bk,
           m.dv, m.ld_v, s_v);
  for (int idx = tid; idx < bk * m.d; idx += kThreads) s_dk[idx] = C(0);
  for (int idx = tid; idx < bk * m.dv; idx += kThreads) s_dv[idx] = C(0);
  int64_t t_begin, t_end;
  QueryRange(p, s0, s0 + cols - 1, &t_begin, &t_end);
  for (int64_t n = kh * group; n < (kh + 1) * group; ++n) {
    for (int64_t t0 = t_begin - t_begin % bq; t0 < t_end; t0 += bq) {
      const int rows = static_cast<int>(Min(bq, p.q_len - t0));
      LoadTile(q, [&](int i) { return p.QOffset(b, t0 + i, n); }, rows, bq,
               m.d, m.ld_qk, s_q);
      LoadTile(dout, [&](int i) { return p.OutOffset(b, t0 + i, n); }, rows,
               bq, m.dv, m.ld_v, s_do);
      for (int i = tid; i < bq; i += kThreads) {
        s_lse[i] = i < rows ? lse[p.LseOffset(b, n, t0 + i)] : NegInf<C>();
        s_delta[i] = i < rows ? delta[p.LseOffset(b, n, t0 + i)] : C(0);
      }
      __syncthreads();
      for (int idx = tid; idx < bq * bk; idx += kThreads) {
        const int i = idx / bk, j = idx - i * bk;
        C pr = C(0), ds = C(0);
        // A dead row (lse -inf) reaches only value, through dead_sum.
        if (i < rows && j < cols && s_lse[i] != NegInf<C>() &&
            Kept(p, b, n, t0 + i, s0 + j)) {
          ds = LogitGrad<T>(p, b, n, t0 + i, s0 + j, s_q + i * m.ld_qk,
                            s_k + j * m.ld_qk, s_do + i * m.ld_v,
                            s_v + j * m.ld_v, m, s_lse[i], s_delta[i], &pr);
        }
        s_p[idx] = pr;
        s_ds[idx] = ds;
      }
      __syncthreads();
      for (int idx = tid; idx < bk * m.dv; idx += kThreads) {
        const int j = idx / m.dv, e = idx - j * m.dv;
        C acc = s_dv[idx];
        for (int i = 0; i < rows; ++i) acc += s_p[i * bk + j] * s_do[i * m.ld_v + e];
        s_dv[idx] = acc;
      }
      for (int idx = tid; idx < bk * m.d; idx += kThreads) {
        const int j = idx / m.d, e = idx - j * m.d;
        C acc = s_dk[idx];
        for (int i = 0; i < rows; ++i) acc += s_ds[i * bk + j] * s_q[i * m.ld_qk + e];
        s_dk[idx] = acc;
      }
      __syncthreads();
    }
  }
  // Each thread writes the accumulator entries it summed (same idx).
  const C scale = static_cast<C>(p.scale);
  for (int idx = tid; idx < cols * m.d; idx += kThreads) {
    const int j = idx / m.d, e = idx - j * m.d;
    dk[p.KOffset(b, s0 + j, kh) + e] = Store<T>(scale * s_dk[idx]);
  }
  const C inv_len = C(1) / static_cast<C>(p.kv_len);
  for (int idx = tid; idx < cols * m.dv; idx += kThreads) {
    const int j = idx / m.dv, e = idx - j * m.dv;
    C acc = s_dv[idx];
    for (int64_t n = kh * group; n < (kh + 1) * group; ++n) {
      acc += dead_sum[(b * p.heads + n) * m.dv + e] * inv_len;
    }
    dv[p.VOffset(b, s0 + j, kh) + e] = Store<T>(acc);
  }
}

// dq of one query tile of one head: walks the key tiles it may keep.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    AttentionDqKernel(AttentionParams p, Dims m, int bq, int bk, const T* q,
                      const T* k, const T* v, const T* dout,
                      const ComputeType<T>* lse, const ComputeType<T>* delta,
                      T* dq) {
  using C = ComputeType<T>;
  TF_OPS_DYNAMIC_SHARED(unsigned char, smem);
  C* s_q = reinterpret_cast<C*>(smem);
  C* s_do = s_q + bq * m.ld_qk;
  C* s_dq = s_do + bq * m.ld_v;
  C* s_lse = s_dq + bq * m.d;
  C* s_delta = s_lse + bq;
  C* s_k = s_delta + bq;
  C* s_v = s_k + bk * m.ld_qk;
  C* s_ds = s_v + bk * m.ld_v;

  const int64_t q_tiles = (p.q_len + bq - 1) / bq;
  const int64_t qt = blockIdx.x % q_tiles;
  const int64_t n = blockIdx.x / q_tiles % p.heads;
  const int64_t b = blockIdx.x / q_tiles / p.heads;
  const int64_t kh = n / p.group();
  const int64_t t0 = qt * bq;
  const int rows = static_cast<int>(Min(bq, p.q_len - t0));
  const int tid = threadIdx.x;

  LoadTile(q, [&](int i) { return p.QOffset(b, t0 + i, n); }, rows, bq, m.d,
           m.ld_qk, s_q);
  LoadTile(dout, [&](int i) { return p.OutOffset(b, t0 + i, n); }, rows, bq,
           m.dv, m.ld_v, s_do);
  for (int idx = tid; idx < bq * m.d; idx += kThreads) s_dq[idx] = C(0);
  for (int i = tid; i < bq; i += kThreads) {
    s_lse[i] = i < rows ? lse[p.LseOffset(b, n, t0 + i)] : NegInf<C>();
    s_delta[i] = i < rows ? delta[p.LseOffset(b, n, t0 + i)] : C(0);
  }
  int64_t s_begin, s_end;
  KeyRange(p, t0, t0 + rows - 1, &s_begin, &s_end);
  for (int64_t s0 = s_begin - s_begin % bk; s0 < s_end; s0 += bk) {
    const int cols = static_cast<int>(Min(bk, p.kv_len - s0));
    LoadTile(k, [&](int j) { return p.KOffset(b, s0 + j, kh); }, cols, bk,
             m.d, m.ld_qk, s_k);
    LoadTile(v, [&](int j) { return p.VOffset(b, s0 + j, kh); }, cols, bk,
             m.dv, m.ld_v, s_v);
    __syncthreads();
    for (int idx = tid; idx < bq * bk; idx += kThreads) {
      const int i = idx / bk, j = idx - i * bk;
      C pr = C(0), ds = C(0);
      if (i < rows && j < cols && s_lse[i] != NegInf<C>() &&
          Kept(p, b, n, t0 + i, s0 + j)) {
        ds = LogitGrad<T>(p, b, n, t0 + i, s0 + j, s_q + i * m.ld_qk,
                          s_k + j * m.ld_qk, s_do + i * m.ld_v,
                          s_v + j * m.ld_v, m, s_lse[i], s_delta[i], &pr);
      }
      s_ds[idx] = ds;
    }
    __syncthreads();
    for (int idx = tid; idx < bq * m.d; idx += kThreads) {
      const int i = idx / m.d, e = idx - i * m.d;
      C acc = s_dq[idx];
      for (int j = 0; j < cols; ++j) acc += s_ds[i * bk + j] * s_k[j * m.ld_qk + e];
      s_dq[idx] = acc;
    }
    __syncthreads();
  }
  const C scale = static_cast<C>(p.scale);
  for (int idx = tid; idx < rows * m.d; idx += kThreads) {
    const int i = idx / m.d, e = idx - i * m.d;
    dq[p.QOffset(b, t0 + i, n) + e] = Store<T>(scale * s_dq[idx]);
  }
}

const char* CheckDims(const AttentionParams& p) {
  if (p.head_dim > kGpuMaxHeadDim || p.value_dim > kGpuMaxHeadDim) {
    return "tf_ops: the GPU attention takes head dims up to 256";
  }
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0) {
    return "tf_ops: the GPU attention needs kv_heads >= 1 dividing heads";
  }
  return nullptr;
}

// Blocks of a grid over tiles x heads x batch, or 0 past CUDA's limit.
inline unsigned GridBlocks(int64_t len, int tile, int64_t heads,
                           int64_t batch) {
  const int64_t blocks = (len + tile - 1) / tile * heads * batch;
  return blocks > 0x7fffffff ? 0u : static_cast<unsigned>(blocks);
}

constexpr const char* kTooLarge =
    "tf_ops: the GPU attention has more tiles than one grid takes";

// The backward's scratch: Delta, then the dead rows' sums, each 256-byte
// aligned.
inline int64_t AlignUp(int64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

const char* LaunchAttentionForward(Dtype dtype, const AttentionParams& p,
                                   const void* q, const void* k, const void* v,
                                   void* out, void* lse, void* stream) {
  if (p.batch * p.heads * p.q_len == 0 || p.value_dim == 0) return nullptr;
  if (const char* err = CheckDims(p)) return err;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t budget = SharedBudget();
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    const Dims m = DimsOf(p);
    const Tiles tiles = AttentionTiles(m, sizeof(C), budget, ForwardElements);
    const unsigned blocks = GridBlocks(p.q_len, tiles.bq, p.heads, p.batch);
    if (blocks == 0) return kTooLarge;
    if (const char* err = AllowShared(AttentionForwardKernel<T>, tiles.bytes)) {
      return err;
    }
    TF_OPS_LAUNCH(blocks, kThreads, tiles.bytes, s,
                  AttentionForwardKernel<T>)(
        p, m, tiles.bq, tiles.bk, static_cast<const T*>(q),
        static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<T*>(out), static_cast<C*>(lse));
    return LastError();
  });
}

int64_t AttentionGpuBackwardScratchBytes(Dtype dtype,
                                         const AttentionParams& p) {
  const int64_t c = dtype == Dtype::kDouble ? 8 : 4;
  return AlignUp(p.batch * p.heads * p.q_len * c) +
         AlignUp(p.batch * p.heads * p.value_dim * c);
}

const char* LaunchAttentionBackward(Dtype dtype, const AttentionParams& p,
                                    const void* q, const void* k,
                                    const void* v, const void* out,
                                    const void* dout, const void* lse,
                                    void* dq, void* dk, void* dv,
                                    void* scratch, void* stream) {
  if (p.batch * p.heads == 0) return nullptr;
  if (const char* err = CheckDims(p)) return err;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t budget = SharedBudget();
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    const Dims m = DimsOf(p);
    C* delta = static_cast<C*>(scratch);
    C* dead_sum = reinterpret_cast<C*>(
        static_cast<char*>(scratch) +
        AlignUp(p.batch * p.heads * p.q_len * static_cast<int64_t>(sizeof(C))));
    const T* tq = static_cast<const T*>(q);
    const T* tk = static_cast<const T*>(k);
    const T* tv = static_cast<const T*>(v);
    const T* tdout = static_cast<const T*>(dout);
    const C* tlse = static_cast<const C*>(lse);
    const int64_t prep = p.batch * p.heads * (p.q_len + p.value_dim);
    if (prep > 0) {
      TF_OPS_LAUNCH(BlocksFor(prep), kThreadsPerBlock, 0, s,
                    AttentionBackwardPrepKernel<T>)(
          p, static_cast<const T*>(out), tdout, tlse, delta, dead_sum);
      if (const char* err = LastError()) return err;
    }
    if (p.kv_len > 0) {
      const Tiles tiles = AttentionTiles(m, sizeof(C), budget, DkDvElements);
      const unsigned blocks =
          GridBlocks(p.kv_len, tiles.bk, p.kv_heads, p.batch);
      if (blocks == 0) return kTooLarge;
      if (const char* err = AllowShared(AttentionDkDvKernel<T>, tiles.bytes)) {
        return err;
      }
      TF_OPS_LAUNCH(blocks, kThreads, tiles.bytes, s, AttentionDkDvKernel<T>)(
          p, m, tiles.bq, tiles.bk, tq, tk, tv, tdout, tlse, delta, dead_sum,
          static_cast<T*>(dk), static_cast<T*>(dv));
      if (const char* err = LastError()) return err;
    }
    if (p.q_len > 0) {
      const Tiles tiles = AttentionTiles(m, sizeof(C), budget, DqElements);
      const unsigned blocks = GridBlocks(p.q_len, tiles.bq, p.heads, p.batch);
      if (blocks == 0) return kTooLarge;
      if (const char* err = AllowShared(AttentionDqKernel<T>, tiles.bytes)) {
        return err;
      }
      TF_OPS_LAUNCH(blocks, kThreads, tiles.bytes, s, AttentionDqKernel<T>)(
          p, m, tiles.bq, tiles.bk, tq, tk, tv, tdout, tlse, delta,
          static_cast<T*>(dq));
      if (const char* err = LastError()) return err;
    }
    return nullptr;
  });
}

const char* LaunchAttentionBiasGrad(Dtype dtype, const AttentionParams& p,
                                    const void* q, const void* k,
                                    const void* v, const void* out,
                                    const void* dout, const void* lse,
                                    void* dbias, int64_t bias_elements,
                                    void* stream) {
  if (bias_elements == 0) return nullptr;
  if (const char* err = CheckDims(p)) return err;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  return DispatchDtype(dtype, [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    using C = ComputeType<T>;
    TF_OPS_LAUNCH(BlocksFor(bias_elements), kThreadsPerBlock, 0, s,
                  AttentionBiasGradKernel<T>)(
        p, bias_elements, static_cast<const T*>(q), static_cast<const T*>(k),
        static_cast<const T*>(v), static_cast<const T*>(out),
        static_cast<const T*>(dout), static_cast<const C*>(lse),
        static_cast<T*>(dbias));
    return LastError();
  });
}

}  // namespace attention
}  // namespace tf_ops
