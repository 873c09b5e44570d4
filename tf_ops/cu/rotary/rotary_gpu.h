// The CUDA engine of the rotary embedding (rotary_math.h), callable from code
// that knows nothing of CUDA: device buffers, the stream a cudaStream_t as
// void*, nullptr on success or CUDA's error message. Same conventions as
// the CPU engine (rotary_cpu.h): any axis layout (rotary_layout.h), compute
// in float (double for double), one rounding per result, positions in that
// compute type, y may be x.
//
// A first small kernel writes the D/2 inverse frequencies (InverseFrequency,
// in double) into the scratch (RotaryGpuScratchBytes); then one thread per
// pair computes its angle, sine and cosine (CUDA's sincosf / sincos) and
// turns the pair: no table of x's size, and nothing shared between threads.

#ifndef TF_OPS_CU_ROTARY_ROTARY_GPU_H_
#define TF_OPS_CU_ROTARY_ROTARY_GPU_H_

#include <cstdint>

#include "tf_ops/cc/core/dtype.h"
#include "tf_ops/cc/rotary/rotary_layout.h"  // TF-free
#include "tf_ops/cc/rotary/rotary_math.h"    // RopeParams: TF-free

namespace tf_ops {
namespace rotary {

int64_t RotaryGpuScratchBytes(const RotaryLayout& layout);

// All of x; transpose: the backward (dx = RoPE^T(dy)).
const char* LaunchRotary(Dtype dtype, const RotaryLayout& layout,
                         const RopeParams& params, bool transpose,
                         const void* positions, const void* x, void* y,
                         void* scratch, void* stream);

}  // namespace rotary
}  // namespace tf_ops

#endif  // TF_OPS_CU_ROTARY_ROTARY_GPU_H_
