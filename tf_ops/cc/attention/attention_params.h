// What one attention call computes, stated once for every engine: the CPU
// engine (attention_cpu.h), the CUDA engine (cu/attention/attention_gpu.h),
// the TF kernels and the XLA custom-call handlers all take this struct.
// TF-free, and compilable by nvcc (TF_OPS_HOST_DEVICE).
//
// Layout (Keras's): query [B, T, N, D], key [B, S, K, D], value [B, S, K, Dv],
// output [B, T, N, Dv], all contiguous; N query heads share K key/value heads
// in groups of N / K (query head n reads key/value head n / (N / K)): grouped
// and multi-query attention without repeating K and V. The log-sum-exp the
// backward needs is lse [B, N, T] in the compute type (float; double for
// double).
//
// Row t of head n, against key s:
//   logit(t, s) = scale * <q_t, k_s> + bias(b, n, t, s)
//   logit       = softcap * tanh(logit / softcap)        where softcap > 0
//   kept(t, s)  = mask(b, n, t, s) and (not causal or s <= t)
//                 and (window < 0 or |t - s| < window)
//   p(t, s)     = softmax over the kept s of logit(t, s)
//   out_t       = sum_s p(t, s) v_s
// causal is Keras's alignment (tf.linalg.band_part(ones(T, S), -1, 0): key s
// is seen by query t when s <= t, whatever T and S are). A row that keeps no
// key is Keras's too: Keras sets every logit of it to one large negative
// number, so its weights are uniform over all S keys and out_t is the mean of
// the values; its gradient reaches only value (dv_s += dout_t / S). Such a
// row's lse is -inf (kDeadRow), which is how the backward knows it.

#ifndef TF_OPS_CC_ATTENTION_ATTENTION_PARAMS_H_
#define TF_OPS_CC_ATTENTION_ATTENTION_PARAMS_H_

#include <cstdint>

#ifndef TF_OPS_HOST_DEVICE
#if defined(__CUDACC__)
#define TF_OPS_HOST_DEVICE __host__ __device__ inline
#else
#define TF_OPS_HOST_DEVICE inline
#endif
#endif

namespace tf_ops {
namespace attention {

// A broadcast operand of [B, N, T, S] (the boolean mask, the additive bias):
// strides in elements along b, n, t, s, 0 where the operand has size 1.
struct Broadcast4 {
  const void* data = nullptr;  // null: absent
  int64_t strides[4] = {0, 0, 0, 0};
};

struct AttentionParams {
  int64_t batch = 0;      // B
  int64_t q_len = 0;      // T
  int64_t kv_len = 0;     // S
  int64_t heads = 0;      // N, query heads
  int64_t kv_heads = 0;   // K, divides N
  int64_t head_dim = 0;   // D, query and key
  int64_t value_dim = 0;  // Dv
  float scale = 1.0f;
  float softcap = 0.0f;   // <= 0: none
  bool causal = false;
  int64_t window = -1;    // < 0: none
  Broadcast4 mask;        // bool
  Broadcast4 bias;        // the inputs' dtype

  TF_OPS_HOST_DEVICE int64_t group() const { return heads / kv_heads; }
  // Element offsets of row t (or s) of head n in each tensor.
  TF_OPS_HOST_DEVICE int64_t QOffset(int64_t b, int64_t t, int64_t n) const {
    return ((b * q_len + t) * heads + n) * head_dim;
  }
  TF_OPS_HOST_DEVICE int64_t KOffset(int64_t b, int64_t s, int64_t k) const {
    return ((b * kv_len + s) * kv_heads + k) * head_dim;
  }
  TF_OPS_HOST_DEVICE int64_t VOffset(int64_t b, int64_t s, int64_t k) const {
    return ((b * kv_len + s) * kv_heads + k) * value_dim;
  }
  TF_OPS_HOST_DEVICE int64_t OutOffset(int64_t b, int64_t t, int64_t n) const {
    return ((b * q_len + t) * heads + n) * value_dim;
  }
  TF_OPS_HOST_DEVICE int64_t LseOffset(int64_t b, int64_t n, int64_t t) const {
    return (b * heads + n) * q_len + t;
  }
  TF_OPS_HOST_DEVICE int64_t BroadcastOffset(const Broadcast4& o, int64_t b,
                                             int64_t n, int64_t t,
                                             int64_t s) const {
    return b * o.strides[0] + n * o.strides[1] + t * o.strides[2] +
           s * o.strides[3];
  }
  // Whether (t, s) is kept by causal and window alone (the mask aside).
  TF_OPS_HOST_DEVICE bool KeptByPosition(int64_t t, int64_t s) const {
    if (causal && s > t) return false;
    if (window >= 0) {
      const int64_t d = t > s ? t - s : s - t;
      if (d >= window) return false;
    }
    return true;
  }
};

}  // namespace attention
}  // namespace tf_ops

#endif  // TF_OPS_CC_ATTENTION_ATTENTION_PARAMS_H_
