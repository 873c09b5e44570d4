"""The op families and what each contributes, read from each family's manifest.

An op family is its folders (``tf_ops/cc/<f>/``, ``tf_ops/cu/<f>/``,
``tf_ops/python/<f>/``) and the line in CMakeLists.txt that builds them
(``tf_ops_family(<f> ...)``). Its ``tf_ops/python/<f>/manifest.py`` defines
``FAMILY = Family(...)``: what it adds to the package. Everything that used to keep a
hand-written list of families walks `families()` instead: ``tf_ops/__init__.py`` (the
functions, the gradient modules), ``tf_ops/layers.py`` (the layers), the stub generator
(through those two modules' ``__all__``), the bench coverage test and the manifest test
(``tests/package/test_manifest.py``, which fails when a manifest and its family's code
disagree: an op the manifest does not claim, a function or layer it names that does not
exist, a gradient not registered, a bench, patch or GPU self-test name that is unknown).

The list of families is derived from the folders: every ``tf_ops/python/<f>/`` with a
``manifest.py``. Adding a family is adding its folders (its manifest among them) and its
CMake line.

References are strings (``"module:attribute"``, or ``"module"`` for a module itself), so
reading a manifest imports nothing of the family: the family's modules import each other
freely and are imported only when the package is (`load`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pathlib
from typing import Any

_PYTHON = pathlib.Path(__file__).resolve().parent.parent  # tf_ops/python


@dataclasses.dataclass(frozen=True)
class Family:
    """What one op family contributes.

    Attributes:
      name: the folder name (``"norm"``: ``tf_ops/{cc,cu,python}/norm/``).
      ops: its op names without the ``TfOps>`` namespace, or a reference to a tuple of
        them (``"tf_ops.python.norm.functions:OP_NAMES"``).
      functions: references to what it adds to ``tf_ops``: a dict (name -> object) is
        merged in; any other object is added under its last name; a module under its own.
      layers: references to dicts (name -> class) merged into ``tf_ops.layers``.
      gradients: the module that registers its ops' gradients (imported with the package).
      bench: the ``tf_ops.bench`` module that times it (its ``BENCHED_OPS`` are the forward
        functions it covers), or None when ``tf_ops.bench``'s table does (`bench_cases`).
      patch: the `tf_ops.patch_keras(only=...)` families it contributes to.
      gpu_selftest: the names of its families in the CUDA self-test's SUMMARY lines
        (``tests/gpu/``); empty when it has no CUDA kernels of its own.
      docs: the heading of its section in ``docs/architecture.md``.

    Example (``tf_ops/python/rotary/manifest.py``):
      >>> FAMILY = Family(  # doctest: +SKIP
      ...     name="rotary", ops="tf_ops.python.rotary.functions:OP_NAMES",
      ...     functions=("tf_ops.python.rotary.functions:FUNCTIONS",),
      ...     layers=("tf_ops.python.rotary.layers:LAYERS",),
      ...     gradients="tf_ops.python.rotary.gradients", bench="tf_ops.bench.rotary",
      ...     patch=("rotary",), gpu_selftest=("rotary",), docs="Rotary embedding")
    """

    name: str
    ops: str | tuple[str, ...]
    functions: tuple[str, ...]
    gradients: str
    docs: str
    layers: tuple[str, ...] = ()
    bench: str | None = None
    bench_cases: bool = False
    patch: tuple[str, ...] = ()
    gpu_selftest: tuple[str, ...] = ()

    def op_names(self) -> tuple[str, ...]:
        """Its op names, without the namespace."""
        return tuple(resolve(self.ops)) if isinstance(self.ops, str) else self.ops

    def exports(self) -> dict[str, Any]:
        """What it adds to ``tf_ops``: name -> object."""
        return _merged(self.functions)

    def layer_classes(self) -> dict[str, type]:
        """What it adds to ``tf_ops.layers``: name -> class."""
        return _merged(self.layers)


def resolve(reference: str) -> Any:
    """The object a reference names: ``"pkg.module:attr"``, or ``"pkg.module"`` itself."""
    module, _, attr = reference.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attr) if attr else found


def _merged(references: tuple[str, ...]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for reference in references:
        found = resolve(reference)
        if isinstance(found, dict):
            additions = found
        else:
            module, _, attr = reference.partition(":")
            additions = {attr or module.rpartition(".")[2]: found}
        clash = set(additions) & set(result)
        if clash:
            raise ValueError(f"{reference} adds {sorted(clash)} again")
        result.update(additions)
    return result


def family_names() -> tuple[str, ...]:
    """The families, from the folders: each ``tf_ops/python/<f>/`` with a manifest.py."""
    return tuple(sorted(p.parent.name for p in _PYTHON.glob("*/manifest.py")))


@functools.lru_cache(maxsize=None)
def families() -> tuple[Family, ...]:
    """Every family's manifest, in folder-name order (reads no family code)."""
    result = []
    for name in family_names():
        family = importlib.import_module(f"tf_ops.python.{name}.manifest").FAMILY
        if family.name != name:
            raise ValueError(f"tf_ops/python/{name}/manifest.py names itself {family.name!r}")
        result.append(family)
    return tuple(result)


def load_exports() -> dict[str, Any]:
    """Imports every family's functions and gradients and returns what the families add
    to ``tf_ops`` (name -> object); ValueError when two add one name."""
    return _collect(lambda family: family.exports(), gradients=True)


def load_layers() -> dict[str, type]:
    """Imports every family's layers and returns what they add to ``tf_ops.layers``."""
    return _collect(lambda family: family.layer_classes(), gradients=False)


def _collect(contribution, gradients: bool) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for family in families():
        found = contribution(family)
        clash = set(found) & set(result)
        if clash:
            raise ValueError(f"family {family.name} adds {sorted(clash)} again")
        result.update(found)
        if gradients:
            importlib.import_module(family.gradients)
    return result
