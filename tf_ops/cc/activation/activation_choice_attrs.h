// Reading a normalization op's `activation` attribute and the chosen
// activation's own (activation_choice.h), for the shape function, the kernel
// constructor, the XLA lowering and the FFI handler: any Ctx with GetAttr.
// Each family reads and checks its other attributes (epsilon, axis, ...)
// itself.

#ifndef TF_OPS_CC_ACTIVATION_ACTIVATION_CHOICE_ATTRS_H_
#define TF_OPS_CC_ACTIVATION_ACTIVATION_CHOICE_ATTRS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tf_ops/cc/activation/activation_attrs.h"
#include "tf_ops/cc/activation/activation_choice.h"

namespace tf_ops {

template <typename Ctx>
absl::Status ReadAttrs(Ctx*, Identity*) {
  return absl::OkStatus();
}

// `activation` and the attributes of the activation it names, checked by that
// activation's ReadAttrs; errors name `op`.
template <typename Ctx>
absl::Status ReadActivationChoice(Ctx* ctx, const std::string& op,
                                  ActivationChoice* choice) {
  std::string name;
  TF_RETURN_IF_ERROR(ctx->GetAttr("activation", &name));
  if (!choice->SetKind(name.c_str())) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": attribute 'activation' must be one of ",
                     ActivationChoiceNames(), ", got '", name, "'"));
  }
  absl::Status status = absl::OkStatus();
  switch (choice->kind) {
#define TF_OPS_CHOICE_READ(Name)                          \
  case ActivationChoice::Kind::k##Name:                   \
    status = ReadAttrs(ctx, &choice->Name##_op);          \
    break;
    TF_OPS_FOR_EACH_CHOSEN_ACTIVATION(TF_OPS_CHOICE_READ)
#undef TF_OPS_CHOICE_READ
  }
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " (activation ", name, "): ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace tf_ops

#endif  // TF_OPS_CC_ACTIVATION_ACTIVATION_CHOICE_ATTRS_H_
