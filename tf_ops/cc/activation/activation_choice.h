// The activation a normalization op applies after it (batch norm, group
// norm), chosen at run time by the op's `activation` attribute: Identity or
// any functor of activation_list.h, with its attributes (the ops' `alpha`,
// `beta`, `approximate`). VisitActivation calls a generic lambda with the
// chosen functor as its own type, so that each engine loop is compiled for
// one activation. TF-free: the kernels, the XLA lowerings and FFI handlers,
// the CUDA launchers, the engine test and the GPU self-test share it; the
// attribute reading is activation_choice_attrs.h.

#ifndef TF_OPS_CC_ACTIVATION_ACTIVATION_CHOICE_H_
#define TF_OPS_CC_ACTIVATION_ACTIVATION_CHOICE_H_

#include <cstring>

#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_math.h"

namespace tf_ops {

// No activation: y = z.
struct Identity {
  static constexpr const char* kName = "Identity";
  static constexpr int kCyclesPerElement = 0;
  static constexpr bool kGradTakesOutputs = false;

  template <typename T>
  TF_OPS_HOST_DEVICE T Forward(T x) const {
    return x;
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T Derivative(T) const {
    return T(1);
  }
  template <typename T>
  TF_OPS_HOST_DEVICE T SecondDerivative(T) const {
    return T(0);
  }
};

// Identity first, then the activation list.
#define TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(X) \
  X(Identity)                                \
  TF_OPS_FOR_EACH_ACTIVATION(X)

struct ActivationChoice {
  enum class Kind {
#define TF_OPS_CHOICE_KIND(Name) k##Name,
    TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_CHOICE_KIND)
#undef TF_OPS_CHOICE_KIND
  };
  Kind kind = Kind::kIdentity;
#define TF_OPS_CHOICE_MEMBER(Name) Name Name##_op;
  TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_CHOICE_MEMBER)
#undef TF_OPS_CHOICE_MEMBER

  // Sets kind from an op name ("Identity", "Swish", ...); false if unknown.
  bool SetKind(const char* name) {
#define TF_OPS_CHOICE_NAME(Name)       \
  if (std::strcmp(name, #Name) == 0) { \
    kind = Kind::k##Name;              \
    return true;                       \
  }
    TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_CHOICE_NAME)
#undef TF_OPS_CHOICE_NAME
    return false;
  }
  // The op name of kind.
  const char* name() const {
    switch (kind) {
#define TF_OPS_CHOICE_KIND_NAME(Name) \
  case Kind::k##Name:                 \
    return #Name;
      TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_CHOICE_KIND_NAME)
#undef TF_OPS_CHOICE_KIND_NAME
    }
    return "";
  }
};

// The attribute `activation` accepts these names: 'Identity' and the list's,
// joined at compile time.
#define TF_OPS_CHOICE_QUOTED(Name) ", '" #Name "'"
inline const char* ActivationChoiceNames() {
  return "'Identity'" TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_CHOICE_QUOTED);
}
#undef TF_OPS_CHOICE_QUOTED

template <typename Fn>
void VisitActivation(const ActivationChoice& a, Fn&& fn) {
  switch (a.kind) {
#define TF_OPS_CHOICE_VISIT(Name)       \
  case ActivationChoice::Kind::k##Name: \
    fn(a.Name##_op);                    \
    return;
    TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_CHOICE_VISIT)
#undef TF_OPS_CHOICE_VISIT
  }
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_ACTIVATION_CHOICE_H_
