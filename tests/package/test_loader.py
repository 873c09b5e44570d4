"""The loader's errors, each in a doctored copy of the package in a temporary
directory, imported by a fresh Python process: a missing library, a library built
against another TensorFlow version (from its build info), one that fails to load
(an undefined symbol), a malformed build info, and a library without build info
(as Bazel builds it), which must still load. And the build info of this tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import tf_ops
from tf_ops.python.activation import functions as activations

PACKAGE = os.path.dirname(os.path.abspath(tf_ops.__file__))
REBUILD_COMMANDS = ("make build", "pip install --no-build-isolation")

# Imports tf_ops from each directory in argv in turn (a fresh module each time)
# and prints one JSON line per directory: how the import went.
_RUNNER = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    for case_dir in sys.argv[1:]:
        for name in [m for m in sys.modules if m == "tf_ops" or m.startswith("tf_ops.")]:
            del sys.modules[name]
        sys.path.insert(0, case_dir)
        try:
            import tf_ops
            from tf_ops.python.activation import functions as activations
            info = tf_ops.build_info()
            value = tf_ops.leaky_relu([-2.0], alpha=0.5).numpy().tolist()
            result = {"ok": True, "build_info": None if info is None else info.__dict__,
                      "value": value, "xla_lowered": sorted(activations.XLA_LOWERED),
                      "path": tf_ops.library_path()}
        except Exception as err:
            result = {"ok": False, "type": type(err).__name__, "message": str(err)}
        sys.path.remove(case_dir)
        print(json.dumps(result), flush=True)
    """
)


def _copy_package(root: str, *, library: str | None, build_info: str | dict | None) -> str:
    """A copy of the Python package under root/tf_ops, with the given library file
    (a path to copy, or None) and build info (JSON data, raw text, or None)."""
    dest = os.path.join(root, "tf_ops")
    shutil.copytree(
        PACKAGE, dest, ignore=shutil.ignore_patterns("cc", "cu", "__pycache__", "*.so", "*.build.json")
    )
    if library is not None:
        shutil.copy(library, os.path.join(dest, "_tf_ops.so"))
    if build_info is not None:
        text = build_info if isinstance(build_info, str) else json.dumps(build_info)
        with open(os.path.join(dest, "_tf_ops.build.json"), "w") as f:
            f.write(text)
    return root


def _library_with_undefined_symbol(path: str) -> str:
    """A shared library that references a symbol nothing defines (a data symbol,
    so it fails at load time whatever the binding mode)."""
    source = "extern int tf_ops_symbol_from_another_tensorflow; int f(void) { return tf_ops_symbol_from_another_tensorflow; }\n"
    compiler = shutil.which("cc") or shutil.which("gcc") or "c++"
    subprocess.run([compiler, "-shared", "-fPIC", "-x", "c", "-", "-o", path], input=source, text=True, check=True)
    return path


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{case: result} for every doctored package, from one Python process."""
    tmp = tmp_path_factory.mktemp("loader")
    current = {"tensorflow_version": tf.__version__, "cuda": False, "xla": False}
    cases = {
        "missing": _copy_package(str(tmp / "missing"), library=None, build_info=None),
        "mismatch": _copy_package(
            str(tmp / "mismatch"), library=tf_ops.library_path(), build_info=dict(current, tensorflow_version="2.0.0")
        ),
        "undefined_symbol": _copy_package(
            str(tmp / "undefined"), library=_library_with_undefined_symbol(str(tmp / "bad.so")), build_info=current
        ),
        "malformed": _copy_package(str(tmp / "malformed"), library=tf_ops.library_path(), build_info="{not json"),
        # Last: the only case that loads a library (a second copy in one process
        # would register every kernel twice).
        "no_build_info": _copy_package(str(tmp / "bazel"), library=tf_ops.library_path(), build_info=None),
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, *cases.values()], capture_output=True, text=True, env=env, cwd=str(tmp), timeout=300
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == len(cases), proc.stdout + proc.stderr
    return dict(zip(cases, map(json.loads, lines)))


def _assert_import_error(result, *needles):
    assert not result["ok"], result
    assert result["type"] == "ImportError", result
    for needle in needles:
        assert needle in result["message"], f"{needle!r} not in: {result['message']}"


@pytest.mark.heavy  # results: doctored packages loaded in a fresh process
def test_missing_library_names_the_build_commands(results):
    _assert_import_error(results["missing"], "not built", *REBUILD_COMMANDS)


@pytest.mark.heavy  # results: doctored packages loaded in a fresh process
def test_other_tensorflow_version_names_both_versions(results):
    _assert_import_error(results["mismatch"], "TensorFlow 2.0.0", f"TensorFlow {tf.__version__}", *REBUILD_COMMANDS)


@pytest.mark.heavy  # results: doctored packages loaded in a fresh process
def test_load_failure_is_wrapped_with_the_same_advice(results):
    _assert_import_error(
        results["undefined_symbol"], "cannot load", "tf_ops_symbol_from_another_tensorflow", *REBUILD_COMMANDS
    )


@pytest.mark.heavy  # results: doctored packages loaded in a fresh process
def test_malformed_build_info_is_an_import_error(results):
    _assert_import_error(results["malformed"], "_tf_ops.build.json", *REBUILD_COMMANDS)


@pytest.mark.heavy  # results: doctored packages loaded in a fresh process
def test_library_without_build_info_still_loads(results):
    result = results["no_build_info"]
    assert result["ok"], result
    assert result["build_info"] is None
    assert result["value"] == [-1.0]
    assert result["path"].endswith(os.path.join("bazel", "tf_ops", "_tf_ops.so"))
    # The fallback decision comes from TF's kernel registry, not from build info.
    expected = len(activations.OP_NAMES) if tf_ops.build_info().xla else 0
    assert len(result["xla_lowered"]) == expected


def test_build_info_of_this_tree():
    info = tf_ops.build_info()
    assert info is not None, "make build writes tf_ops/_tf_ops.build.json"
    assert info.tensorflow_version == tf.__version__
    with open(os.path.join(PACKAGE, "_tf_ops.build.json")) as f:
        assert json.load(f) == {"tensorflow_version": info.tensorflow_version, "cuda": info.cuda, "xla": info.xla}
    # GPU kernels are registered exactly when they are active (built, and loadable here).
    from tensorflow.python.framework import kernels

    devices = {k.device_type for k in kernels.get_registered_kernels_for_op("TfOps>Gelu").kernel}
    assert ("GPU" in devices) == tf_ops.gpu_status().active
    assert ("XLA_CPU_JIT" in devices) == info.xla
