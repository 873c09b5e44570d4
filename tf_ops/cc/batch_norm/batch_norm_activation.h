// The activation a batch-norm op applies, chosen at run time by the ops'
// `activation` attribute: Identity or any functor of activation_list.h, with
// its attributes (the ops' `alpha`, `beta`, `approximate`). VisitActivation
// calls a generic lambda with the chosen functor as its own type, so that each
// engine loop is compiled for one activation. TF-free: kernels, the CUDA
// launchers, the engine test and the GPU self-test share it.

#ifndef TF_OPS_CC_BATCH_NORM_BATCH_NORM_ACTIVATION_H_
#define TF_OPS_CC_BATCH_NORM_BATCH_NORM_ACTIVATION_H_

#include <cstring>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"
#include "tf_ops/cc/batch_norm/batch_norm_math.h"

// Identity first, then the activation list.
#define TF_OPS_FOR_EACH_BATCH_NORM_ACTIVATION(X) \
  X(Identity)                                    \
  TF_OPS_FOR_EACH_ACTIVATION(X)

namespace tf_ops {

struct BatchNormActivation {
  enum class Kind {
#define TF_OPS_BN_KIND(Name) k##Name,
    TF_OPS_FOR_EACH_BATCH_NORM_ACTIVATION(TF_OPS_BN_KIND)
#undef TF_OPS_BN_KIND
  };
  Kind kind = Kind::kIdentity;
#define TF_OPS_BN_MEMBER(Name) Name Name##_op;
  TF_OPS_FOR_EACH_BATCH_NORM_ACTIVATION(TF_OPS_BN_MEMBER)
#undef TF_OPS_BN_MEMBER

  // Sets kind from an op name ("Identity", "Swish", ...); false if unknown.
  bool SetKind(const char* name) {
#define TF_OPS_BN_NAME(Name)            \
  if (std::strcmp(name, #Name) == 0) { \
    kind = Kind::k##Name;              \
    return true;                       \
  }
    TF_OPS_FOR_EACH_BATCH_NORM_ACTIVATION(TF_OPS_BN_NAME)
#undef TF_OPS_BN_NAME
    return false;
  }
};

// The attribute `activation` accepts these names.
inline const char* BatchNormActivationNames() {
  return "'Identity', 'LeakyRelu', 'Elu', 'Gelu', 'Swish', 'Mish', "
         "'HardSwish', 'Celu', 'Sigmoid'";
}

template <typename Fn>
void VisitActivation(const BatchNormActivation& a, Fn&& fn) {
  switch (a.kind) {
#define TF_OPS_BN_VISIT(Name)              \
  case BatchNormActivation::Kind::k##Name: \
    fn(a.Name##_op);                       \
    return;
    TF_OPS_FOR_EACH_BATCH_NORM_ACTIVATION(TF_OPS_BN_VISIT)
#undef TF_OPS_BN_VISIT
  }
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_BATCH_NORM_BATCH_NORM_ACTIVATION_H_
