// The op registry: the three ops every activation in activation_list.h adds
// to TensorFlow, with their inputs, attributes and shape functions. Names
// carry the "TfOps>" namespace so they never clash with TensorFlow's own
// LeakyRelu, Elu, EluGrad, ...
//
// For an activation Act with grad input v (features, or outputs for Elu):
//   TfOps>Act          features: T                  -> activations: T
//   TfOps>ActGrad      gradients: T, v: T           -> backprops: T
//   TfOps>ActGradGrad  upstream: T, gradients: T, v: T
//                                                   -> d_gradients: T, d_v: T
// all with Act's attributes and T in {half, bfloat16, float, double}. What
// differs between activations is below, one OpDefsOf() per activation; the
// rest is generated from the list.
//
// Kernels for these ops are in activation_kernels.cc (and the XLA lowerings
// in activation_xla.cc); Python gradients in tf_ops/python/activation/gradients.py.
// Each activation's fused ops (bias + activation, gated) are registered here
// too, with the same attributes: see fused_op_defs.h.

#include <vector>
#include <string>

#include "tensorflow/core/framework/op.h"
#include "tf_ops/cc/activation/activation_list.h"
#include "tf_ops/cc/activation/activation_checks.h"
#include "tf_ops/cc/fused/fused_op_defs.h"

namespace tf_ops {
namespace {

// What an activation's ops declare beyond the shared shape: its attributes
// (REGISTER_OP syntax, with defaults; checked by ReadAttrs in
// activation_attrs.h) and what the forward and grad ops compute.
struct ActivationOpDefs {
  std::vector<const char*> attrs;
  const char* forward_doc;
  const char* grad_doc;
};

ActivationOpDefs OpDefsOf(LeakyRelu) {
  return {{"alpha: float = 0.2"},
          "activations = features if features > 0 else alpha * features.",
          "backprops = gradients if features > 0 else alpha * gradients."};
}

ActivationOpDefs OpDefsOf(Elu) {
  return {{"alpha: float = 1.0"},
          "activations = features if features > 0 else alpha * "
          "(exp(features) - 1). alpha must be finite and >= 0.",
          "backprops = gradients if outputs > 0 else gradients * (outputs + "
          "alpha), from the outputs of TfOps>Elu (alpha = 1 is CANN's "
          "EluGrad)."};
}

ActivationOpDefs OpDefsOf(Gelu) {
  return {{"approximate: bool = false"},
          "activations = features * Phi(features) (exact), or the tanh form "
          "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) when approximate.",
          "backprops = gradients * gelu'(features)."};
}

ActivationOpDefs OpDefsOf(Swish) {
  return {{"beta: float = 1.0"},
          "activations = features * sigmoid(beta * features); beta = 1 is "
          "SiLU.",
          "backprops = gradients * swish'(features)."};
}

ActivationOpDefs OpDefsOf(Mish) {
  return {{},
          "activations = features * tanh(softplus(features)).",
          "backprops = gradients * mish'(features)."};
}

ActivationOpDefs OpDefsOf(HardSwish) {
  return {{},
          "activations = features * relu6(features + 3) / 6 (MobileNetV3).",
          "backprops = gradients * hard_swish'(features): 0 for features <= "
          "-3, (2 features + 3) / 6 inside, 1 for features >= 3."};
}

ActivationOpDefs OpDefsOf(Celu) {
  return {{"alpha: float = 1.0"},
          "activations = features if features > 0 else alpha * "
          "(exp(features / alpha) - 1). alpha must be > 0 and normal.",
          "backprops = gradients if features > 0 else gradients * "
          "exp(features / alpha)."};
}

ActivationOpDefs OpDefsOf(Sigmoid) {
  return {{},
          "activations = 1 / (1 + exp(-features)), as tf.sigmoid.",
          "backprops = gradients * s * (1 - s), s = sigmoid(features) (from "
          "the features, unlike TensorFlow's SigmoidGrad, which takes the "
          "outputs)."};
}

ActivationOpDefs OpDefsOf(Relu6) {
  return {{},
          "activations = min(max(features, 0), 6), as tf.nn.relu6.",
          "backprops = gradients where 0 < features < 6, else 0 (as "
          "TensorFlow's Relu6Grad)."};
}

ActivationOpDefs OpDefsOf(HardSigmoid) {
  return {{},
          "activations = relu6(features + 3) / 6, as "
          "keras.activations.hard_sigmoid.",
          "backprops = gradients / 6 where 0 < features + 3 < 6, else 0 (as "
          "TensorFlow's Relu6Grad of the sum)."};
}

ActivationOpDefs OpDefsOf(Tanh) {
  return {{},
          "activations = tanh(features), as tf.tanh.",
          "backprops = gradients * (1 - tanh(features)^2) (from the features, "
          "unlike TensorFlow's TanhGrad, which takes the outputs)."};
}

// The dtypes every activation supports, on every device. Half and bfloat16
// are computed in float and rounded once.
constexpr char kDtypes[] = "T: {half, bfloat16, float, double} = DT_FLOAT";

// Registers Act's three ops; returns true (for a static initializer).
template <typename Act>
bool RegisterActivationOps() {
  using tensorflow::register_op::OpDefBuilderWrapper;
  const ActivationOpDefs defs = OpDefsOf(Act{});
  const std::string name = std::string("TfOps>") + Act::kName;
  const std::string v = Act::kGradTakesOutputs ? "outputs" : "features";
  auto add_attrs = [&](OpDefBuilderWrapper& op) {
    for (const char* attr : defs.attrs) op.Attr(attr);
    op.Attr(kDtypes);
  };

  OpDefBuilderWrapper forward(name.c_str());
  forward.Input("features: T").Output("activations: T");
  add_attrs(forward);
  forward.SetShapeFn(ActivationShape<Act>).Doc(defs.forward_doc);
  forward();  // hands the definition to TensorFlow's op registry

  OpDefBuilderWrapper grad((name + "Grad").c_str());
  grad.Input("gradients: T").Input(v + ": T").Output("backprops: T");
  add_attrs(grad);
  grad.SetShapeFn(ActivationGradShape<Act>).Doc(defs.grad_doc);
  grad();

  OpDefBuilderWrapper grad_grad((name + "GradGrad").c_str());
  grad_grad.Input("upstream: T")
      .Input("gradients: T")
      .Input(v + ": T")
      .Output("d_gradients: T")
      .Output("d_" + v + ": T");
  add_attrs(grad_grad);
  grad_grad.SetShapeFn(ActivationGradGradShape<Act>)
      .Doc("The gradient of TfOps>" + std::string(Act::kName) +
           "Grad(gradients, " + v + ") for its upstream gradient: "
           "d_gradients = upstream * f'(" + v + "), d_" + v +
           " = upstream * gradients * f''(" + v + "), in one pass.");
  grad_grad();
  // The fused ops (bias + activation, gated), with the same attributes.
  return RegisterFusedOps<Act>(defs.attrs, kDtypes);
}

#define TF_OPS_REGISTER_OPS(Act) \
  const bool k##Act##OpsRegistered = RegisterActivationOps<Act>();
TF_OPS_FOR_EACH_ACTIVATION(TF_OPS_REGISTER_OPS)
#undef TF_OPS_REGISTER_OPS

}  // namespace
}  // namespace tf_ops
