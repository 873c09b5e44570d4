"""keras-hub's norm layers found by what they compute, not by a list of names.

keras-hub gives most models a norm class of its own (Gemma 3's ``RMSNormalization``,
T5's ``T5LayerNorm``, RoFormer's ``RoformerNorm``, ...), each a few lines of
``keras.ops``: an RMS norm or a layer norm over the last axis, with ``scale`` or
``1 + scale``, computed in float32 or in the input's dtype. `discover` finds the
classes (a keras-hub layer whose name says norm and that defines ``call``); their
``call`` becomes `make_call`'s, which runs one ``TfOps>RmsNorm`` or ``TfOps>LayerNorm``
where `plan` has shown that the op computes what the class's own ``call`` computes,
and the class's own ``call`` otherwise.

A class whose instances hold Keras layers and no weights of their own is a block named
for the norm inside it, not a norm (`is_container`): its call runs unchanged, and its
layers are patched and reported on their own.

`plan` decides by running the class: a twin of the layer (its arguments, float32)
gets random weights, and its own ``call`` on random inputs, some of them small
enough for epsilon to matter, is compared with each candidate (RMS or layer norm;
scale, ``1 + scale`` or none; a bias or not; the epsilon the layer holds, or else a
small constant written in its call, as Flux's ``RMSNormalization`` has). Only an
exact match (to float32 rounding) is fused, so a class that computes anything else
(another axis, a gate, a learnt epsilon) keeps its own code, and the summary says
why (`reason_left`). The decision is made once per class and configuration, eagerly.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import sys
import threading
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf
from keras.src.backend import AutocastScope

from tf_ops.python.norm import functions as norm
from tf_ops.python.patch.keras_layers import floating

TARGET = "keras_hub.src:norm layers (found by what they compute)"
_NAME = re.compile(r"norm", re.IGNORECASE)
_EPSILONS = ("epsilon", "eps", "variance_epsilon", "layer_norm_epsilon")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one norm class computes, in tf_ops's terms."""

    centered: bool  # layer norm (else RMS norm)
    offset: float  # the scale is multiplied as offset + scale
    scale: int | None  # index in layer.weights of the scale, or None (no scale)
    bias: int | None  # index of the bias (layer norm), or None
    epsilon: str | float  # the attribute holding epsilon, or the constant in its call
    output: str  # the output's dtype: "compute" (the layer's), "input" (x's), "float32"

    def describe(self) -> str:
        op = "TfOps>LayerNorm" if self.centered else "TfOps>RmsNorm"
        return op + (" (with 1 + scale)" if self.offset else "")


_lock = threading.Lock()
_plans: dict[tuple, Plan | str] = {}  # (class, config, rank, size) -> Plan or why not


_found: dict[tuple, tuple[str, ...]] = {}


def discover(explicit: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The ``call`` targets of keras-hub's norm layer classes (imported ones: keras-hub
    imports all its models), less `explicit` (patched by entries of their own).

    Walking every Layer subclass takes milliseconds, and ``patch_keras()`` may be
    entered at every step: the answer is kept until a module is imported (new classes
    come with new modules)."""
    key = (len(sys.modules), explicit)
    if key not in _found:
        _found.clear()
        _found[key] = _discover(explicit)
    return _found[key]


def _discover(explicit: tuple[str, ...]) -> tuple[str, ...]:
    found, seen, stack = [], set(), [keras.layers.Layer]
    while stack:
        for cls in stack.pop().__subclasses__():
            if cls in seen:
                continue
            seen.add(cls)
            stack.append(cls)
            target = f"{cls.__module__}:{cls.__qualname__}.call"
            if (cls.__module__.startswith("keras_hub.") and _NAME.search(cls.__name__)
                    and "call" in vars(cls) and "<locals>" not in cls.__qualname__
                    and target not in explicit):
                found.append(target)
    return tuple(sorted(found))


def _epsilon(layer) -> tuple[str, float] | None:
    for name in _EPSILONS:
        value = getattr(layer, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(
                value) and value >= 0:
            return name, float(value)
    return None


def _literals(original: Callable) -> list[float]:
    """The small positive constants written in `original`'s source (Flux's
    ``RMSNormalization`` adds ``1e-6`` in its call): the epsilons to try where the layer
    holds none. Each is only a candidate: `_make_plan` keeps one only if running the
    class shows it."""
    import ast
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(original)))
    except (OSError, TypeError, SyntaxError):
        return []
    return sorted({float(n.value) for n in ast.walk(tree)
                   if isinstance(n, ast.Constant) and type(n.value) in (int, float)
                   and 0 < n.value < 1e-2})


def _reference(x, centered, epsilon, scale, bias):
    if centered:
        x = x - x.mean(-1, keepdims=True)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + epsilon)
    if scale is not None:
        y = y * scale
    return y if bias is None else y + bias


def _arguments(layer) -> dict[str, Any]:
    """The layer's constructor arguments, from its config or, where it has none (a
    class given arguments Keras cannot serialise), from its attributes of the same
    names (``epsilon``, ``head_dim``, ...)."""
    try:
        config = layer.get_config()
    except Exception:  # noqa: BLE001
        parameters = inspect.signature(type(layer).__init__).parameters
        config = {p: getattr(layer, p) for p in list(parameters)[1:]
                  if p not in ("dtype", "name", "kwargs") and hasattr(layer, p)}
    # less Layer's own keys (trainable) a constructor without **kwargs cannot take
    return {k: v for k, v in config.items()
            if k not in ("dtype", "name") and _takes(type(layer), k)}


def _takes(cls: type, name: str) -> bool:
    """Whether `cls`'s constructor takes the keyword `name` (by name or **kwargs)."""
    parameters = inspect.signature(cls.__init__).parameters
    return name in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())


def _twin(layer, dtype: str):
    cls = type(layer)
    if _takes(cls, "dtype"):
        return cls(**_arguments(layer), dtype=dtype)
    twin = cls(**_arguments(layer))  # a class without a dtype argument (Flux's RMS norm)
    twin.dtype_policy = dtype
    return twin


def _make_plan(layer, original: Callable, rank: int, size: int) -> Plan | str:
    found = _epsilon(layer)
    candidates = ([found] if found is not None
                  else [(value, value) for value in _literals(original)])
    if not candidates:
        return ("no finite epsilon >= 0 in an attribute the patch knows, nor a constant "
                "in its call")
    why = ""
    for name, epsilon in candidates:
        why = _match(layer, original, rank, size, name, epsilon)
        if isinstance(why, Plan):
            return why
    return why


def _match(layer, original: Callable, rank: int, size: int, name: str | float,
           epsilon: float) -> Plan | str:
    """The `Plan` of `layer` with `epsilon` (held as `name`), or why it does not match."""
    try:
        twin = _twin(layer, "float32")
        shape = (2,) * (rank - 1) + (size,)
        twin.build(shape)
    except Exception as error:  # noqa: BLE001  (any failure: the class's own call runs)
        return f"could not be rebuilt from its config to check it ({type(error).__name__})"
    rng = np.random.default_rng(0)
    vectors = [i for i, w in enumerate(twin.weights) if tuple(w.shape) == (size,)]
    if len(twin.weights) != len(vectors) or len(vectors) > 2:
        return "its weights are not one scale (and bias) over the last axis"
    values = [rng.uniform(0.5, 1.5, size) for _ in vectors]
    for w, v in zip((twin.weights[i] for i in vectors), values):
        w.assign(v.astype(w.dtype))
    # Two inputs: one of mean square about 1 (and a mean: layer or RMS norm), one of
    # mean square about epsilon (so that epsilon shows).
    x = rng.normal(0.3, 1.0, shape)
    inputs = [x, x * np.sqrt(max(epsilon, 1e-30))]
    try:
        outputs = [np.asarray(original(twin, tf.constant(v, tf.float32)), np.float64)
                   for v in inputs]
    except Exception as error:  # noqa: BLE001
        return f"its call does not take one tensor ({type(error).__name__})"
    roles = [(None, None)]
    if len(vectors) >= 1:
        roles = [(0, None)] if len(vectors) == 1 else [(0, 1), (1, 0)]
    for centered in (False, True):
        for offset in (0.0, 1.0):
            for s, b in roles:
                if b is not None and not centered:
                    continue
                scale = None if s is None else offset + values[s]
                bias = None if b is None else values[b]
                if s is None and offset:
                    continue
                if all(out.shape == v.shape and np.allclose(
                        out, _reference(v, centered, epsilon, scale, bias),
                        rtol=1e-4, atol=1e-5 * float(np.max(np.abs(out))))
                       for v, out in zip(inputs, outputs)):
                    return Plan(centered, offset, None if s is None else vectors[s],
                                None if b is None else vectors[b], name,
                                _output_rule(layer, original, shape))
    return ("computes something other than an RMS or layer norm over the last axis "
            "(checked by running it)")


def _output_rule(layer, original: Callable, shape) -> str:
    """Whether the class returns its compute dtype, the input's, or float32 always (a
    call that casts to float first): asked of a bfloat16-computing twin given a float32
    input, then a bfloat16 one."""
    try:
        twin = _twin(layer, "mixed_bfloat16")
        twin.build(shape)
        y = original(twin, tf.zeros(shape, tf.float32) + 1.0)
        if tf.as_dtype(y.dtype) != tf.float32:
            return "compute"
        y = original(twin, tf.zeros(shape, tf.bfloat16) + 1.0)
    except Exception:  # noqa: BLE001
        return "compute"
    return "float32" if tf.as_dtype(y.dtype) == tf.float32 else "input"


def plan(layer, original: Callable, rank: int = 3, size: int | None = None) -> Plan | str:
    """The `Plan` of `layer` (whose class's own call is `original`) for inputs of
    `rank` and last-axis `size`, or why the op does not compute what it does."""
    if size is None:  # the summary's question, before a call: its weights' size (some
        # are built for a shape other than they are called with: Qwen's per-head norms),
        # else the shape it was built for
        shapes = list((getattr(layer, "_build_shapes_dict", None) or {}).values())
        shape = shapes[0] if len(shapes) == 1 else None
        if shape is not None and len(shape):
            rank = len(shape)
        sizes = {int(w.shape[0]) for w in layer.weights if len(w.shape) == 1}
        if len(sizes) == 1:
            size = sizes.pop()
        elif shape is not None and len(shape) and shape[-1] is not None:
            size = int(shape[-1])
        else:
            return "its size is not known before it runs"
    config = json.dumps(_arguments(layer), sort_keys=True, default=repr)
    key = (type(layer), config, rank, size)
    with _lock:
        if key not in _plans:
            # Eagerly, and outside the calling layer's autocast scope: under a mixed
            # policy that scope would round the twin's float32 weights to bfloat16.
            with tf.init_scope(), AutocastScope(None):
                _plans[key] = _make_plan(layer, original, rank, size)
        return _plans[key]


def make_call(original: Callable) -> Callable:
    """The fused ``call`` of a keras-hub norm class whose own ``call`` is `original`."""

    def call(self, *args, **kwargs):
        if len(args) != 1 or kwargs or not floating(args[0]) or is_container(self):
            return original(self, *args, **kwargs)
        x = args[0]
        shape = tf.TensorShape(x.shape)
        if shape.rank is None or shape.rank < 1 or shape[-1] is None:
            return original(self, x)
        found = plan(self, original, shape.rank, int(shape[-1]))
        if not isinstance(found, Plan):
            return original(self, x)
        epsilon = float(found.epsilon if not isinstance(found.epsilon, str)
                        else getattr(self, found.epsilon))
        scale = None if found.scale is None else keras.ops.cast(self.weights[found.scale],
                                                                 "float32")
        if scale is not None and found.offset:
            scale = found.offset + scale
        if found.centered:
            bias = None if found.bias is None else keras.ops.cast(self.weights[found.bias],
                                                                   "float32")
            y = norm.layer_norm(x, scale, bias, axis=-1, epsilon=epsilon)
        else:
            y = norm.rms_norm(x, scale, axis=-1, epsilon=epsilon)
        return keras.ops.cast(y, {"compute": self.compute_dtype, "input": x.dtype,
                                  "float32": "float32"}[found.output])

    return call


def is_container(layer) -> bool:
    """Whether `layer` holds Keras layers and no weights of its own: a block named for
    the norm inside it (D-FINE's ``DFineConvNormLayer``: convolution, batch norm,
    activation), not a norm. Its layers are patched and reported on their own."""
    own = getattr(layer, "_trainable_variables", []) + getattr(
        layer, "_non_trainable_variables", [])
    return not own and any(True for _ in layer._flatten_layers(include_self=False,
                                                               recursive=False))


def reason_left(layer) -> str | None:
    """Why `layer` (of a discovered class) runs its own call, or None."""
    original = getattr(type(layer).call, "__wrapped_original__", None)
    if original is None or is_container(layer):
        return None
    found = plan(layer, original)
    return None if isinstance(found, Plan) else found


def describe(layer) -> str:
    original = getattr(type(layer).call, "__wrapped_original__", None)
    found = None if original is None else plan(layer, original)
    return found.describe() if isinstance(found, Plan) else "fused norm"


def wrap(make: Callable[[Callable], Callable]) -> Callable[[Callable], Callable]:
    """`make`, with the original kept on the replacement (for `reason_left`)."""

    def factory(original: Callable) -> Callable:
        replaced = make(original)
        replaced.__wrapped_original__ = original
        return replaced

    return factory


def entry_kwargs(explicit: tuple[str, ...]) -> dict[str, Any]:
    return {"discover": lambda: discover(explicit), "replacement": wrap(make_call)}
