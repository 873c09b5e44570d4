"""What `tf_ops.patch_keras()` did: the table's entries patched and left, and why
(`PatchReport`); and, for one model, which layers run fused and which run Keras's own
code, and why (`ModelSummary`)."""

from __future__ import annotations

import collections
import dataclasses

import keras

from tf_ops.python.patch import (activations, attention, causal_lm, convolution, functional,
                                 keras_backend, keras_hub, keras_hub_norms, keras_layers,
                                 optimizers, state, xla_cpu)
from tf_ops.python.patch.entry import Entry


@dataclasses.dataclass(frozen=True)
class EntryStatus:
    entry: Entry
    patched: bool
    why: str  # what runs instead, or why it is left


@dataclasses.dataclass(frozen=True)
class PatchReport:
    """Every entry of the patch table: patched (and what runs instead) or left (why).

    Example:
      >>> with tf_ops.patch_keras(only=("norm",)) as patch:
      ...     print(patch.report().patched_count() > 0)
      True
    """

    families: tuple[str, ...]
    rows: tuple[EntryStatus, ...]

    def patched_count(self) -> int:
        return sum(r.patched for r in self.rows)

    def __str__(self) -> str:
        left = len(self.rows) - self.patched_count()
        lines = [f"tf_ops.patch_keras(): {self.patched_count()} patched, {left} left "
                 f"(families: {', '.join(self.families) or 'none'})"]
        width = max(len(r.entry.name) for r in self.rows)
        for r in sorted(self.rows, key=lambda r: not r.patched):
            lines.append(f"  {'patched' if r.patched else 'left':<8} {r.entry.name:<{width}}  "
                         f"{'/'.join(r.entry.families):<17} {r.why}")
        left_to_xla = [f for f in self.families if f in xla_cpu.LEFT]
        if left_to_xla:
            lines.append(f"  under jit_compile on the CPU: Keras's own code for "
                         f"{', '.join(left_to_xla)} (XLA fuses it at least as fast)")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Row:
    layers: str  # the layer's name (a pair: both names)
    kind: str  # class names
    detail: str  # what runs, or why it is left


@dataclasses.dataclass(frozen=True)
class ModelSummary:
    """One model's layers under the active patch: those that run tf_ops kernels, and
    those left to Keras, with why (layers no tf_ops op covers: counted per class)."""

    model: str
    families: tuple[str, ...]
    fused: tuple[Row, ...]
    left: tuple[Row, ...]
    no_op: tuple[tuple[str, int], ...]  # (class name, count): layers tf_ops has no op for
    note: str = ""

    def __str__(self) -> str:
        lines = [f"model {self.model!r} under tf_ops.patch_keras() (families: "
                 f"{', '.join(self.families)}){self.note}"]
        width = max([len(r.layers) for r in self.fused + self.left] + [10])
        lines.append(f"runs tf_ops kernels ({len(self.fused)}):")
        lines += [f"  {r.layers:<{width}}  {r.kind}: {r.detail}" for r in self.fused]
        lines.append(f"left to Keras ({len(self.left) + sum(n for _, n in self.no_op)}):")
        lines += [f"  {r.layers:<{width}}  {r.kind}: {r.detail}" for r in self.left]
        if self.no_op:
            counts = ", ".join(f"{name} x{n}" for name, n in self.no_op)
            lines.append(f"  tf_ops has no op for: {counts}")
        return "\n".join(lines)


def _patched_by(layer: keras.layers.Layer):
    """The patch table entry whose replacement `layer`'s class runs as its call."""
    target = getattr(type(layer).call, "__tf_ops_patch__", None)
    return target


def _pending(layer: keras.layers.Layer, entries: tuple[Entry, ...]) -> Entry | None:
    names = {f"{c.__module__}:{c.__qualname__}.call" for c in type(layer).__mro__}
    return next((e for e in entries if e.replacement is None and e.target in names), None)


_REASONS = (
    (keras.layers.Dense, keras_layers.dense_reason_left, "bias + {act} in one op"),
    (keras.layers.BatchNormalization, keras_layers.batch_norm_reason_left,
     "fused batch norm (no activation layer after it to fuse)"),
    (keras.layers.LayerNormalization, keras_layers.layer_norm_reason_left, "fused layer norm"),
    (keras.layers.RMSNormalization, keras_layers.rms_norm_reason_left, "fused RMS norm"),
    (keras.layers.Softmax, keras_layers.softmax_reason_left, "fused softmax (masks)"),
)


# Patched entries whose layers may still run the original, by target: why, or None.
_TARGET_REASONS = {keras_hub.ROTARY_CALL: keras_hub.rotary_reason_left,
                   keras_layers.EINSUM_DENSE_CALL: keras_layers.einsum_dense_reason_left,
                   keras_hub_norms.TARGET: keras_hub_norms.reason_left}
# Patched entries whose fused layers say what runs by themselves: target -> detail.
_TARGET_DETAILS = {keras_hub_norms.TARGET: keras_hub_norms.describe}


def _dense_softmax(layer) -> str | None:
    """A Dense whose activation is softmax: its bias and activation are not one op, but
    the softmax runs tf_ops's (the backend's softmax is patched)."""
    if getattr(layer.activation, "__name__", None) == "softmax" and state.installed(
            f"{keras_backend.NN}:softmax") is not None:
        return "matmul + bias (Keras's), then TfOps>Softmax"
    return None


def _describe(layer, entries) -> tuple[str, str] | None:
    """("fused" | "left", detail) for one unpaired layer, or None for a layer no tf_ops
    op covers."""
    if type(layer).__module__.startswith("tf_ops."):
        return "fused", "a tf_ops layer"
    # Activation.call's entry runs only aliases (activations.ALIASES): an activation
    # layer is described by what it computes, below.
    if _patched_by(layer) not in (None, activations.ACTIVATION_CALL):
        for cls, reason_left, does in _REASONS:
            if isinstance(layer, cls):
                why = reason_left(layer)
                if why is not None and cls is keras.layers.Dense and _dense_softmax(layer):
                    return "fused", _dense_softmax(layer)
                if why is not None:
                    return "left", why
                act = getattr(layer, "activation", None)
                spec = activations.of_function(act) if callable(act) else None
                return "fused", does.format(act=activations.display_name(spec))
        target = _patched_by(layer)
        if target == functional.CONV_CALL and layer.groups > 1:
            if convolution.runs_depthwise(layer):
                return "fused", ("TensorFlow's depthwise convolution (one group per channel; "
                                 "Keras's: an XLA program)")
            return "left", (convolution.depthwise_reason_left(layer)
                            or "the conv family is not selected")
        if target in (functional.CONV_CALL, functional.DEPTHWISE_CONV_CALL,
                      functional.CUSTOM_SCALE_CALL):
            return None  # a convolution with no batch norm to fold, an add with no
            # activation to fuse: Keras's own
        if target == keras_hub_norms.TARGET and keras_hub_norms.is_container(layer):
            return None  # a block of layers, each reported on its own
        why = _TARGET_REASONS[target](layer) if target in _TARGET_REASONS else None
        if why is not None:
            return "left", why
        if target in _TARGET_DETAILS:
            return "fused", _TARGET_DETAILS[target](layer)
        return "fused", next(e.does for e in _entries_by_target(entries, target))
    pending = _pending(layer, entries)
    if pending is not None:
        return "left", pending.pending
    for cls, _, _ in _REASONS:
        if isinstance(layer, cls):
            if any(state.active(f) for e in entries if e.target.endswith(
                    f"{cls.__name__}.call") for f in e.families):
                return "left", "its class overrides call"
            return "left", "its family is not selected"
    spec = activations.of_layer(layer)
    left_why = keras_backend.LEFT_TO_TENSORFLOW.get(activations.display_name(spec))
    if spec is not None and left_why is not None:
        return "left", left_why
    if spec is not None:
        if state.active("activation"):
            return "fused", f"tf_ops {activations.display_name(spec)}"
        return "left", "the activation family is not selected"
    if isinstance(layer, keras.layers.ReLU) and type(layer).call is keras.layers.ReLU.call:
        return "left", (f"ReLU(max_value={layer.max_value}, threshold={layer.threshold}): "
                        "tf_ops has a ReLU capped at 6 (relu6) but no other capped or "
                        "thresholded ReLU kernel (Keras's own code runs)")
    if isinstance(layer, keras.layers.Activation):
        name = getattr(layer.activation, "__name__", "?")
        if name == "softmax":
            return ("fused", "tf_ops.softmax") if state.active("softmax") else (
                "left", "the softmax family is not selected")
        return "left", f"tf_ops has no kernel for activation {name!r}"
    return attention.describe_layer(layer)


def _entries_by_target(entries, target):
    return [e for e in entries if e.target == target]


def summarize(model: keras.Model, entries: tuple[Entry, ...], note: str = "") -> ModelSummary:
    """The summary of `model` under what is patched now."""
    layers = list(model._flatten_layers(include_self=False, recursive=True))
    pairs, folds = [], []
    for graph in [model, *layers]:
        if hasattr(graph, "_nodes_by_depth") and state.installed(functional.RUN_THROUGH_GRAPH):
            found = functional.find_pairs(graph)
            pairs += found
            folds += functional.find_folds(graph, found)
    paired = {id(p.first): p for p in pairs}
    folded = {id(f.conv): f for f in folds}
    seconds = {id(p.second) for p in pairs}
    fused, left, no_op = [], [], collections.Counter()
    if getattr(type(model).train_step, "__tf_ops_patch__", None) == causal_lm.TRAIN_STEP:
        why = causal_lm.reason_left(model)
        row = Row(f"{model.name} (fit)", type(model).__name__, why or next(
            e.does for e in _entries_by_target(entries, causal_lm.TRAIN_STEP)))
        (left if why else fused).append(row)
    optimizer = getattr(model, "optimizer", None)
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's
    if getattr(getattr(type(optimizer), "update_step", None), "__tf_ops_patch__",
               None) == optimizers.ADAM_UPDATE_STEP:
        fused.append(Row(f"{model.name} (optimizer)", type(optimizer).__name__, next(
            e.does for e in _entries_by_target(entries, optimizers.ADAM_UPDATE_STEP))))
    for layer in layers:
        if id(layer) in seconds:
            continue
        fold = folded.get(id(layer))
        if fold is not None:
            act = activations.display_name(fold.activation)
            fused.append(Row(f"{layer.name} + {fold.batch_norm.name}",
                             f"{type(layer).__name__} + {type(fold.batch_norm).__name__}",
                             f"batch norm folded into the convolution with its moving "
                             f"statistics (then bias + {act} in one op)"))
            continue
        pair = paired.get(id(layer))
        if pair is not None:
            what = {"batch_norm": "batch norm", "dense": "bias", "activation": "add"}[
                pair.family]
            fused.append(Row(f"{layer.name} + {pair.second.name}",
                             f"{type(layer).__name__} + {type(pair.second).__name__}",
                             f"{what} + {activations.display_name(pair.activation)} in one op"))
            continue
        described = _describe(layer, entries)
        if described is None:
            if not isinstance(layer, keras.layers.InputLayer) and not list(
                    layer._flatten_layers(include_self=False, recursive=False)):
                no_op[type(layer).__name__] += 1  # containers: their layers are listed
            continue
        status, detail = described
        (fused if status == "fused" else left).append(Row(layer.name, type(layer).__name__,
                                                          detail))
    return ModelSummary(model.name, state.active_families(), tuple(fused), tuple(left),
                        tuple(no_op.most_common()), note)
