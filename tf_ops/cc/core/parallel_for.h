// How a kernel lends its thread pool to an engine that splits its own work,
// without TensorFlow types: the engines and their TF-free test programs share
// it (the kernels build one from TensorFlow's pool: kernel_helpers.h's
// CpuParallelForOf; a test passes a plain loop).

#ifndef TF_OPS_CC_CORE_PARALLEL_FOR_H_
#define TF_OPS_CC_CORE_PARALLEL_FOR_H_

#include <cstdint>
#include <functional>

namespace tf_ops {

// parallel(total, cost_per_unit, fn) calls fn(begin, end) over [0, total) in
// any split, possibly concurrently; cost_per_unit (rough cycles per unit)
// sizes the shards.
using ParallelFor = std::function<void(
    int64_t total, int64_t cost_per_unit,
    const std::function<void(int64_t, int64_t)>& fn)>;

}  // namespace tf_ops

#endif  // TF_OPS_CC_CORE_PARALLEL_FOR_H_
