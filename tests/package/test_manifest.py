"""The family manifests (tf_ops/python/<family>/manifest.py, core/family.py) and the code
agree: every family folder has one, the manifests claim exactly the registered ops, and
every name a manifest gives (function, layer, gradient module, bench, patch family, GPU
self-test family, docs section) exists where it says."""

from __future__ import annotations

import importlib
import pathlib
import re

import pytest
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.framework import ops

import tf_ops
from tf_ops.python.core import op_info
from tf_ops.python.core.family import families, family_names

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON = ROOT / "tf_ops" / "python"
# Folders under tf_ops/python that are no op family.
NOT_FAMILIES = {"core", "patch"}
# patch_keras families that patch Keras without an op family's ops.
PATCH_WITHOUT_OPS = {"optimizer"}


def _registered_ops() -> set[str]:
    """The ops the library itself registers, as tf.load_op_library reads them (every one
    namespaced: test_registry.py), without the namespace."""
    handle = pywrap_tf_session.TF_LoadLibrary(tf_ops.library_path())
    try:
        op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetOpList(handle))
    finally:
        pywrap_tf_session.TF_DeleteLibraryHandle(handle)
    return {op.name[len(op_info.NAMESPACE):] for op in op_list.op}


def test_every_family_folder_has_a_manifest_and_a_cmake_line():
    folders = {p.name for p in PYTHON.iterdir()
               if (p / "__init__.py").exists() and p.name not in NOT_FAMILIES}
    assert set(family_names()) == folders
    cmake = (ROOT / "CMakeLists.txt").read_text()
    for name in family_names():
        assert (ROOT / "tf_ops" / "cc" / name).is_dir(), name
        # The fused ops are registered with the activations' (activation_ops.cc).
        assert re.search(rf"^tf_ops_family\({name}\b", cmake, re.M), name


def test_manifests_claim_exactly_the_registered_ops():
    claimed: dict[str, str] = {}
    for family in families():
        names = family.op_names()
        assert names, family.name
        for op in names:
            assert op not in claimed, f"{op} claimed by {claimed[op]} and {family.name}"
            claimed[op] = family.name
    registered = _registered_ops()
    assert set(claimed) == registered, (
        f"registered, in no manifest: {sorted(registered - set(claimed))}; "
        f"in a manifest, not registered: {sorted(set(claimed) - registered)}")


def test_every_op_of_a_family_has_a_gradient():
    for family in families():
        importlib.import_module(family.gradients)
        for op in family.op_names():
            ops.gradient_registry.lookup(op_info.NAMESPACE + op)  # LookupError if none


def test_the_package_exports_what_the_manifests_list():
    exported = {}
    for family in families():
        for name, obj in family.exports().items():
            assert name not in exported, f"{name} from {family.name} and {exported[name]}"
            exported[name] = family.name
            assert getattr(tf_ops, name) is obj, name
            assert name in tf_ops.__all__, name
        for name, cls in family.layer_classes().items():
            assert getattr(tf_ops.layers, name) is cls, name
            assert name in tf_ops.layers.__all__, name
    # And nothing else: the rest of __all__ is the package's own (loading, portable, patch).
    own = {"BuildInfo", "GpuFallbackWarning", "GpuStatus", "active_cpu_extensions", "active_cpu_isa", "build_info",
           "gpu_status", "is_portable", "layers", "library_path", "load_library",
           "patch_keras", "patch_summary", "portable"}
    assert set(tf_ops.__all__) == set(exported) | own
    assert set(tf_ops.layers.__all__) == {n for f in families() for n in f.layer_classes()}


def test_bench_patch_selftest_and_docs_names_exist():
    from tf_ops.python.patch.entry import FAMILIES as PATCH_FAMILIES
    from tf_ops.python.patch.table import ENTRIES

    patched = {f for entry in ENTRIES for f in entry.families}
    gpu_sources = "\n".join(p.read_text() for p in (ROOT / "tests" / "gpu").glob("*.[hc]*"))
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    claimed_patch = set()
    for family in families():
        if family.bench:
            assert importlib.import_module(family.bench).BENCHED_OPS, family.name
        for name in family.patch:
            assert name in PATCH_FAMILIES and name in patched, (family.name, name)
            claimed_patch.add(name)
        for name in family.gpu_selftest:
            assert (f'kName = "{name}"' in gpu_sources
                    or f'Wanted("{name}")' in gpu_sources), (family.name, name)
        assert re.search(rf"^#+ .*{re.escape(family.docs)}", architecture, re.M), (
            f"docs/architecture.md has no section {family.docs!r} ({family.name})")
    assert set(PATCH_FAMILIES) == claimed_patch | PATCH_WITHOUT_OPS


@pytest.mark.parametrize("broken", ["op", "function", "gradients"])
def test_a_manifest_that_disagrees_is_caught(broken):
    """The checks above fail on a manifest that lies (an op left out, a function that is
    not there, a gradient module that does not exist)."""
    import dataclasses

    real = families()
    norm = next(f for f in real if f.name == "norm")
    if broken == "op":
        changed = dataclasses.replace(norm, ops=norm.op_names()[1:])
    elif broken == "function":
        changed = dataclasses.replace(
            norm, functions=norm.functions + ("tf_ops.python.norm.functions:no_such_norm",))
    else:
        changed = dataclasses.replace(norm, gradients="tf_ops.python.norm.no_gradients")
    fake = tuple(changed if f is norm else f for f in real)
    # The checks read this module's `families`: they see the broken manifest.
    globals()["families"], saved = (lambda: fake), globals()["families"]
    try:
        with pytest.raises((AssertionError, AttributeError, ModuleNotFoundError)):
            {"op": test_manifests_claim_exactly_the_registered_ops,
             "function": test_the_package_exports_what_the_manifests_list,
             "gradients": test_every_op_of_a_family_has_a_gradient}[broken]()
    finally:
        globals()["families"] = saved
