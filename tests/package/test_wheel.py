"""`make wheel`: a wheel in dist/ that carries the library, requires exactly the TensorFlow it
was built against, and works on its own: installed into a fresh venv (pip resolves its
TensorFlow from the index), it imports from a folder outside the source tree and passes
tests/scripts/check_installed_package.py (every op and its gradient, under jit too, every Keras
layer, a `.keras` save and reload)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import tensorflow as tf

import venvs
from subprocesses import REPO_ROOT

pytestmark = pytest.mark.slow

CHECK = REPO_ROOT / "tests" / "scripts" / "check_installed_package.py"
sys.path.append(str(REPO_ROOT / "tools"))
import tensorflow_requirement  # noqa: E402


@pytest.fixture(scope="module")
def wheel() -> Path:
    """`make wheel` with this suite's venv (not necessarily .venv: `make compat` runs it in
    another), against this suite's TensorFlow."""
    started = time.time()
    venv = Path(sys.prefix)
    result = subprocess.run(
        ["make", "wheel", f"VENV={venv}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600
    )
    assert result.returncode == 0, f"make wheel failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
    built = [p for p in (REPO_ROOT / "dist").glob("tf_ops-*.whl") if p.stat().st_mtime >= started - 1]
    assert len(built) == 1, (built, result.stdout[-2000:])
    return built[0]


def test_wheel_holds_the_library_and_pins_its_tensorflow(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        info = json.loads(whl.read("tf_ops/_tf_ops.build.json"))
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "tf_ops/_tf_ops.so" in names and "tf_ops/__init__.py" in names
    assert not [n for n in names if n.startswith(("tf_ops/cc/", "tf_ops/cu/"))], names
    assert info["tensorflow_version"] == tf.__version__
    requires = re.findall(r"^Requires-Dist: ([^;\n]+)$", metadata, re.M)
    assert sorted(requires) == sorted(["numpy", tensorflow_requirement.requirement()]), requires
    assert re.search(r"-cp\d+-cp\d+-linux_x86_64\.whl$", wheel.name), wheel.name


def test_wheel_works_in_a_fresh_venv_outside_the_source_tree(wheel, tmp_path):
    venv = venvs.venv_with("wheel-venv", [])  # pip brings TensorFlow, as the wheel requires
    venvs.pip_install(venv, "--quiet", wheel)
    installed = venvs.distributions(venv)
    dist, version = tensorflow_requirement.installed_tensorflow()
    assert installed.get(dist) == version and installed.get("tf-ops") == "0.1.0", installed
    result = venvs.run([venvs.python(venv), "-I", CHECK, REPO_ROOT, tmp_path], cwd=tmp_path, timeout=900)
    assert result.stdout.rstrip().endswith("INSTALLED PACKAGE OK"), result.stdout
