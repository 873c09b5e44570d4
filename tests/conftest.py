"""Test-suite configuration: hypothesis profiles, and the CPU-only build that the
tests of builds without CUDA or XLA share (built once per session).

"tf_ops" (the default) makes every property test deterministic: examples are
derived from each test's source (derandomize), nothing is read from or written
to a local example database, and there is no per-example deadline (the first
call of an op with a new dtype or attribute compiles nothing but is slower).
A failure prints the failing example and reproduces on every run.

"tf_ops-explore" draws fresh random examples (and remembers failures) for
searching beyond the fixed set: `pytest --hypothesis-profile=tf_ops-explore
[--hypothesis-seed=N] tests/activation/test_properties.py`.
"""

from __future__ import annotations

import os

# TensorFlow's oneDNN on for every CPU kind, before TensorFlow is imported (as the
# Makefile does, for a plain `pytest`): without it (a CPU without AVX-512) TensorFlow has
# no NCHW convolution on the CPU, no allocator statistics, and other matmul rounding.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("tf_ops", derandomize=True, database=None, **_COMMON)
settings.register_profile("tf_ops-explore", derandomize=False, **_COMMON)
# --hypothesis-profile on the command line is applied after this and wins.
settings.load_profile("tf_ops")


ROOT = Path(__file__).resolve().parents[1]
# What an earlier CUDA build leaves in the source tree beside _tf_ops.so.
GPU_LIBRARY_FILES = ("_tf_ops_gpu.so", "_tf_ops_gpu.build.json")


def copy_sources(dest: Path) -> Path:
    """Copies the source tree to `dest`: no VCS data, venv, build trees or built libraries."""

    def ignore(directory, names):
        skip = {".git", ".venv", ".pytest_cache", "__pycache__", "_tf_ops.so", "_tf_ops.build.json",
                *GPU_LIBRARY_FILES}
        top = Path(directory).samefile(ROOT)
        return [n for n in names if n in skip or (top and n.startswith(("build", "bazel-", "dist")))]

    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


@pytest.fixture(params=["custom_call", "composite"])
def xla_path(request, monkeypatch) -> str:
    """Both ways a family's op lowers under jit_compile: the custom call into its engine
    (where XLA's FFI registry holds a handler) and the XlaBuilder composite (forced with
    TF_OPS_XLA_CUSTOM_CALLS=0, as on a device without a handler)."""
    if request.param == "composite":
        monkeypatch.setenv("TF_OPS_XLA_CUSTOM_CALLS", "0")
    return request.param


@pytest.fixture(scope="session")
def cpu_only_build(tmp_path_factory) -> types.SimpleNamespace:
    """A copy of the source tree built with -DTF_OPS_CUDA=OFF -DTF_OPS_XLA=OFF (CPU
    kernels only; a few minutes on two cores: the whole CPU library): `src`, the
    `configure` and `build` results, and `tmp`, a directory to run in. A GPU library and
    its build info are planted first where an earlier CUDA build would have left them:
    the build must remove them."""
    tmp = tmp_path_factory.mktemp("cpu_only_build")
    src = copy_sources(tmp / "src")
    for name in GPU_LIBRARY_FILES:
        (src / "tf_ops" / name).write_text("left by an earlier CUDA build")
    build = tmp / "build"
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed to build the library"
    # Paths hashed relative to this copy: the quick and the slow tests each build it in a
    # pytest run of their own (CI), and the second finds every object in ccache.
    env = dict(os.environ, CCACHE_BASEDIR=str(tmp))
    configure = subprocess.run(
        [cmake, "-S", str(src), "-B", str(build), f"-DPython3_EXECUTABLE={sys.executable}",
         "-DTF_OPS_CUDA=OFF", "-DTF_OPS_XLA=OFF"],
        capture_output=True, text=True, env=env,
    )
    assert configure.returncode == 0, configure.stdout + configure.stderr
    built = subprocess.run([cmake, "--build", str(build), "--parallel", "2"], capture_output=True,
                           text=True, env=env)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return types.SimpleNamespace(src=src, configure=configure, build=built, tmp=tmp)


def pytest_addoption(parser):
    parser.addoption(
        "--slice", type=int, default=1, metavar="N",
        help="keep one case in N of each parametrized test (the first always): a "
             "representative slice of every test for the developer loop (make test-quick)")
    parser.addoption(
        "--family", default="", metavar="NAME[,NAME...]",
        help="only the tests of these op families (make test-quick FAMILY=norm): the "
             "files under tests/<family>/ (tests/README.md)")


# The op families, as tf_ops.python.core.family derives them (read without importing tf_ops):
# each has its tests in tests/<family>/.
FAMILIES = tuple(sorted(p.parent.name for p in (ROOT / "tf_ops" / "python").glob("*/manifest.py")))


def pytest_configure(config):
    for name in FAMILIES:
        config.addinivalue_line("markers", f"family_{name}: a test of the {name} op family "
                                           "(conftest.family_of; --family)")


def family_of(path: Path) -> str | None:
    """The op family a test file belongs to: the folder under tests/ that holds it, when
    that folder is a family's (tests/norm/test_norm_layers.py is norm's); None for the
    other folders (package, keras, bench)."""
    try:
        folder = path.resolve().relative_to(Path(__file__).resolve().parent).parts[0]
    except ValueError:  # a file outside tests/
        return None
    return folder if folder in FAMILIES else None


def pytest_collection_modifyitems(config, items):
    """--family NAME: the tests of that family only (marked ``family_<name>``).
    --slice N: every test function keeps its first case and every N-th after it, so
    each file and function is still exercised. CI runs everything (N = 1)."""
    wanted = {f for f in config.getoption("--family").split(",") if f}
    unknown = wanted - set(FAMILIES)
    if unknown:
        raise pytest.UsageError(f"--family: no family {sorted(unknown)}; there are {FAMILIES}")
    kept, dropped = [], []
    for item in items:
        family = family_of(Path(str(item.fspath)))
        if family:
            item.add_marker(getattr(pytest.mark, f"family_{family}"))
        (kept if not wanted or family in wanted else dropped).append(item)
    if dropped:
        items[:] = kept
        config.hook.pytest_deselected(items=dropped)
    n = config.getoption("--slice")
    if n <= 1:
        return
    seen: dict[str, int] = {}
    kept, dropped = [], []
    for item in items:
        key = item.nodeid.split("[")[0]  # the test function, without its parameters
        index = seen.get(key, 0)
        seen[key] = index + 1
        (kept if index % n == 0 else dropped).append(item)
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)
