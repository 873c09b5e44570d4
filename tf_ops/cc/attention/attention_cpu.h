// The CPU engine of the attention family (attention_params.h says what it
// computes): flash attention's tiles, the online softmax over key blocks and
// the log-sum-exp kept, so nothing of size T x S is ever stored; the backward
// recomputes the probabilities from the log-sum-exp. TF-free: the TF kernels
// (attention_kernels.cc), the XLA custom-call handlers (attention_xla.cc) and
// the engine test (tests/engine/) call it, each with its own thread pool.
//
// Buffers are untyped with their Dtype (query, key, value, bias, output and
// the gradients in that dtype; lse in float, double for double); the math
// runs in float (double for double). The results do not depend on how work
// units are spread over threads: each unit writes its own rows, and the
// backward's reductions over query heads run in a fixed order.

#ifndef TF_OPS_CC_ATTENTION_ATTENTION_CPU_H_
#define TF_OPS_CC_ATTENTION_ATTENTION_CPU_H_

#include <cstdint>

#include "tf_ops/cc/attention/attention_params.h"
#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/core/parallel_for.h"

namespace tf_ops {
namespace attention {

// The whole forward: output [B, T, N, Dv] and lse [B, N, T].
void CpuAttentionForward(Dtype dtype, const AttentionParams& p, const void* q,
                         const void* k, const void* v, void* out, void* lse,
                         const ParallelFor& parallel_for);

// Scratch the backward needs, in bytes: per-query-head partial dk and dv in
// the compute type where heads are grouped (reduced over each group in a
// fixed order), and, for a bias gradient of bias_elements in half or
// bfloat16, its float sums (float and double sum in dbias itself):
// O(B N S (D + Dv)) + the bias's size.
int64_t CpuAttentionBackwardScratchBytes(Dtype dtype, const AttentionParams& p,
                                         int64_t bias_elements = 0);

// The whole backward: dq, dk, dv from dout and the forward's out and lse,
// and, where dbias is not null, the bias's gradient (bias_elements of them,
// the bias's shape; 0 for the scalar "none" bias): dS summed over the axes
// the bias is broadcast along, each element by one thread in a fixed order.
// Where the bias has enough batch and head indices of its own, its sums are
// taken inside the backward's tiles (the split by the bias: a unit walks the
// heads the bias is broadcast over); otherwise (one bias for most heads) in
// a pass of their own after it, which recomputes P and dP. scratch holds
// CpuAttentionBackwardScratchBytes bytes, 64-byte aligned.
void CpuAttentionBackward(Dtype dtype, const AttentionParams& p, const void* q,
                          const void* k, const void* v, const void* out,
                          const void* dout, const void* lse, void* dq,
                          void* dk, void* dv, void* dbias,
                          int64_t bias_elements, void* scratch,
                          const ParallelFor& parallel_for);

}  // namespace attention
}  // namespace tf_ops

#endif  // TF_OPS_CC_ATTENTION_ATTENTION_CPU_H_
