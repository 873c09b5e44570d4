"""`tf_ops.patch_keras()`: Keras models, built or loaded, run tf_ops's kernels.

One call replaces implementations, never classes (``tf_ops/python/patch/table.py``
lists each): the ``call`` of Keras's Dense, BatchNormalization, LayerNormalization,
RMSNormalization and Softmax layers, the TensorFlow backend's activation, softmax,
attention and sparse cross-entropy functions, the graph runner of functional models
(to fuse an activation layer into the batch norm or Dense before it), and, when
keras-hub is importable, its RMS norm layers, its rotary embedding's ``call``, and its
``CausalLM``'s training step (the head and its loss without the logits:
``patch/causal_lm.py``). Models keep their classes, configs,
weights and files: a model saved while patched is a stock Keras file, and a stock file
loaded while patched runs fused. Where the ops do not compute the same thing (other
dtypes, arguments they do not take), Keras's own code runs.

``only=``/``exclude=`` select families (`FAMILIES`); the returned `KerasPatch` undoes
it (``.undo()``, or as a context manager), says what it did (``.report()``,
``report=True`` prints it) and, for a model, which layers run fused (``.summary(model)``,
or `tf_ops.patch_summary`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Iterable

import keras

from tf_ops.python.patch import activations, keras_hub, state
from tf_ops.python.patch.entry import FAMILIES, Entry
from tf_ops.python.patch.report import EntryStatus, ModelSummary, PatchReport, summarize
from tf_ops.python.patch.table import ENTRIES

_unavailable: dict[str, str] = {}  # package -> why it is not importable


def _available(entry: Entry) -> bool:
    """Whether the package `entry` patches is importable (keras-hub: imported here, so
    that models built after the call use the patched layers too)."""
    package = entry.requires
    if package not in _unavailable and package != "keras":
        try:
            importlib.import_module(package)
        except Exception as error:  # noqa: BLE001  (any failure: the entry is left)
            _unavailable[package] = f"{type(error).__name__}: {error}"
        else:
            _unavailable[package] = ""
            if package == "keras_hub":
                _register_keras_hub_aliases()
    return not _unavailable.get(package)


def _register_keras_hub_aliases() -> None:
    """keras-hub's functions that are tf_ops activations (`keras_hub.ALIASES`), for the
    activation and dense families, whichever families are patched."""
    for target, alias in keras_hub.ALIASES.items():
        try:
            owner, name = state.resolve_target(target)
        except (ImportError, AttributeError):  # not in this keras-hub
            continue
        activations.ALIASES[getattr(owner, name)] = alias


def _families(only: Iterable[str] | None, exclude: Iterable[str]) -> tuple[str, ...]:
    chosen = list(FAMILIES) if only is None else ([only] if isinstance(only, str) else list(only))
    excluded = [exclude] if isinstance(exclude, str) else list(exclude)
    unknown = sorted(set(chosen + excluded) - set(FAMILIES))
    if unknown:
        raise ValueError(f"patch_keras: unknown families {unknown}; the families are "
                         f"{sorted(FAMILIES)}")
    return tuple(f for f in FAMILIES if f in chosen and f not in excluded)


class KerasPatch:
    """The handle `patch_keras()` returns: patched until `undo()` (or the end of its
    ``with`` block).

    Example:
      >>> with tf_ops.patch_keras(only=("norm",)) as patch:
      ...     patch.families
      ('norm',)
    """

    def __init__(self, families: tuple[str, ...]):
        self.families = families
        self._active = True
        # keras-hub's functions may be in models already built; once is enough (patch_keras
        # may be entered at every step).
        if "keras_hub" in sys.modules and not activations.ALIASES:
            _register_keras_hub_aliases()
        state.change(families, +1, ENTRIES, _available)

    @property
    def active(self) -> bool:
        return self._active

    def undo(self) -> None:
        """Puts back what this call replaced (what another active patch still needs
        stays). Calling it again does nothing."""
        if self._active:
            self._active = False
            state.change(self.families, -1, ENTRIES, _available)

    def __enter__(self) -> "KerasPatch":
        return self

    def __exit__(self, *exc) -> None:
        self.undo()

    def report(self) -> PatchReport:
        """Every entry of the patch table, patched or left, and why."""
        return report()

    def summary(self, model: keras.Model) -> ModelSummary:
        """Which layers of `model` run tf_ops kernels, and which are left, and why."""
        return patch_summary(model)

    def __repr__(self) -> str:
        return (f"<tf_ops.patch_keras {'active' if self._active else 'undone'}: "
                f"{', '.join(self.families)}>")


def patch_keras(*, only: Iterable[str] | None = None, exclude: Iterable[str] = (),
                report: bool = False) -> KerasPatch:
    """Makes Keras models, built or loaded, run tf_ops's kernels wherever tf_ops has
    the op; returns a `KerasPatch` that undoes it (also a context manager).

    Args:
      only: the families to patch (default: all): ``"activation"``, ``"dense"``
        (bias + activation), ``"batch_norm"`` (with the activation after it),
        ``"norm"`` (layer and RMS norms), ``"softmax"`` (softmax layer and
        activation), ``"attention"`` (flash attention: Keras's and keras-hub's),
        ``"loss"`` (sparse cross-entropy), ``"rotary"``, ``"lm_head"``,
        ``"optimizer"`` (Adam's update in one fused loop).
      exclude: families not to patch.
      report: print what was patched and what was left, and why.

    Returns:
      The handle: ``.undo()``, ``.report()``, ``.summary(model)``.

    Example:
      >>> model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="gelu")])
      >>> with tf_ops.patch_keras():
      ...     y = model(np.ones((2, 8), "float32"))   # bias + gelu: one TfOps>BiasGelu op
      >>> y.shape
      TensorShape([2, 4])
    """
    patch = KerasPatch(_families(only, exclude))
    if report:
        print(patch.report())
    return patch


def report() -> PatchReport:
    """The patch table now: each entry patched (what runs instead) or left (why)."""
    rows = []
    for entry in ENTRIES:
        if state.installed(entry.target) is not None:
            rows.append(EntryStatus(entry, True, entry.does))
        elif entry.pending:
            rows.append(EntryStatus(entry, False, entry.pending))
        elif not any(state.active(f) for f in entry.families):
            rows.append(EntryStatus(entry, False, "its family is not selected"))
        else:
            why = _unavailable.get(entry.requires) or "not importable"
            rows.append(EntryStatus(entry, False, f"{entry.requires} is not importable ({why})"))
    return PatchReport(state.active_families(), tuple(rows))


def patch_summary(model: keras.Model) -> ModelSummary:
    """Which layers of `model` run tf_ops kernels under the active `patch_keras()`, and
    which run Keras's own code, and why; when no patch is active, what ``patch_keras()``
    would do.

    Example:
      >>> model = keras.Sequential([keras.Input((4,)), keras.layers.LayerNormalization()])
      >>> print(tf_ops.patch_summary(model).fused[0].detail)
      fused layer norm
    """
    if state.active_families():
        return summarize(model, ENTRIES)
    with patch_keras():
        return summarize(model, ENTRIES, note=" -- not active now: what it would do")


__all__ = ["FAMILIES", "KerasPatch", "ModelSummary", "PatchReport", "patch_keras",
           "patch_summary"]
