"""tools/tensorflow_requirement.py, the build's metadata provider: the package requires exactly
the TensorFlow distribution and version it is built against; several TensorFlow distributions
side by side are refused; an isolated build asks for the interpreter's own TensorFlow, found
outside the isolation (here simulated as pip does it: site-packages off the hook's sys.path; the
real pip run is in test_install_with_tensorflow_cpu.py); an sdist carries no pin."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf

from subprocesses import REPO_ROOT

PROVIDER = REPO_ROOT / "tools" / "tensorflow_requirement.py"
sys.path.append(str(PROVIDER.parent))
import tensorflow_requirement as provider  # noqa: E402


def _fake_distribution(site: Path, name: str, version: str, files: list[str]) -> None:
    """A minimal installed distribution: METADATA and a RECORD listing `files`."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


@pytest.fixture
def state():
    yield provider.build_state
    provider.build_state("wheel")


@pytest.mark.heavy  # a fresh process
def test_pins_the_tensorflow_of_this_environment():
    dist, version = provider.installed_tensorflow()
    assert dist in ("tensorflow", "tensorflow-cpu"), dist
    assert version.replace("-", "") == tf.__version__.replace("-", "")
    assert provider.requirement() == f"{dist}=={version}"
    fragment = provider.dynamic_metadata({"dependencies": ["numpy"]}, {})
    assert fragment == {"dependencies": ["numpy", f"{dist}=={version}"]}
    assert provider.get_requires_for_dynamic_metadata({}) == []  # nothing to install: it is here


def test_finds_the_distribution_that_owns_the_package(tmp_path):
    _fake_distribution(tmp_path, "tensorflow-cpu", "2.20.0", ["tensorflow/__init__.py", "tensorflow/x.py"])
    _fake_distribution(tmp_path, "tensorflow-io-gcs-filesystem", "0.37.1", ["tensorflow_io_gcs_filesystem/__init__.py"])
    assert provider.installed_tensorflow([str(tmp_path)]) == ("tensorflow-cpu", "2.20.0")
    assert provider.requirement([str(tmp_path)]) == "tensorflow-cpu==2.20.0"
    assert provider.installed_tensorflow([str(tmp_path / "empty")]) is None


def test_refuses_two_tensorflow_distributions(tmp_path):
    _fake_distribution(tmp_path, "tensorflow", "2.21.0", ["tensorflow/__init__.py"])
    _fake_distribution(tmp_path, "tensorflow_cpu", "2.20.0", ["tensorflow/__init__.py"])
    with pytest.raises(RuntimeError, match=r"tensorflow 2\.21\.0, tensorflow-cpu 2\.20\.0.*Uninstall"):
        provider.installed_tensorflow([str(tmp_path)])


def test_sdist_carries_no_pin(state):
    state("sdist")
    assert provider.dynamic_metadata({"dependencies": ["numpy"]}, {}) == {"dependencies": ["numpy"]}
    assert provider.dynamic_wheel({}) == {"dependencies": True}


def test_no_tensorflow_to_build_against_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(provider, "installed_tensorflow", lambda path=None: None)
    with pytest.raises(RuntimeError, match="install tensorflow or tensorflow-cpu first.*--no-build-isolation"):
        provider.dynamic_metadata({}, {})


@pytest.mark.heavy  # a fresh process
def test_isolated_build_asks_for_the_interpreters_own_tensorflow():
    """As in pip's build environment: this interpreter, with site-packages off sys.path."""
    hook = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        sys.path = [p for p in sys.path if "site-packages" not in p]
        spec = importlib.util.spec_from_file_location("tensorflow_requirement", {str(PROVIDER)!r})
        provider = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(provider)
        assert provider.installed_tensorflow() is None, "tensorflow still visible"
        print(json.dumps(provider.get_requires_for_dynamic_metadata({{}})))
        """
    )
    result = subprocess.run([sys.executable, "-c", hook], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == [provider.requirement()]


def test_isolated_build_without_a_tensorflow_to_match_gets_the_newest(monkeypatch):
    monkeypatch.setattr(provider, "installed_tensorflow", lambda path=None: None)
    monkeypatch.setattr(provider, "_outer_requirement", lambda: None)
    assert provider.get_requires_for_dynamic_metadata({}) == ["tensorflow"]
