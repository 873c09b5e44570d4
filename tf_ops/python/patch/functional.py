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
  of its own, not quantized) whose class keeps the patched ``call``;
- the second is an activation layer tf_ops has a kernel for (`activations.of_layer`),
  with the same compute dtype;
- within this model each layer is called once, the first layer's output feeds only the
  second and is not one of the model's outputs (so a feature extractor built on the
  same layers, ``Model(inputs, bn.output)``, has no pair there and gets the batch
  norm's own output).
Everything else about calling the layers is Keras's: ``training`` injection, masks,
autocasting, the moving-average updates. Under ``jit_compile`` on the CPU, pairs of the
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

from tf_ops.python.batch_norm.activation_spec import ActivationSpec
from tf_ops.python.patch import activations, state, xla_cpu

RUN_THROUGH_GRAPH = "keras.src.models.functional:Functional._run_through_graph"
BATCH_NORM_CALL = "keras.src.layers.normalization.batch_normalization:BatchNormalization.call"
DENSE_CALL = "keras.src.layers.core.dense:Dense.call"

_PAIRED: contextvars.ContextVar = contextvars.ContextVar("tf_ops_patch_paired", default=None)


def paired_activation(layer: keras.layers.Layer) -> ActivationSpec | None:
    """The activation the running model's plan fuses into `layer`'s call, or None."""
    value = _PAIRED.get()
    if value is not None and value[0] is layer:
        return value[1]
    return None


@dataclasses.dataclass(frozen=True)
class Pair:
    """A layer and the activation layer fused into it."""

    first: keras.layers.Layer
    second: keras.layers.Layer
    activation: ActivationSpec
    family: str  # "batch_norm" or "dense"


def _first_family(layer: keras.layers.Layer) -> str | None:
    """The family that fuses an activation into `layer`, if it can now."""
    kind = type(layer)
    if isinstance(layer, keras.layers.BatchNormalization):
        patched = state.installed(BATCH_NORM_CALL)
        if patched is not None and kind.call is patched and not layer.renorm:
            return "batch_norm"
    elif isinstance(layer, keras.layers.Dense):
        patched = state.installed(DENSE_CALL)
        own = activations.of_function(layer.activation)
        if (patched is not None and kind.call is patched and layer.bias is not None
                and own is not None and own.entry is None
                and getattr(layer, "quantization_mode", None) is None):
            return "dense"
    return None


def find_pairs(function: Any, xla_on_cpu: bool = False) -> list[Pair]:
    """The pairs of `function` (a functional model's graph) that run fused now; where
    `xla_on_cpu`, not those of the families left to XLA there (`xla_cpu.LEFT`)."""
    nodes = [node for depth in function._nodes_by_depth.values() for node in depth]
    calls = collections.Counter(id(node.operation) for node in nodes if node.operation)
    consumers: dict[int, int] = collections.Counter()
    for node in nodes:
        for t in node.input_tensors:
            consumers[id(t)] += 1
    outputs = {id(t) for t in tree.flatten(function.outputs)}
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
                or (xla_on_cpu and family in xla_cpu.LEFT)):
            continue
        pairs.append(Pair(first, second, spec, family))
    return pairs


@dataclasses.dataclass(frozen=True)
class Plan:
    generation: int
    first: dict  # id(layer) -> Pair
    second: frozenset  # id(layer)


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
    made = Plan(state.generation, {id(p.first): p for p in pairs},
                frozenset(id(p.second) for p in pairs))
    plans[xla_on_cpu] = made
    return made


def _fused_first(call: Callable, pair: Pair) -> Callable:
    def run(*args, **kwargs):
        token = _PAIRED.set((pair.first, pair.activation))
        try:
            return call(*args, **kwargs)
        finally:
            _PAIRED.reset(token)
    return run


def _passed_on(*args, **kwargs):
    return args[0]


def make_run_through_graph(original: Callable) -> Callable:
    """`Functional._run_through_graph` that runs the model's pairs fused (not while
    Keras traces shapes with symbolic tensors, nor for a custom `call_fn`)."""

    def _run_through_graph(self, inputs, operation_fn=lambda op: op, **kwargs):
        if kwargs.get("call_fn") is None and not any(
                isinstance(x, keras.KerasTensor) for x in tree.flatten(inputs)):
            steps = plan(self)
            if steps.first:
                inner = operation_fn

                def operation_fn(op):
                    pair = steps.first.get(id(op))
                    if pair is not None:
                        return _fused_first(inner(op), pair)
                    if id(op) in steps.second:
                        return _passed_on
                    return inner(op)
        return original(self, inputs, operation_fn, **kwargs)

    return _run_through_graph
