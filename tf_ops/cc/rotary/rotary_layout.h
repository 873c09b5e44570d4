// Where the pairs and positions of a rotary embedding are in memory, for
// any axis layout: x (row-major, any rank >= 2) is seen as [outer, D, inner]
// around its feature axis (D elements, pairs (j, j + D/2)); every other
// element index q = o * inner + i (x without its feature axis, row-major)
// has a sequence index s and, for per-batch positions, a batch index b (the
// batch axis is the first axis that is neither the sequence nor the feature
// axis, as keras-hub's layer takes it). The position of q is start + s for a
// scalar `positions` (keras-hub's start_index), else a table [B', S'] read
// with strides (0 where B' or S' is 1: broadcast, as keras-hub broadcasts).
//
// TF-free, shared by both engines, the kernels and the self-test; the shape
// checks that must come first are rotary_checks.h's.

#ifndef TF_OPS_CC_ROTARY_ROTARY_LAYOUT_H_
#define TF_OPS_CC_ROTARY_ROTARY_LAYOUT_H_

#include <cstdint>

#include "tf_ops/cc/core/math_primitives.h"  // TF_OPS_HOST_DEVICE

namespace tf_ops {
namespace rotary {

struct RotaryLayout {
  int64_t outer = 0;     // product of x's dims before the feature axis
  int64_t features = 0;  // D, even
  int64_t inner = 1;     // product of x's dims after the feature axis
  // s = (q / seq_div) % seq_len; b = (q / batch_div) % batch_len.
  int64_t seq_len = 1;
  int64_t seq_div = 1;
  int64_t batch_len = 1;
  int64_t batch_div = 1;
  // positions: a scalar start, or a table read at b * pos_batch_stride + s *
  // pos_seq_stride.
  bool start_only = true;
  int64_t pos_seq_stride = 0;
  int64_t pos_batch_stride = 0;

  TF_OPS_HOST_DEVICE int64_t half() const { return features / 2; }
  // How many positions x holds: its elements without the feature axis.
  TF_OPS_HOST_DEVICE int64_t points() const { return outer * inner; }
  // The index of q's position: its sequence index for a scalar start, else
  // its entry in the table.
  TF_OPS_HOST_DEVICE int64_t PositionIndex(int64_t q) const {
    const int64_t s = (q / seq_div) % seq_len;
    if (start_only) return s;
    return ((q / batch_div) % batch_len) * pos_batch_stride +
           s * pos_seq_stride;
  }
};

// The position at `index` (PositionIndex), in the compute type C, as
// keras-hub computes it: start + s rounded once, or the table's entry.
template <typename C>
TF_OPS_HOST_DEVICE C PositionAt(const RotaryLayout& l, const C* positions,
                                int64_t index) {
  return l.start_only ? positions[0] + static_cast<C>(index)
                      : positions[index];
}

// The layout of x (`rank` dims) with these (non-negative, distinct) axes and
// positions of `positions_rank` (0, 1 or 2) dims; inputs already checked.
inline RotaryLayout MakeRotaryLayout(const int64_t* dims, int rank,
                                     int sequence_axis, int feature_axis,
                                     int positions_rank,
                                     const int64_t* positions_dims) {
  RotaryLayout l;
  l.outer = 1;
  for (int a = 0; a < feature_axis; ++a) l.outer *= dims[a];
  l.features = dims[feature_axis];
  for (int a = feature_axis + 1; a < rank; ++a) l.inner *= dims[a];
  // The divisor of an axis: the product of the dims after it, the feature
  // axis left out.
  auto divisor = [&](int axis) {
    int64_t d = 1;
    for (int a = axis + 1; a < rank; ++a) {
      if (a != feature_axis) d *= dims[a];
    }
    return d;
  };
  l.seq_len = dims[sequence_axis];
  l.seq_div = divisor(sequence_axis);
  l.start_only = positions_rank == 0;
  if (positions_rank >= 1) {
    const int64_t table_seq = positions_dims[positions_rank - 1];
    l.pos_seq_stride = table_seq == 1 ? 0 : 1;
    if (positions_rank == 2 && positions_dims[0] != 1) {
      int batch_axis = 0;
      while (batch_axis == sequence_axis || batch_axis == feature_axis) {
        ++batch_axis;
      }
      l.batch_len = dims[batch_axis];
      l.batch_div = divisor(batch_axis);
      l.pos_batch_stride = table_seq;
    }
  }
  return l;
}

}  // namespace rotary
}  // namespace tf_ops

#endif  // TF_OPS_CC_ROTARY_ROTARY_LAYOUT_H_
