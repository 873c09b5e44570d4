"""The TensorFlow requirement of a tf_ops build: what the library is compiled against.

A scikit-build-core dynamic-metadata provider (pyproject.toml, ``[[tool.dynamic-metadata]]``).
The op library binds to TensorFlow internals with no stable ABI, so the package requires exactly
the TensorFlow distribution and version it was built against, found in the build environment:
``tensorflow-cpu==2.20.0`` when built next to tensorflow-cpu 2.20.0. With
``pip install --no-build-isolation .`` that requirement is already met, so pip never changes the
user's TensorFlow, nor pulls ``tensorflow`` in beside ``tensorflow-cpu``; a later change of
TensorFlow makes ``pip`` report the conflict (and ``import tf_ops`` refuse the library).

Build isolation (``pip install .``): pip builds in a temporary environment without the user's
packages. ``get_requires_for_dynamic_metadata`` then asks the interpreter running the build, with
pip's isolation switched off (``python -I``), which TensorFlow it has, and has pip install that
same distribution and version into the build environment: the library matches the TensorFlow the
user runs, and the user's stays untouched. Where the interpreter has none (a fresh environment,
or a frontend that builds in a venv of its own such as ``python -m build``), the build gets the
newest ``tensorflow``, and the package then requires exactly that. (The hook is not told whether
it serves an sdist or a wheel, so an isolated sdist build installs a TensorFlow it does not use:
an sdist carries no pin.)

Run as a script, it prints the requirement for the TensorFlow of the running interpreter (or
nothing): ``python tools/tensorflow_requirement.py`` -> ``tensorflow==2.21.0``.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

# The import package every TensorFlow distribution (tensorflow, tensorflow-cpu, tf-nightly, ...)
# installs; the distribution that owns its __init__.py is the one the library is built against.
TF_MODULE_FILE = "tensorflow/__init__.py"
# What an isolated build with no TensorFlow of the user's to match gets.
DEFAULT_BUILD_REQUIREMENT = "tensorflow"

_build_state = "wheel"


def installed_tensorflow(path: Iterable[str] | None = None) -> tuple[str, str] | None:
    """(distribution name, version) of the TensorFlow installed on `path` (default sys.path),
    or None when there is none.

    Raises:
      RuntimeError: several distributions install the `tensorflow` package (e.g. tensorflow
        and tensorflow-cpu, which overwrite each other's files).

    Example:
      >>> installed_tensorflow()  # doctest: +SKIP
      ('tensorflow-cpu', '2.20.0')
    """
    found = {}
    search = {} if path is None else {"path": list(path)}
    for dist in importlib.metadata.distributions(**search):
        name = dist.metadata["Name"]
        if name and any(str(f) == TF_MODULE_FILE for f in dist.files or ()):
            # Normalized as pip writes names (PEP 503); the first on the path is the one imported.
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    if len(found) > 1:
        raise RuntimeError(
            "tf_ops: several TensorFlow distributions are installed "
            f"({', '.join(f'{n} {v}' for n, v in sorted(found.items()))}); they overwrite each "
            "other's files. Uninstall all but one (pip uninstall ...), then build again."
        )
    return next(iter(found.items()), None)


def requirement(path: Iterable[str] | None = None) -> str | None:
    """The pinned requirement for the TensorFlow on `path`, e.g. 'tensorflow-cpu==2.20.0'."""
    found = installed_tensorflow(path)
    return None if found is None else f"{found[0]}=={found[1]}"


def _outer_requirement() -> str | None:
    """The requirement for the TensorFlow of this interpreter's own environment, outside any
    build isolation (`-I` ignores pip's PYTHONPATH and PYTHONNOUSERSITE)."""
    try:
        result = subprocess.run(
            [sys.executable, "-I", str(Path(__file__).resolve())],
            capture_output=True, text=True, timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:  # e.g. two TensorFlow distributions there: say so, build nothing
        raise RuntimeError(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else
                           f"{sys.executable} -I {__file__} exited with {result.returncode}")
    return result.stdout.strip() or None


def build_state(state: str) -> None:
    """Hook: scikit-build-core says what it builds ('sdist', 'wheel', 'metadata_wheel', ...)."""
    global _build_state
    _build_state = state


def dynamic_wheel(settings: Mapping[str, Any]) -> dict[str, bool]:
    """Hook: an sdist's dependencies are not final (each wheel pins the TensorFlow it found)."""
    return {"dependencies": True}


def get_requires_for_dynamic_metadata(settings: Mapping[str, Any]) -> list[str]:
    """Hook: what the build environment needs. Nothing when TensorFlow is importable here (no
    isolation); else the user's own TensorFlow (see the module docstring)."""
    if installed_tensorflow() is not None:
        return []
    return [_outer_requirement() or DEFAULT_BUILD_REQUIREMENT]


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    """Hook: `dependencies` = the table's own `dependencies` plus the pinned TensorFlow.

    An sdist carries no pin (its dependencies are marked Dynamic): it is built for any TensorFlow.
    """
    dependencies = list(settings.get("dependencies", []))
    if _build_state == "sdist":
        return {"dependencies": dependencies}
    pinned = requirement()
    if pinned is None:
        raise RuntimeError(
            "tf_ops: no TensorFlow to build against. tf_ops is compiled against the TensorFlow it "
            "will run with: install tensorflow or tensorflow-cpu first, then "
            "`pip install --no-build-isolation .`."
        )
    return {"dependencies": [*dependencies, pinned]}


if __name__ == "__main__":
    print(requirement() or "")
