"""Installing from source next to the TensorFlow a user already has: tensorflow-cpu (the
CPU-only distribution), of an older version than .venv's.

- `pip install --no-build-isolation .` builds against it and leaves it exactly as it was: no
  distribution changes version, `tensorflow` is not pulled in beside `tensorflow-cpu`, and the
  installed tf_ops requires `tensorflow-cpu==<that version>`; from a folder outside the source
  tree it passes tests/scripts/check_installed_package.py.
- `pip install .` with build isolation would build against the same TensorFlow: pip's dry run
  installs that tensorflow-cpu into its temporary build environment, prepares the metadata, and
  would install nothing but tf_ops (~1 min, no compile).
"""

from __future__ import annotations

import json

import pytest

import venvs
from subprocesses import REPO_ROOT

pytestmark = pytest.mark.slow

TF_DIST, TF_VERSION = "tensorflow-cpu", "2.20.0"
PINNED = f"{TF_DIST}=={TF_VERSION}"
CHECK = REPO_ROOT / "tests" / "scripts" / "check_installed_package.py"
# The CMake tree of these builds, kept between runs (pip's default is shared with other builds),
# beside build/ in the source tree: ccache rewrites the paths under the tree relative to the
# build folder, so at the same depth the TensorFlow-free CUDA objects are `make build`'s.
BUILD_DIR = REPO_ROOT / f"build-{TF_DIST}-{TF_VERSION}"


def _run_time_requirements(requires: list[str]) -> list[str]:
    """The requirements without the extras' (test, plot, demo)."""
    return sorted(r for r in requires if "extra ==" not in r)


@pytest.fixture(scope="module")
def venv():
    # scikit-build-core too: without build isolation, the build backend must be installed.
    return venvs.venv_with(f"venv-{TF_DIST}-{TF_VERSION}", [PINNED, "scikit-build-core>=1.1"])


def test_no_build_isolation_install_keeps_the_users_tensorflow(venv, tmp_path):
    before = venvs.distributions(venv)
    assert before.get(TF_DIST) == TF_VERSION and "tensorflow" not in before, before
    record = next((venv / "lib").glob(f"python*/site-packages/{TF_DIST.replace('-', '_')}-{TF_VERSION}.dist-info/RECORD"))
    record_mtime = record.stat().st_mtime_ns

    # From another folder, as a user would point pip at a checkout.
    venvs.run([venvs.python(venv), "-m", "pip", "install", "--quiet", "--no-build-isolation",
               f"--config-settings=build-dir={BUILD_DIR}", REPO_ROOT], cwd=tmp_path)  # fmt: skip

    after = venvs.distributions(venv)
    assert after.pop("tf-ops") == "0.1.0"
    assert after == before, {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
                             if before.get(k) != after.get(k)}  # fmt: skip
    assert record.stat().st_mtime_ns == record_mtime, f"{TF_DIST} was reinstalled"
    requires = venvs.run([venvs.python(venv), "-c",
                          "import importlib.metadata as m, json; print(json.dumps(m.requires('tf_ops')))"]).stdout
    assert _run_time_requirements(json.loads(requires)) == ["numpy", PINNED], requires
    venvs.run([venvs.python(venv), "-m", "pip", "check"])  # every requirement met

    result = venvs.run([venvs.python(venv), "-I", CHECK, REPO_ROOT, tmp_path], cwd=tmp_path, timeout=900)
    assert result.stdout.rstrip().endswith("INSTALLED PACKAGE OK"), result.stdout
    assert f"built against TensorFlow {TF_VERSION}" in result.stdout, result.stdout


def test_isolated_install_would_build_against_the_users_tensorflow(venv, tmp_path):
    report = tmp_path / "report.json"
    venvs.run([venvs.python(venv), "-m", "pip", "install", "--dry-run", "--quiet", "--report", report,
               REPO_ROOT], cwd=tmp_path)  # fmt: skip
    install = json.loads(report.read_text())["install"]
    assert [item["metadata"]["name"] for item in install] == ["tf_ops"], install
    requires = install[0]["metadata"]["requires_dist"]
    assert _run_time_requirements(requires) == ["numpy", PINNED], requires
