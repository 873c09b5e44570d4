// The list of activations the engine runs: one line per functor in
// activation_math.h. Every place that must cover all activations (kernel
// registration, CUDA instantiation, the GPU self-test) expands this list, so
// adding an activation here is enough for it to get kernels on both devices.

#ifndef TF_OPS_CC_ACTIVATION_LIST_H_
#define TF_OPS_CC_ACTIVATION_LIST_H_

#define TF_OPS_FOR_EACH_ACTIVATION(X) \
  X(LeakyRelu)                        \
  X(Elu)                              \
  X(Gelu)                             \
  X(Swish)                            \
  X(Mish)                             \
  X(HardSwish)                        \
  X(Celu)                             \
  X(Sigmoid)                          \
  X(Relu6)                            \
  X(HardSigmoid)                      \
  X(Tanh)

#endif  // TF_OPS_CC_ACTIVATION_LIST_H_
