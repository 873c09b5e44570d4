// The CUDA engine of the attention family (attention_params.h says what it
// computes), callable from code that knows nothing of CUDA: device buffers,
// the stream a cudaStream_t as void*, nullptr on success or CUDA's error
// message. Same conventions as the CPU engine (attention_cpu.h): query, key,
// value, bias, output and gradients in the dtype, lse in float (double for
// double), the math in float (double for double), one rounding per result.
//
// FlashAttention-2's form, nothing of size T x S stored:
//   forward   one block per (query tile, head, batch): the query tile stays
//             in shared memory while key/value tiles stream past it, with the
//             online softmax (running max and sum per row); tiles wholly
//             above the causal diagonal or outside the window are skipped.
//   backward  Delta_t = <dout_t, out_t> and the dead rows' dout summed per
//             head (a first pass), then one kernel for dk and dv (a block
//             owns a key tile of a key/value head and walks the query tiles
//             of every query head of its group in a fixed order) and one for
//             dq (a block owns a query tile and walks the key tiles). Each
//             output has one owner, so there are no atomics and the results
//             are the same bits on every run.
// Tiles are sized from the head dims and the compute type to fit shared
// memory (attention_gpu.cu, AttentionTiles); head dims up to 256.

#ifndef TF_OPS_CU_ATTENTION_ATTENTION_GPU_H_
#define TF_OPS_CU_ATTENTION_ATTENTION_GPU_H_

#include <cstdint>

#include "tf_ops/cc/attention/attention_params.h"  // TF-free
#include "tf_ops/cc/core/dtype.h"

namespace tf_ops {
namespace attention {

// The largest D and Dv the GPU kernels take.
constexpr int64_t kGpuMaxHeadDim = 256;

// out [B, T, N, Dv] and lse [B, N, T].
const char* LaunchAttentionForward(Dtype dtype, const AttentionParams& p,
                                   const void* q, const void* k, const void* v,
                                   void* out, void* lse, void* stream);

// Bytes of scratch the backward needs: Delta [B, N, T] and the dead rows'
// summed dout [B, N, Dv], in the compute type.
int64_t AttentionGpuBackwardScratchBytes(Dtype dtype, const AttentionParams& p);

// dq, dk, dv from dout and the forward's out and lse; scratch holds
// AttentionGpuBackwardScratchBytes bytes, aligned to 8 bytes at least.
const char* LaunchAttentionBackward(Dtype dtype, const AttentionParams& p,
                                    const void* q, const void* k,
                                    const void* v, const void* out,
                                    const void* dout, const void* lse,
                                    void* dq, void* dk, void* dv,
                                    void* scratch, void* stream);

// The bias's gradient (bias_elements of them, the bias's shape; 0 for the
// scalar "none" bias): dS summed over the dims the bias is broadcast along,
// one thread per element in a fixed order, no scratch.
const char* LaunchAttentionBiasGrad(Dtype dtype, const AttentionParams& p,
                                    const void* q, const void* k,
                                    const void* v, const void* out,
                                    const void* dout, const void* lse,
                                    void* dbias, int64_t bias_elements,
                                    void* stream);

}  // namespace attention
}  // namespace tf_ops

#endif  // TF_OPS_CU_ATTENTION_ATTENTION_GPU_H_
