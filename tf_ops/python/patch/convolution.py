"""How the patch runs a Keras convolution layer's convolution (``conv`` family), with
its own kernel or a kernel a batch norm was folded into (`functional.Fold`).

A ``Conv2D`` with one group per input channel (``groups`` equal to the input
channels, as ConvNeXt writes its 7x7 convolutions) is a depthwise convolution: output
channel ``g * m + j`` (``m = filters / groups``) sees input channel ``g`` only, which is
``DepthwiseConv2D``'s order with depth multiplier ``m``. Keras's TensorFlow backend runs
every grouped convolution as an XLA program (``ops.conv`` wraps it in
``tf.function(jit_compile=True)``, since TensorFlow's CPU ``Conv2D`` has no groups), and
XLA:CPU's grouped convolution and its gradients are slow: in ConvNeXtTiny's train step
(batch 8, 224x224, graph mode, 2-core AMD EPYC) they took about 5.7 s of the 7.0 s step,
where TensorFlow's depthwise kernels take about 0.2 s for the same sums. Under the patch
such a layer runs ``keras.ops.depthwise_conv`` (``DepthwiseConv2dNative`` and its
backprop kernels) with the kernel viewed as ``[..., channels, m]``: the same products,
summed in another order (float32 rounding). Other grouped convolutions (1 < groups <
channels, 1D and 3D: ``Conv1D`` has a ``call`` of its own) and channels-first layers
keep Keras's code.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras.src.layers.convolutional.base_conv import BaseConv
from keras.src.layers.convolutional.base_depthwise_conv import BaseDepthwiseConv

from tf_ops.python.patch import state, xla_cpu


def depthwise_reason_left(conv: keras.layers.Layer) -> str | None:
    """Why a grouped convolution layer keeps Keras's (XLA) grouped convolution, or None
    where it runs as a depthwise one. Meaningful for built layers with ``groups > 1``."""
    if conv.rank != 2:
        return f"groups={conv.groups} in {conv.rank}D (Keras's XLA program)"
    if conv.data_format != "channels_last":
        return f"groups={conv.groups}, channels_first"
    channels = conv.kernel.shape[-2] * conv.groups
    if conv.groups != channels:
        return f"groups={conv.groups} of {channels} input channels (Keras's XLA program)"
    return None


def runs_depthwise(conv: keras.layers.Layer) -> bool:
    """Whether the patch runs `conv` (a ``Conv2D``) as a depthwise
    convolution now: the ``conv`` family is active and it has one group per channel."""
    return (isinstance(conv, BaseConv) and conv.groups > 1 and state.active("conv")
            and not (xla_cpu.compiling_for_cpu() and "conv" in xla_cpu.LEFT)
            and depthwise_reason_left(conv) is None)


def convolve(conv: keras.layers.Layer, inputs, kernel) -> tf.Tensor:
    """`conv`'s convolution of `inputs` by `kernel` (of `conv.kernel`'s shape)."""
    depthwise = isinstance(conv, BaseDepthwiseConv)
    if not depthwise and runs_depthwise(conv):  # [..., 1, channels * m] -> [..., channels, m]
        *window, _, filters = conv.kernel.shape
        kernel = tf.reshape(kernel, [*window, conv.groups, filters // conv.groups])
        depthwise = True
    if depthwise:
        return tf.convert_to_tensor(keras.ops.depthwise_conv(
            inputs, kernel, strides=conv.strides, padding=conv.padding,
            dilation_rate=conv.dilation_rate, data_format=conv.data_format))
    return tf.convert_to_tensor(conv.convolution_op(inputs, kernel))


def depthwise_call(conv: keras.layers.Layer, inputs) -> tf.Tensor:
    """What Keras's ``call`` computes for a `conv` that `runs_depthwise`: the
    convolution, the bias (one ``BiasAdd``, channels last) and the activation."""
    outputs = convolve(conv, inputs, conv.kernel)
    if conv.use_bias:
        outputs = tf.nn.bias_add(outputs, tf.cast(conv.bias, outputs.dtype))
    return outputs if conv.activation is None else conv.activation(outputs)
