"""Fusing an activation layer into the layer before it, in functional models.

keras.applications write ``Conv2D -> BatchNormalization -> Activation("swish")`` and
``Dense -> Activation("gelu")`` as separate layers. Where a functional model (or a
Sequential one, which runs one) has such a pair, `tf_ops.patch_keras()` runs the pair
as one fused op: the batch norm (or the Dense's bias) computes the activation in the
same pass, and the activation layer passes its input on.

How, without changing the model (its layers, config, weights and files stay Keras's):
a plan per model (`plan`) finds the pairs from its graph, and `Functional`'s graph
runner, patched, calls the first layer of each pair with the activation to fuse (a
context variable its patched ``call`` reads: `paired_activation`) and replaces the
second layer's call by the identity. A pair is fused only where that is exact:
- the first layer is Keras's ``BatchNormalization`` or ``Dense`` (bias, no activation
  of its own, not quantized) whose class keeps the patched ``call``, or an add of two
  tensors of one shape (``Add``; InceptionResNetV2's ``CustomScaleLayer``,
  ``x + r * scale``) followed by an activation whose gradient its output gives (ReLU:
  ResNet's add + ReLU, one ``TfOps>Add{Act}`` that keeps only the output, as Keras's);
- the second is an activation layer tf_ops has a kernel for (`activations.of_layer`),
  with the same compute dtype;
- within this model each layer is called once, the first layer's output feeds only the
  second and is not one of the model's outputs (so a feature extractor built on the
  same layers, ``Model(inputs, bn.output)``, has no pair there and gets the batch
  norm's own output).
Everything else about calling the layers is Keras's: ``training`` injection, masks,
autocasting, the moving-average updates.

A convolution followed by a batch norm (``Conv2D -> BatchNormalization``, with or
without an activation after it) is folded the same way (`Fold`): when the batch norm
uses its moving statistics (inference, or a frozen layer), the convolution's patched
``call`` convolves with the kernel scaled by the batch norm's ``s`` and adds its
shift in the bias (`tf_ops.python.batch_norm.folding`), and the batch norm's call (and
the activation's, where it is the pair's) passes its input on. When the batch norm
computes batch statistics (training), both run as the pair above. The conditions are
the pair's, for the convolution and the batch norm (each called once, the conv's
output feeding only the batch norm); besides, the convolution has no activation of
its own, is not quantized, and has the batch norm's channel axis, and both compute in
float32 or float64. Under ``jit_compile`` on the CPU, pairs of the
families left to XLA there (`xla_cpu.LEFT`) are not fused.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import weakref
from typing import Any, Callable

import keras
from keras.src import tree
from keras.src.layers.convolutional.base_depthwise_conv import BaseDepthwiseConv

from tf_ops.python.batch_norm import folding as folding_math
from tf_ops.python.activation.resolver import ActivationSpec, resolve
from tf_ops.python.fused import functions as fused_functions
from tf_ops.python.patch import activations, state, xla_cpu

RUN_THROUGH_GRAPH = "keras.src.models.functional:Functional._run_through_graph"
BATCH_NORM_CALL = "keras.src.layers.normalization.batch_normalization:BatchNormalization.call"
CONV_CALL = "keras.src.layers.convolutional.base_conv:BaseConv.call"
DEPTHWISE_CONV_CALL = "keras.src.layers.convolutional.base_depthwise_conv:BaseDepthwiseConv.call"
DENSE_CALL = "keras.src.layers.core.dense:Dense.call"
ADD_MERGE = "keras.src.layers.merging.add:Add._merge_function"
CUSTOM_SCALE_CALL = "keras.src.applications.inception_resnet_v2:CustomScaleLayer.call"

_IDENTITY = resolve(None)
_PAIRED: contextvars.ContextVar = contextvars.ContextVar("tf_ops_patch_paired", default=None)
_FOLDING: contextvars.ContextVar = contextvars.ContextVar("tf_ops_patch_folding", default=None)


def paired_activation(layer: keras.layers.Layer) -> ActivationSpec | None:
    """The activation the running model's plan fuses into `layer`'s call, or None."""
    value = _PAIRED.get()
    if value is not None and value[0] is layer:
        return value[1]
    return None


def folding(layer: keras.layers.Layer) -> tuple["Fold", set] | None:
    """The fold the running model's plan gives the convolution `layer`, and the set
    of batch norms (ids) folded in this run (the convolution adds its batch norm when
    it folds it), or None."""
    value = _FOLDING.get()
    if value is not None and value[0].conv is layer:
        return value
    return None


@dataclasses.dataclass(frozen=True)
class Pair:
    """A layer and the activation layer fused into it."""

    first: keras.layers.Layer
    second: keras.layers.Layer
    activation: ActivationSpec
    family: str  # "batch_norm", "dense" or "activation" (an add)


def _first_family(layer: keras.layers.Layer) -> str | None:
    """The family that fuses an activation into `layer`, if it can now."""
    kind = type(layer)
    if isinstance(layer, keras.layers.BatchNormalization):
        patched = state.installed(BATCH_NORM_CALL)
        if patched is not None and kind.call is patched and not layer.renorm:
            return "batch_norm"
    elif isinstance(layer, keras.layers.Add):
        patched = state.installed(ADD_MERGE)
        if patched is not None and kind._merge_function is patched:
            return "activation"
    elif kind.call is state.installed(CUSTOM_SCALE_CALL):  # InceptionResNetV2's
        return "activation"
    elif isinstance(layer, keras.layers.Dense):
        patched = state.installed(DENSE_CALL)
        own = activations.of_function(layer.activation)
        if (patched is not None and kind.call is patched and layer.bias is not None
                and own is not None and own.entry is None
                and getattr(layer, "quantization_mode", None) is None):
            return "dense"
    return None


@dataclasses.dataclass(frozen=True)
class Fold:
    """A convolution and the batch norm after it (and the activation of the batch
    norm's pair, or the identity), folded when the batch norm uses its moving
    statistics."""

    conv: keras.layers.Layer
    batch_norm: keras.layers.Layer
    activation: ActivationSpec


def _foldable_conv(conv: Any, batch_norm: keras.layers.BatchNormalization) -> bool:
    """Whether `conv` is a convolution `batch_norm` folds into now (see the module)."""
    target = DEPTHWISE_CONV_CALL if isinstance(conv, BaseDepthwiseConv) else CONV_CALL
    patched = state.installed(target)
    if patched is None or not isinstance(conv, keras.layers.Layer) or type(conv).call is not patched:
        return False
    own = activations.of_function(conv.activation)
    if own is None or own.entry is not None or getattr(conv, "quantization_mode", None):
        return False
    rank = conv.rank + 2
    channel = 1 if conv.data_format == "channels_first" else rank - 1
    axis = batch_norm.axis
    return (isinstance(axis, int) and axis % rank == channel
            and conv.compute_dtype == batch_norm.compute_dtype
            and conv.compute_dtype in folding_math.FOLDED_DTYPES)


def find_folds(function: Any, pairs: list[Pair], xla_on_cpu: bool = False) -> list[Fold]:
    """The convolution + batch norm folds of `function` (a functional model's graph);
    none where `xla_on_cpu` and the batch-norm family is left to XLA there."""
    if xla_on_cpu and "batch_norm" in xla_cpu.LEFT:
        return []
    nodes, calls, consumers, outputs = _graph(function)
    by_first = {id(p.first): p for p in pairs}
    folds = []
    for node in nodes:
        bn = node.operation
        if (not isinstance(bn, keras.layers.BatchNormalization) or node.is_input
                or len(node.input_tensors) != 1 or _first_family(bn) != "batch_norm"):
            continue
        t = node.input_tensors[0]
        conv = t._keras_history.operation
        if (calls[id(conv)] != 1 or calls[id(bn)] != 1 or consumers[id(t)] != 1
                or id(t) in outputs or len(tree.flatten(node.arguments.args)) != 1
                or any(v is not None for v in node.arguments.kwargs.values())
                or not _foldable_conv(conv, bn)):
            continue
        pair = by_first.get(id(bn))
        folds.append(Fold(conv, bn, pair.activation if pair else _IDENTITY))
    return folds


def _graph(function: Any):
    """The nodes of `function`, how often each operation is called, how many nodes
    consume each tensor, and the ids of the outputs."""
    nodes = [node for depth in function._nodes_by_depth.values() for node in depth]
    calls = collections.Counter(id(node.operation) for node in nodes if node.operation)
    consumers: dict[int, int] = collections.Counter()
    for node in nodes:
        for t in node.input_tensors:
            consumers[id(t)] += 1
    outputs = {id(t) for t in tree.flatten(function.outputs)}
    return nodes, calls, consumers, outputs


def find_pairs(function: Any, xla_on_cpu: bool = False) -> list[Pair]:
    """The pairs of `function` (a functional model's graph) that run fused now; where
    `xla_on_cpu`, not those of the families left to XLA there (`xla_cpu.LEFT`)."""
    nodes, calls, consumers, outputs = _graph(function)
    pairs = []
    for node in nodes:
        second = node.operation
        if second is None or node.is_input or len(node.input_tensors) != 1:
            continue
        spec = activations.of_layer(second)
        if spec is None:
            continue
        t = node.input_tensors[0]
        first = t._keras_history.operation
        if (calls[id(first)] != 1 or calls[id(second)] != 1 or consumers[id(t)] != 1
                or id(t) in outputs or len(tree.flatten(node.arguments.args)) != 1
                or node.arguments.kwargs):
            continue
        family = _first_family(first)
        if (family is None or first.compute_dtype != second.compute_dtype
                or (xla_on_cpu and family in xla_cpu.LEFT)
                or (family == "activation" and not _add_pairs(t, spec))):
            continue
        pairs.append(Pair(first, second, spec, family))
    return pairs


def _add_pairs(t: Any, spec: ActivationSpec) -> bool:
    """Whether an add (``Add``, ``CustomScaleLayer``) and the activation `spec` after it
    run as one ``TfOps>Add{Act}``: two inputs of one shape, and an activation whose
    gradient its output gives (ReLU's: then, as for Keras's add and ReLU, only the
    output is kept for the backward pass; another activation's would keep both addends,
    more memory than Keras's add for no fewer passes)."""
    history = t._keras_history  # the add's output: its node in this graph
    inputs = history.operation._inbound_nodes[history.node_index].input_tensors
    return (spec.entry is not None
            and fused_functions.output_gives_slope(spec.entry, dict(spec.attrs))
            and len(inputs) == 2 and tuple(inputs[0].shape) == tuple(inputs[1].shape)
            and inputs[0].dtype == inputs[1].dtype)


@dataclasses.dataclass(frozen=True)
class Plan:
    generation: int
    first: dict  # id(layer) -> Pair
    second: frozenset  # id(layer)
    folds: dict  # id(conv) -> Fold
    folded: frozenset  # id(batch norm)


_plans: "weakref.WeakKeyDictionary[Any, dict[bool, Plan]]" = weakref.WeakKeyDictionary()


def plan(function: Any) -> Plan:
    """The model's plan, made again whenever what is patched has changed; one for
    XLA on the CPU, one for everything else."""
    xla_on_cpu = xla_cpu.compiling_for_cpu()
    plans = _plans.setdefault(function, {})
    cached = plans.get(xla_on_cpu)
    if cached is not None and cached.generation == state.generation:
        return cached
    pairs = find_pairs(function, xla_on_cpu)
    folds = find_folds(function, pairs, xla_on_cpu)
    made = Plan(state.generation, {id(p.first): p for p in pairs},
                frozenset(id(p.second) for p in pairs),
                {id(f.conv): f for f in folds}, frozenset(id(f.batch_norm) for f in folds))
    plans[xla_on_cpu] = made
    return made


def _in_context(call: Callable, var: contextvars.ContextVar, value: Any) -> Callable:
    """`call`, run with `var` set to `value` (what the layer's patched call reads)."""
    def run(*args, **kwargs):
        token = var.set(value)
        try:
            return call(*args, **kwargs)
        finally:
            var.reset(token)
    return run


def _passed_on(*args, **kwargs):
    return args[0]


def _folded_or_run(call: Callable, batch_norm: keras.layers.Layer, folded: set) -> Callable:
    """The batch norm's call: its input passed on where its convolution folded it in
    this run, else `call`."""
    def run(*args, **kwargs):
        return args[0] if id(batch_norm) in folded else call(*args, **kwargs)
    return run


def make_run_through_graph(original: Callable) -> Callable:
    """`Functional._run_through_graph` that runs the model's pairs fused (not while
    Keras traces shapes with symbolic tensors, nor for a custom `call_fn`)."""

    def _run_through_graph(self, inputs, operation_fn=lambda op: op, **kwargs):
        if kwargs.get("call_fn") is None and not any(
                isinstance(x, keras.KerasTensor) for x in tree.flatten(inputs)):
            steps = plan(self)
            if steps.first or steps.folds:
                inner = operation_fn
                folded: set = set()  # the batch norms folded in this run

                def operation_fn(op):
                    fold = steps.folds.get(id(op))
                    if fold is not None:
                        return _in_context(inner(op), _FOLDING, (fold, folded))
                    pair = steps.first.get(id(op))
                    call = inner(op) if pair is None else _in_context(
                        inner(op), _PAIRED, (pair.first, pair.activation))
                    if id(op) in steps.folded:
                        return _folded_or_run(call, op, folded)
                    if pair is not None:
                        return call
                    if id(op) in steps.second:
                        return _passed_on
                    return call
        return original(self, inputs, operation_fn, **kwargs)

    return _run_through_graph
