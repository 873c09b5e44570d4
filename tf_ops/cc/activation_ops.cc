// The op registry: every op tf_ops adds to TensorFlow, with its inputs,
// attributes and shape function. Names carry the "TfOps>" namespace so they
// never clash with TensorFlow's own LeakyRelu, Elu, EluGrad, ...
//
// Kernels for these ops are in activation_kernels.cc; Python gradients in
// tf_ops/python/gradients.py.

#include "tensorflow/core/framework/op.h"
#include "tf_ops/cc/activation_shape_fns.h"

namespace tf_ops {

// The dtypes every activation supports, on CPU and GPU. Half and bfloat16 are
// computed in float and rounded once.
#define TF_OPS_ACTIVATION_DTYPES "T: {half, bfloat16, float, double} = DT_FLOAT"

REGISTER_OP("TfOps>LeakyRelu")
    .Input("features: T")
    .Output("activations: T")
    .Attr("alpha: float = 0.2")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationShape<LeakyRelu>)
    .Doc("activations = features if features > 0 else alpha * features.");

REGISTER_OP("TfOps>LeakyReluGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr("alpha: float = 0.2")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationGradShape<LeakyRelu>)
    .Doc("backprops = gradients if features > 0 else alpha * gradients.");

REGISTER_OP("TfOps>Elu")
    .Input("features: T")
    .Output("activations: T")
    .Attr("alpha: float = 1.0")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationShape<Elu>)
    .Doc("activations = features if features > 0 else alpha * (exp(features) - 1). "
         "alpha must be finite and >= 0.");

REGISTER_OP("TfOps>EluGrad")
    .Input("gradients: T")
    .Input("outputs: T")
    .Output("backprops: T")
    .Attr("alpha: float = 1.0")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationGradShape<Elu>)
    .Doc("backprops = gradients if outputs > 0 else gradients * (outputs + alpha), "
         "from the outputs of TfOps>Elu (alpha = 1 is CANN's EluGrad).");

REGISTER_OP("TfOps>Gelu")
    .Input("features: T")
    .Output("activations: T")
    .Attr("approximate: bool = false")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationShape<Gelu>)
    .Doc("activations = features * Phi(features) (exact), or the tanh form "
         "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) when approximate.");

REGISTER_OP("TfOps>GeluGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr("approximate: bool = false")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationGradShape<Gelu>)
    .Doc("backprops = gradients * gelu'(features).");

REGISTER_OP("TfOps>Swish")
    .Input("features: T")
    .Output("activations: T")
    .Attr("beta: float = 1.0")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationShape<Swish>)
    .Doc("activations = features * sigmoid(beta * features); beta = 1 is SiLU.");

REGISTER_OP("TfOps>SwishGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr("beta: float = 1.0")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationGradShape<Swish>)
    .Doc("backprops = gradients * swish'(features).");

REGISTER_OP("TfOps>Mish")
    .Input("features: T")
    .Output("activations: T")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationShape<Mish>)
    .Doc("activations = features * tanh(softplus(features)).");

REGISTER_OP("TfOps>MishGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationGradShape<Mish>)
    .Doc("backprops = gradients * mish'(features).");

REGISTER_OP("TfOps>HardSwish")
    .Input("features: T")
    .Output("activations: T")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationShape<HardSwish>)
    .Doc("activations = features * relu6(features + 3) / 6 (MobileNetV3).");

REGISTER_OP("TfOps>HardSwishGrad")
    .Input("gradients: T")
    .Input("features: T")
    .Output("backprops: T")
    .Attr(TF_OPS_ACTIVATION_DTYPES)
    .SetShapeFn(ActivationGradShape<HardSwish>)
    .Doc("backprops = gradients * hard_swish'(features): 0 for features <= -3, "
         "(2 features + 3) / 6 inside, 1 for features >= 3.");

#undef TF_OPS_ACTIVATION_DTYPES

}  // namespace tf_ops
