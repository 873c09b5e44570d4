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

#undef TF_OPS_ACTIVATION_DTYPES

}  // namespace tf_ops
