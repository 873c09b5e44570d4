// What the group-norm family's XLA lowerings (group_norm_xla.cc) and its FFI
// handlers (group_norm_ffi.cc) agree on: the custom-call targets and the Host
// scratch's alignment. TF-free and XLA-free.

#ifndef TF_OPS_CC_GROUP_NORM_GROUP_NORM_FFI_H_
#define TF_OPS_CC_GROUP_NORM_GROUP_NORM_FFI_H_

#include <cstdint>

namespace tf_ops {
namespace group_norm {

inline constexpr char kGroupNormForwardTarget[] = "tf_ops_group_norm_forward";
inline constexpr char kGroupNormBackwardTarget[] = "tf_ops_group_norm_backward";

// The Host scratch result (the engine's double partial sums) is this many
// bytes longer than the engine asks for, so that the handler can align it
// (XLA:CPU aligns a u8 array to less than a double may need).
inline constexpr int64_t kScratchAlign = 64;

}  // namespace group_norm
}  // namespace tf_ops

#endif  // TF_OPS_CC_GROUP_NORM_GROUP_NORM_FFI_H_
