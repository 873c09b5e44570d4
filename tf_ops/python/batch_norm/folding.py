"""A batch norm that uses its moving statistics, folded into the convolution before it.

With the moving statistics (inference, or a frozen layer) a batch norm is a per-channel
affine map, ``BN(z) = z * s + t`` with ``s = gamma * rsqrt(moving_variance + epsilon)``
and ``t = beta - moving_mean * s`` (Keras's ``batch_normalization`` computes these same
``s`` and ``t``: `scale_and_shift`). After a convolution ``z = conv(x, W) + b`` it is
the convolution itself, with the kernel's output channels scaled: ``conv(x, W * s) +
(b * s + t)`` (`folded_kernel_and_bias`, then `bias_activation`). So
the normalisation costs no pass over the activations at all: the scaled kernel is
computed per call from the layers' own variables (a pass over the weights, not the
activations: so only where the kernel is the smaller of the two, `cheaper_than_a_pass`),
and the bias + activation after the convolution is one op (TensorFlow's
``BiasAdd`` and ``Relu``, which grappler fuses into the convolution on the CPU, or a
``TfOps>Bias{Act}`` op for the other activations).

The same values in another order: float32 rounding (the products ``W * s`` are rounded
once, where Keras rounds ``z`` and then ``z * s``). `tf_ops.patch_keras()` folds a
``Conv`` or ``DepthwiseConv`` layer and the ``BatchNormalization`` after it wherever the
model's graph has that pair (`tf_ops.python.patch.functional`); the layers, weights and
files stay Keras's, and a training call (batch statistics) runs them unfolded.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras.src.layers.convolutional.base_depthwise_conv import BaseDepthwiseConv

from tf_ops.python.activation import functions as activations
from tf_ops.python.batch_norm import composites
from tf_ops.python.activation.resolver import ActivationSpec, resolve

# ReLU and ReLU6 after a BiasAdd are TensorFlow's own: grappler's remapper fuses BiasAdd +
# Relu (Relu6) into the convolution on the CPU (_FusedConv2D), so there is nothing for a
# tf_ops op to save.
_GRAPPLER_FUSES = ((resolve("relu"), tf.nn.relu), (resolve("relu6"), tf.nn.relu6))

# The compute dtypes folded: where Keras's batch norm also computes in that dtype. Under
# mixed precision Keras normalises in float32 (a cast up and down); a half-precision
# kernel scaled by s would round differently from that, so those pairs run unfolded.
FOLDED_DTYPES = ("float32", "float64")


def cheaper_than_a_pass(conv: keras.layers.Layer, inputs) -> bool:
    """Whether folding costs less than the batch norm's own pass over the convolution's
    output: the kernel, scaled at every call, has fewer elements than that output (a
    batch of one where the batch is not known when the graph is built). ResNet50's last
    stage at batch 8 is the other way round (7x7x2048 outputs per image, a 1x1x512x2048
    kernel): there the batch norm runs its fused op after the convolution."""
    shape = tuple(inputs.shape)
    if None in shape[1:]:
        return False
    output = conv.compute_output_shape((shape[0] or 1,) + shape[1:])
    kernel = conv.kernel.shape
    return math.prod(kernel) <= math.prod(output)


def scale_and_shift(layer: keras.layers.BatchNormalization, dtype) -> tuple[tf.Tensor, tf.Tensor]:
    """``(s, t)`` with ``layer``'s inference ``BN(z) = z * s + t``, in `dtype`.

    Example:
      >>> bn = keras.layers.BatchNormalization(epsilon=0.0)
      >>> bn.build((None, 2))
      >>> [v.numpy().tolist() for v in scale_and_shift(bn, tf.float32)]
      [[1.0, 1.0], [0.0, 0.0]]
    """
    return composites.affine(
        tf.cast(layer.moving_mean, dtype), tf.cast(layer.moving_variance, dtype),
        layer.epsilon, tf.cast(layer.gamma, dtype) if layer.scale else None,
        tf.cast(layer.beta, dtype) if layer.center else None)


def bias_activation(x: tf.Tensor, bias: tf.Tensor, spec: ActivationSpec,
                    channels_first: bool = False) -> tf.Tensor:
    """``spec(x + bias)`` with the bias on the channel axis (the last, or axis 1 where
    `channels_first`, whatever x's rank), as one op: ``BiasAdd`` (+ ``Relu``, which
    grappler fuses into the convolution before it; Relu6 likewise), or
    ``TfOps>Bias{Act}``."""
    data_format = "NCHW" if channels_first else "NHWC"
    if spec.entry is None:
        return tf.nn.bias_add(x, bias, data_format=data_format)
    for grappler_spec, tf_activation in _GRAPPLER_FUSES:
        if spec == grappler_spec:
            return tf_activation(tf.nn.bias_add(x, bias, data_format=data_format))
    return activations.FUNCTIONS[spec.entry.function](
        x, **dict(spec.attrs), bias=bias, data_format=data_format)


def folded_kernel_and_bias(conv: keras.layers.Layer,
                           batch_norm: keras.layers.BatchNormalization):
    """The kernel and bias of the convolution that computes ``batch_norm(conv(x))`` with
    `batch_norm`'s moving statistics: ``W * s`` (each output channel's filter scaled)
    and ``b * s + t``, in `conv`'s compute dtype. `conv` is a Keras ``Conv`` (kernel
    ``[..., in / groups, filters]``) or ``DepthwiseConv`` (``[..., in, multiplier]``:
    output channel ``c * multiplier + m``) layer without an activation of its own, and
    `batch_norm` normalises its channel axis.

    Example:
      >>> conv = keras.layers.Conv2D(2, 1, kernel_initializer="ones")
      >>> conv.build((None, 3, 3, 1))
      >>> bn = keras.layers.BatchNormalization(epsilon=0.0, gamma_initializer="zeros")
      >>> bn.build((None, 3, 3, 2))
      >>> [v.numpy().tolist() for v in folded_kernel_and_bias(conv, bn)]
      [[[[[0.0, 0.0]]]], [0.0, 0.0]]
    """
    dtype = tf.as_dtype(conv.compute_dtype)
    s, t = scale_and_shift(batch_norm, dtype)
    kernel = tf.cast(conv.kernel, dtype)
    if isinstance(conv, BaseDepthwiseConv):
        kernel = kernel * tf.reshape(s, kernel.shape[-2:])
    else:
        kernel = kernel * s
    bias = t if not conv.use_bias else tf.cast(conv.bias, dtype) * s + t
    return kernel, bias
