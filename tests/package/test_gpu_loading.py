"""The GPU kernels are loaded only where they can run (tf_ops/python/core/gpu.py decides,
tf_ops/python/core/library.py loads).

There is no GPU and no NVIDIA driver here, so the decision is fed fakes. In this process:
the decision itself (driver too old, new enough, unreadable; GPUs that run the compiled
code, the PTX, or nothing), the driver table, and the GPU library's own files (missing,
built for another TensorFlow, malformed). In a fresh process, the loader end to end with a
GPU that TensorFlow lists and a stand-in libcuda.so.1 (tests/fake_gpu.py): the warning
(exact text, exactly once), no GPU kernel registered when refused, every op running (on the
CPU, also inside tf.device("/GPU:0")), and with a new enough driver the GPU library loaded,
with GPU kernels for every op and dtype."""

from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

import fake_gpu
import subprocesses
import tf_ops
from tf_ops.python.core import gpu, library

TESTS = str(subprocesses.TESTS)  # the shared helpers (fake_gpu.py)
ROOT = str(subprocesses.REPO_ROOT)

H200 = gpu.GpuDevice("NVIDIA H200", (9, 0))
B200 = gpu.GpuDevice("NVIDIA B200", (10, 0))  # newer than every real architecture built
V100 = gpu.GpuDevice("Tesla V100-SXM2-16GB", (7, 0))  # older than CUDA 13 compiles for
ARCHS = ("75-real", "80-real", "86-real", "89-real", "90-real", "90-virtual")
BUILD_13_0 = gpu.GpuBuild("/pkg/tf_ops/_tf_ops_gpu.so", (13, 0), ARCHS)

# The warning a user with an H200 and a CUDA 12.4 driver sees, word for word.
TOO_OLD_WARNING = (
    "tf_ops: GPU kernels not loaded. TensorFlow runs tf_ops ops on the CPU (correct results, "
    "but slower than a GPU kernel, with copies between the devices). The NVIDIA driver "
    "supports CUDA 12.4, but the GPU kernels are linked with the CUDA 13.0 runtime, which "
    "needs NVIDIA driver 580 or newer (CUDA 13.0). Update the NVIDIA driver to 580 or newer, "
    "or build tf_ops with a CUDA 12 toolkit, which this driver runs (README, section "
    '"GPU": TF_OPS_CUDA=ON with CMAKE_CUDA_COMPILER set to its nvcc).'
)


# ------------------------------------------------------------ the decision --


def test_driver_tables_and_versions():
    assert gpu.minimum_driver((13, 0)) == "580"
    assert gpu.minimum_driver((12, 0)) == "525.60.13"  # minor version compatibility
    assert gpu.minimum_driver((12, 4)) == "550.54.14"  # the toolkit's own driver
    assert gpu.minimum_driver((14, 0)) is None
    assert gpu.minimum_driver((13, 1)) is None
    assert gpu.from_driver_api_version(12040) == (12, 4)
    assert gpu.from_driver_api_version(13000) == (13, 0)
    assert gpu.from_driver_api_version(12090) == (12, 9)
    assert gpu.parse_version("13.0") == (13, 0)
    with pytest.raises(ValueError):
        gpu.parse_version("13")
    # Every CUDA major a toolkit row belongs to has a minor-version-compatibility row,
    # and that row is the major's first toolkit's driver or older.
    for (major, minor), driver in gpu.TOOLKIT_DRIVERS.items():
        first = gpu.MINOR_VERSION_COMPATIBILITY_DRIVERS[major]
        assert _driver_key(first) <= _driver_key(driver), (major, minor)


def _driver_key(driver: str) -> tuple[int, ...]:
    return tuple(int(part) for part in driver.split("."))


@pytest.mark.parametrize(
    "cc, archs, expected",
    [
        ((9, 0), ARCHS, "sass"),
        ((8, 7), ARCHS, "sass"),  # 80-real runs on 8.7 (same family, newer minor)
        ((7, 5), ARCHS, "sass"),
        ((10, 0), ARCHS, "ptx"),  # Blackwell: the 90 PTX, compiled by the driver
        ((12, 0), ARCHS, "ptx"),
        ((7, 0), ARCHS, None),  # Volta: CUDA 13 has neither code for it
        ((6, 1), ("60-real", "70-real"), "sass"),
        ((9, 0), ("90a-real",), "sass"),
        ((9, 1), ("90a-real",), None),  # architecture-specific code: 9.0 only
        ((10, 3), ("100f-real",), "sass"),  # family code: the whole 10.x family
        ((9, 0), ("90",), "sass"),  # plain: real and virtual
        ((10, 0), ("90",), "ptx"),
        ((8, 0), ("90-real", "90-virtual"), None),
        ((8, 0), ("native",), "unknown"),
        ((8, 0), ("all-major",), "unknown"),
    ],
)
def test_which_code_a_gpu_runs(cc, archs, expected):
    assert gpu.code_for(cc, archs) == expected


def test_new_enough_driver_loads():
    for driver in [(13, 0), (13, 2), (14, 0)]:
        status = gpu.decide(BUILD_13_0, [H200], driver)
        assert status.active and status.reason == "" and status.remedy == "", status
        assert status.min_driver == "580" and status.cuda_runtime == "13.0"
        assert status.driver_cuda == gpu.version_text(driver)
        assert status.gpus == ("NVIDIA H200 (compute capability 9.0)",)
        assert not status.should_warn
        assert status.message.startswith("tf_ops: GPU kernels active on NVIDIA H200")


def test_too_old_driver_is_refused_with_the_exact_warning():
    status = gpu.decide(BUILD_13_0, [H200], (12, 4))
    assert not status.active and status.should_warn
    assert status.message == TOO_OLD_WARNING
    assert status.driver_cuda == "12.4" and status.min_driver == "580"
    # One minor short is still too old: CUDA 13 needs a CUDA 13 driver.
    assert not gpu.decide(BUILD_13_0, [H200], (12, 9)).active


def test_driver_of_another_major_without_a_toolkit_to_suggest():
    status = gpu.decide(BUILD_13_0, [H200], (11, 8))
    assert not status.active
    assert status.remedy == "Update the NVIDIA driver to 580 or newer."


def test_unreadable_driver_is_refused():
    status = gpu.decide(BUILD_13_0, [H200], None, "libcuda.so.1 cannot be loaded: not found")
    assert not status.active and status.should_warn
    assert status.reason == (
        "The NVIDIA driver's CUDA version cannot be read (libcuda.so.1 cannot be loaded: not found)."
    )
    assert status.remedy == (
        "Check the driver (`nvidia-smi`); the GPU kernels need NVIDIA driver 580 or newer (CUDA 13.0)."
    )


def test_minor_version_compatibility_and_ptx():
    build_12_8 = gpu.GpuBuild("lib", (12, 8), ("60-real", "70-real", "75-real") + ARCHS[1:])
    # Compiled code runs on any driver of the same major ...
    assert gpu.decide(build_12_8, [H200], (12, 2)).active
    # ... but PTX needs the driver of the toolkit that wrote it (or newer).
    ptx = gpu.decide(build_12_8, [B200], (12, 2))
    assert not ptx.active and ptx.min_driver == "570.26"
    assert "needs NVIDIA driver 570.26 or newer (CUDA 12.8)" in ptx.reason
    assert gpu.decide(build_12_8, [B200], (12, 8)).active
    # A minor without a known driver is named by its CUDA version.
    build_13_1 = gpu.GpuBuild("lib", (13, 1), ARCHS)
    assert gpu.decide(build_13_1, [H200], (13, 0)).active
    status = gpu.decide(build_13_1, [H200, B200], (13, 0))
    assert not status.active and status.min_driver is None
    assert "needs an NVIDIA driver for CUDA 13.1 or newer" in status.reason
    assert status.remedy == "Update the NVIDIA driver to one for CUDA 13.1 or newer."


def test_gpu_without_code_in_the_build_is_refused():
    status = gpu.decide(BUILD_13_0, [H200, V100], (13, 0))
    assert not status.active
    assert status.reason == (
        "Tesla V100-SXM2-16GB (compute capability 7.0) has no code in the GPU kernels, which "
        "are compiled for 75-real;80-real;86-real;89-real;90-real;90-virtual."
    )
    assert status.remedy == (
        "Rebuild tf_ops with 70-real added to CMAKE_CUDA_ARCHITECTURES and a CUDA 12 toolkit "
        '(CUDA 13 compiles for compute capability 7.5 and newer) (README, section "GPU").'
    )


def test_unknown_architectures_or_capability_do_not_block():
    assert gpu.decide(gpu.GpuBuild("lib", (13, 0), ("native",)), [V100], (13, 0)).active
    assert gpu.decide(BUILD_13_0, [gpu.GpuDevice("GPU:0", None)], (13, 0)).active


def test_status_without_gpu_does_not_warn():
    status = gpu.GpuStatus(active=False, reason="TensorFlow sees no GPU.")
    assert not status.should_warn
    assert status.message == "tf_ops: GPU kernels not loaded. TensorFlow sees no GPU."


def _readme_table(first_header: str, document: str = "README.md") -> dict[str, str]:
    """The first two columns of the table in `document` whose header starts with
    `first_header`."""
    lines = (Path(ROOT) / document).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1]
    return rows


def test_readme_driver_tables_are_the_loaders():
    assert _readme_table("CUDA runtime linked") == {
        f"{major}.x": driver
        for major, driver in sorted(gpu.MINOR_VERSION_COMPATIBILITY_DRIVERS.items(), reverse=True)
    }
    assert _readme_table("CUDA toolkit that wrote the PTX", "docs/gpu.md") == {
        gpu.version_text(version): driver for version, driver in gpu.TOOLKIT_DRIVERS.items()
    }
    # And the warning docs/gpu.md quotes is the one users get (wrapped there).
    readme = (Path(ROOT) / "docs" / "gpu.md").read_text(encoding="utf-8")
    quoted = readme.split("for example, on an H100 with a CUDA 12.4 driver:\n\n```\n", 1)[1].split(
        "```", 1
    )[0]
    assert " ".join(quoted.split()) == TOO_OLD_WARNING


def test_gpu_module_examples():
    result = doctest.testmod(gpu, extraglobs={"tf_ops": tf_ops}, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result


# ---------------------------------------------- the GPU library's own files --


def _gpu_files(tmp_path, *, library: bool = True, info: str | dict | None = None) -> str:
    """A directory with what the GPU loader looks at beside a _tf_ops.so (which it never
    opens); returns that _tf_ops.so's path."""
    if library:
        (tmp_path / "_tf_ops_gpu.so").write_bytes(b"")
    if info is not None:
        text = info if isinstance(info, str) else json.dumps(info)
        (tmp_path / "_tf_ops_gpu.build.json").write_text(text)
    return str(tmp_path / "_tf_ops.so")


CUDA_BUILD = library.BuildInfo(tensorflow_version=tf.__version__, cuda=True, xla=True)
GPU_INFO = {
    "tensorflow_version": tf.__version__,
    "cuda_runtime": "13.0",
    "cuda_architectures": list(ARCHS),
}


def test_no_build_info_or_no_cuda_build(tmp_path):
    status = library._load_gpu_kernels(_gpu_files(tmp_path, info=GPU_INFO), None)
    assert not status.active and "no build info" in status.reason and "make build" in status.remedy
    no_cuda = library.BuildInfo(tensorflow_version=tf.__version__, cuda=False, xla=True)
    status = library._load_gpu_kernels(_gpu_files(tmp_path, info=GPU_INFO), no_cuda)
    assert (
        status.reason
        == "This tf_ops was built without CUDA kernels (no nvcc was found, or TF_OPS_CUDA=OFF)."
    )
    assert "TF_OPS_CUDA=ON" in status.remedy


def test_gpu_library_or_its_build_info_missing(tmp_path):
    status = library._load_gpu_kernels(
        _gpu_files(tmp_path, library=False, info=GPU_INFO), CUDA_BUILD
    )
    assert not status.active
    assert (
        status.reason
        == f"tf_ops was built with CUDA kernels, but {tmp_path / '_tf_ops_gpu.so'} is missing."
    )
    assert "make build" in status.remedy
    (tmp_path / "_tf_ops_gpu.build.json").unlink()
    status = library._load_gpu_kernels(_gpu_files(tmp_path), CUDA_BUILD)
    assert status.reason.endswith(f"{tmp_path / '_tf_ops_gpu.build.json'} is missing.")


def test_gpu_library_for_another_tensorflow_or_malformed(tmp_path):
    status = library._load_gpu_kernels(
        _gpu_files(tmp_path, info=dict(GPU_INFO, tensorflow_version="2.0.0")), CUDA_BUILD
    )
    assert not status.active
    assert "built against TensorFlow 2.0.0" in status.reason and tf.__version__ in status.reason
    for bad in [
        "{not json",
        dict(GPU_INFO, cuda_runtime="13"),
        {"tensorflow_version": tf.__version__},
    ]:
        status = library._load_gpu_kernels(_gpu_files(tmp_path, info=bad), CUDA_BUILD)
        assert not status.active and "cannot read the build info" in status.reason, bad


def test_usable_gpu_library_without_gpu(tmp_path):
    # Nothing here is wrong but the missing GPU, and that is checked before any loading.
    assert not tf.config.list_physical_devices("GPU")
    path = _gpu_files(tmp_path, info=GPU_INFO)
    status = library._load_gpu_kernels(path, CUDA_BUILD)
    assert status == gpu.GpuStatus(
        active=False,
        reason="TensorFlow sees no GPU.",
        cuda_runtime="13.0",
        min_driver="580",
        library=library.gpu_library_path(path),
    )


# ---------------------------------------------------------- this process ----


def test_this_process_has_no_gpu_kernels():
    info = tf_ops.build_info()
    status = tf_ops.gpu_status()
    assert status is tf_ops.gpu_status()  # decided once
    assert not status.active and status.gpus == ()
    if info.cuda:
        assert status.reason == "TensorFlow sees no GPU."
        with open(library.build_info_path(library.gpu_library_path())) as f:
            gpu_info = json.load(f)
        assert info.cuda_runtime == gpu_info["cuda_runtime"] == status.cuda_runtime
        assert info.cuda_min_driver == gpu.minimum_driver(
            (gpu.parse_version(info.cuda_runtime)[0], 0)
        )
        assert list(info.cuda_architectures) == gpu_info["cuda_architectures"]
    for op in _tf_ops_op_types():
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
        assert "GPU" not in devices and "CPU" in devices, (op, devices)


def _tf_ops_op_types() -> list[str]:
    module = tf_ops.load_library()
    return [
        "TfOps>" + "".join(part.capitalize() for part in name[len("tf_ops_") :].split("_"))
        for name in dir(module)
        if name.startswith("tf_ops_") and not name.endswith("_eager_fallback")
    ]


# ------------------------------------------------- the loader, end to end ---

# Imports tf_ops afresh for each case after installing its fakes, and prints one JSON
# line per case: the status, the GpuFallbackWarnings, each op's kernel devices and dtypes,
# and the device each op ran on inside tf.device("/GPU:0").
_CHILD = textwrap.dedent(r"""
    import json, sys, warnings
    import tensorflow as tf
    from tensorflow.python.framework import kernels, op_def_registry
    import fake_gpu

    DTYPES = {tf.half, tf.bfloat16, tf.float32, tf.float64}
    for case in json.loads(sys.argv[1]):
        for name in [m for m in sys.modules if m == "tf_ops" or m.startswith("tf_ops.")]:
            del sys.modules[name]
        fake_gpu.install([(n, tuple(cc)) for n, cc in case["gpus"]], case["driver"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import tf_ops
            from tf_ops.python.activation import functions as activations  # noqa: F401
            tf_ops.load_library(); tf_ops.load_library()
            status = tf_ops.gpu_status()
            assert tf_ops.gpu_status() is status
        module = tf_ops.load_library()
        ops, devices = {}, set()
        for attr in dir(module):
            if not attr.startswith("tf_ops_") or attr.endswith("_eager_fallback"):
                continue
            op = "TfOps>" + "".join(p.capitalize() for p in attr[len("tf_ops_"):].split("_"))
            found = {}
            for k in kernels.get_registered_kernels_for_op(op).kernel:
                (t,) = [c for c in k.constraint if c.name == "T"]
                found.setdefault(k.device_type, []).extend(t.allowed_values.list.type)
            # Five elements each; a gated op's features are two halves of five (and
            # BiasGated's bias has one element per feature).
            gated = op.startswith(("TfOps>Gated", "TfOps>BiasGated"))
            wide = ("features", "bias") if op.startswith("TfOps>BiasGated") else ("features",)
            x = tf.constant([-2.0, -0.5, 0.0, 0.5, 2.0])
            inputs = [tf.concat([x, x], 0) if gated and a.name in wide else x
                      for a in op_def_registry.get(op).input_arg]
            norm = op.endswith(("LayerNorm", "RmsNorm", "LayerNormGrad", "RmsNormGrad"))
            if norm:  # the norm ops: rows [1, 5], gamma and beta [5], statistics [1]
                inputs = [tf.reshape(x, [1, 5]) if a.name in ("x", "residual", "dy", "dh", "h")
                          else tf.ones([1]) if a.name in ("mean", "rstd") else x
                          for a in op_def_registry.get(op).input_arg]
            elif op.startswith("TfOps>BatchNorm"):  # x, y_backprop [1, 5]; count [], others [5]
                norm = True
                inputs = [tf.reshape(x, [1, 5]) if a.name in ("x", "y_backprop")
                          else tf.constant(1.0) if a.name == "count" else tf.ones([5])
                          for a in op_def_registry.get(op).input_arg]
            elif op.startswith("TfOps>GroupNorm"):  # x, dy [1, 2, 32] (32 groups, the
                norm = True                           # default); statistics [1, 32]
                x32 = tf.reshape(tf.tile(x, [13])[:64], [1, 2, 32])
                inputs = [x32 if a.name in ("x", "dy") else tf.ones([1, 32])
                          if a.name in ("mean", "rstd") else tf.ones([32])
                          for a in op_def_registry.get(op).input_arg]
            elif op.startswith("TfOps>RotaryEmbedding"):  # x [1, 5, 2] (pairs), a start
                norm = True
                inputs = [tf.reshape(tf.concat([x, x], 0), [1, 5, 2]), tf.constant(3.0)]
            elif op.startswith("TfOps>Attention"):  # q, k, v [1, 5, 1, 1]: 5 tokens, a
                norm = True                          # head of 1; mask, bias scalars (none)
                qkv = tf.reshape(x, [1, 5, 1, 1])
                inputs = [tf.constant(True) if a.name == "mask" else tf.constant(0.0)
                          if a.name == "bias" else tf.ones([1, 1, 5]) if a.name == "lse"
                          else qkv for a in op_def_registry.get(op).input_arg]
            elif op == "TfOps>ScaledMaskedSoftmax":  # the softmax family's non-float inputs
                inputs = [x, tf.constant(True)]
            elif op == "TfOps>SparseSoftmaxCrossEntropy":
                inputs = [tf.reshape(x, [1, 5]), tf.constant([1], tf.int64)]
            with tf.device("/GPU:0"):
                outputs = getattr(module, attr)(*inputs)
            for y in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
                shape = [10] if gated and op.endswith("Grad") else [5]
                if op == "TfOps>SparseSoftmaxCrossEntropy":
                    shape = y.shape  # [1] and [1, 5]
                assert (norm or y.shape == shape) and bool(tf.reduce_all(tf.math.is_finite(y))), (op, y)
                devices.add(y.device.rsplit("/", 1)[-1].rsplit(":", 1)[0].split(":")[-1])
            ops[op] = {d: sorted(set(t)) for d, t in found.items()}
        print(json.dumps({
            "case": case["name"],
            "status": {**status.__dict__, "message": status.message},
            "warnings": [str(w.message) for w in caught if issubclass(w.category, tf_ops.GpuFallbackWarning)],
            "ops": ops,
            "ran_on": sorted(devices),
            "dtypes": sorted(d.as_datatype_enum for d in DTYPES),
        }), flush=True)
    """)

_H200 = ["NVIDIA H200", [9, 0]]


@pytest.fixture(scope="module")
def loader_cases(tmp_path_factory):
    """{case: result} from one fresh process; the case that loads the GPU library last."""
    if not tf_ops.build_info().cuda:
        pytest.skip("the library was built without CUDA (CI builds it with CUDA)")
    tmp = str(tmp_path_factory.mktemp("drivers"))
    cases = [
        {"name": "no_gpu", "gpus": [], "driver": fake_gpu.build_driver(tmp, 13000)},
        {"name": "driver_absent", "gpus": [_H200], "driver": None},
        {
            "name": "driver_error",
            "gpus": [_H200],
            "driver": fake_gpu.build_driver(tmp, 13000, result=100),
        },
        {"name": "driver_too_old", "gpus": [_H200], "driver": fake_gpu.build_driver(tmp, 12040)},
        {
            "name": "gpu_without_code",
            "gpus": [["Tesla V100", [7, 0]]],
            "driver": fake_gpu.build_driver(tmp, 13000),
        },
        {"name": "new_enough", "gpus": [_H200], "driver": fake_gpu.build_driver(tmp, 13000)},
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, TESTS]), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(lines) == len(cases), proc.stdout + proc.stderr[-6000:]
    return {line["case"]: line for line in lines}


def _assert_cpu_kernels_only(result):
    assert result["ops"], result
    for op, devices in result["ops"].items():
        assert "GPU" not in devices, (op, devices)
        assert devices["CPU"] == result["dtypes"], (op, devices)
    assert result["ran_on"] == ["CPU"], result["ran_on"]


@pytest.mark.heavy  # loader_cases: a fresh process
def test_no_gpu_visible_loads_nothing_and_says_nothing(loader_cases):
    result = loader_cases["no_gpu"]
    assert (
        not result["status"]["active"] and result["status"]["reason"] == "TensorFlow sees no GPU."
    )
    assert result["warnings"] == []
    _assert_cpu_kernels_only(result)


@pytest.mark.heavy  # loader_cases: a fresh process
@pytest.mark.parametrize(
    "case, reason",
    [
        (
            "driver_absent",
            "The NVIDIA driver's CUDA version cannot be read (libcuda.so.1 cannot be loaded: ",
        ),
        (
            "driver_error",
            "The NVIDIA driver's CUDA version cannot be read (cuDriverGetVersion returned error 100).",
        ),
        (
            "driver_too_old",
            "The NVIDIA driver supports CUDA 12.4, but the GPU kernels are linked with the CUDA ",
        ),
        ("gpu_without_code", "Tesla V100 (compute capability 7.0) has no code in the GPU kernels"),
    ],
)
def test_refused_gpu_kernels_warn_once_and_every_op_runs_on_the_cpu(loader_cases, case, reason):
    result = loader_cases[case]
    status = result["status"]
    assert not status["active"] and status["reason"].startswith(reason), status
    assert status["gpus"] == (
        ["Tesla V100 (compute capability 7.0)"]
        if case == "gpu_without_code"
        else ["NVIDIA H200 (compute capability 9.0)"]
    )
    assert result["warnings"] == [status["message"]]
    _assert_cpu_kernels_only(result)


@pytest.mark.heavy  # loader_cases: a fresh process
def test_too_old_driver_warning_text(loader_cases):
    runtime = tf_ops.build_info().cuda_runtime
    if runtime != "13.0":
        pytest.skip(f"the exact text is for a CUDA 13.0 build; this one is CUDA {runtime}")
    assert loader_cases["driver_too_old"]["warnings"] == [TOO_OLD_WARNING]


@pytest.mark.heavy  # loader_cases: a fresh process
def test_new_enough_driver_loads_gpu_kernels_for_every_op_and_dtype(loader_cases):
    result = loader_cases["new_enough"]
    status = result["status"]
    assert status["active"] and status["driver_cuda"] == "13.0", status
    assert status["library"] == library.gpu_library_path()
    assert result["warnings"] == []
    for op, devices in result["ops"].items():
        assert devices["GPU"] == devices["CPU"] == result["dtypes"], (op, devices)
    # No GPU is really there: TensorFlow still runs every op, on the CPU.
    assert result["ran_on"] == ["CPU"]
