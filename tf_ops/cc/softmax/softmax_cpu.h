// The CPU engine of the softmax family (softmax_math.h): softmax, log-softmax
// and the scaled masked softmax over the last axis, their gradients, and the
// sparse softmax cross-entropy (loss and dlogits in one pass). TF-free: the
// kernels (softmax_kernels.cc) split rows over TensorFlow's thread pool and
// call these per shard; the engine test (tests/engine/) calls them directly.
//
// Buffers are untyped with their Dtype, rows of `cols` contiguous elements.
// Row statistics accumulate in float for half, bfloat16 and float, double for
// double, in 16 lanes combined in a fixed order: a row's result does not
// depend on how rows are spread over threads.

#ifndef TF_OPS_CC_SOFTMAX_SOFTMAX_CPU_H_
#define TF_OPS_CC_SOFTMAX_SOFTMAX_CPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/softmax/softmax_math.h"

namespace tf_ops {

// Where a row's mask lies. The logits are [d_0, ..., d_{rank-1}, cols]; the
// mask is broadcast to them: strides[i] is the mask's stride along leading
// axis i (0 where the mask has size 1 there), col_stride along the last (0
// or 1). causal keeps column k of a row only if k <= q, q the row's index
// along the last leading axis (the queries, d_{rank-1}). No mask and not
// causal: every position is kept.
struct MaskLayout {
  static constexpr int kMaxRank = 8;
  const bool* mask = nullptr;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int64_t col_stride = 0;
  bool causal = false;
};

// Offset of row r's first mask element.
TF_OPS_HOST_DEVICE int64_t MaskRowOffset(const MaskLayout& m, int64_t r) {
  int64_t offset = 0;
  for (int i = m.rank - 1; i >= 0; --i) {
    const int64_t d = m.dims[i];
    offset += (r % d) * m.strides[i];
    r /= d;
  }
  return offset;
}

// Row r's query index for the causal mask (its index along d_{rank-1}).
TF_OPS_HOST_DEVICE int64_t CausalQuery(const MaskLayout& m, int64_t r) {
  return m.rank == 0 ? 0 : r % m.dims[m.rank - 1];
}

// y = softmax(x) (log_softmax when log) for rows [begin, end). y may be x.
void CpuSoftmax(Dtype dtype, const void* x, void* y, int64_t cols, bool log,
                int64_t begin, int64_t end);

// dx = y (g - sum g y) * scale, or (log) g - e^y sum g, for rows
// [begin, end); y is the forward's output. dx may be g or y.
void CpuSoftmaxGrad(Dtype dtype, const void* g, const void* y, void* dx,
                    int64_t cols, bool log, float scale, int64_t begin,
                    int64_t end);

// y = softmax(scale * x) over the kept positions of each row, 0 at the
// masked ones; a row with no kept finite-or-+inf logit and some masked
// position is all zeros (Keras's Softmax with a mask). y may be x.
void CpuMaskedSoftmax(Dtype dtype, const void* x, const MaskLayout& mask,
                      float scale, void* y, int64_t cols, int64_t begin,
                      int64_t end);

// Sparse softmax cross-entropy for rows [begin, end): loss[r] and
// dlogits[r, :] (softmax_math.h). labels are int32 or int64 (labels64). A
// row whose label is ignore_index gets 0 and 0; one whose label is outside
// [0, cols) (callers check first) gets NaN and NaN, never a read out of the
// row.
void CpuSparseCrossEntropy(Dtype dtype, const void* logits, const void* labels,
                           bool labels64, void* loss, void* dlogits,
                           int64_t cols,
                           const softmax::CrossEntropyParams& params,
                           int64_t begin, int64_t end);

// The first row in [0, rows) whose label is neither in [0, cols) nor
// ignore_index, or -1. Inline: the GPU kernels check host labels with it.
inline int64_t FirstBadLabel(const void* labels, bool labels64, int64_t rows,
                             int64_t cols, int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = labels64 ? static_cast<const int64_t*>(labels)[r]
                               : static_cast<const int32_t*>(labels)[r];
    if (t != ignore_index && (t < 0 || t >= cols)) return r;
  }
  return -1;
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_SOFTMAX_SOFTMAX_CPU_H_
