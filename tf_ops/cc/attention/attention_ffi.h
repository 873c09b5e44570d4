// What the attention family's XLA lowerings (attention_xla.cc) and its FFI
// handlers (attention_ffi.cc) agree on: the custom-call targets and the
// Host backward's scratch alignment. TF-free and XLA-free.

#ifndef TF_OPS_CC_ATTENTION_ATTENTION_FFI_H_
#define TF_OPS_CC_ATTENTION_ATTENTION_FFI_H_

#include <cstdint>

namespace tf_ops {
namespace attention {

inline constexpr char kAttentionForwardTarget[] = "tf_ops_attention_forward";
inline constexpr char kAttentionBackwardTarget[] = "tf_ops_attention_backward";
inline constexpr char kAttentionBiasGradTarget[] = "tf_ops_attention_bias_grad";

// The Host backward's (and bias gradient's) scratch result is this many bytes longer than the
// engine asks for, so that the handler can align it to what the engine
// needs (XLA:CPU aligns its buffers to less than that for a u8 array).
inline constexpr int64_t kScratchAlign = 64;

}  // namespace attention
}  // namespace tf_ops

#endif  // TF_OPS_CC_ATTENTION_ATTENTION_FFI_H_
