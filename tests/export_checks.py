"""Running exported models where tf_ops is not imported (scripts/run_without_tf_ops.py) and
checking what comes back: the portable-export tests of every family (tests/keras/test_export.py
and each family's layer tests) share these."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import tf_ops
from subprocesses import SCRIPTS, run_python

# The largest |z| a LOGISTIC op of a portable model may see: XNNPACK's LOGISTIC is right
# to about 1e25 (NaN from ~1e28 to ~1e35 on AVX-512), and from |z| = 104 on the float32
# logistic is exactly 0 or 1 (the composites clamp there: portable_math.logistic).
LOGISTIC_INPUT_LIMIT = 104.0


def run_jobs(tmp_path: Path, jobs: list[dict]) -> dict:
    jobs_file, results_file = tmp_path / "jobs.json", tmp_path / "results.json"
    jobs_file.write_text(json.dumps(jobs))
    run_python(SCRIPTS / "run_without_tf_ops.py", jobs_file, results_file, timeout=1500)
    results = json.loads(results_file.read_text())
    assert results.pop("_modules_checked") is True
    return results


def export_runs(results: dict, job: dict, model, x: np.ndarray):
    """(run, output, expected) for each run of the job (a TFLite model runs in TensorFlow's
    and LiteRT's interpreters, each with XNNPACK and with the built-in kernels alone), after
    checking that each ran, that its artifact holds no TfOps> op, TFLite flex op or custom
    op, and that no LOGISTIC op saw an input beyond LOGISTIC_INPUT_LIMIT (what makes
    XNNPACK's NaN, whatever this machine's CPU). `expected` is the fused model's output.

    TFLite's built-in arithmetic kernels (ADD, SUB, MUL, DIV) clamp their results to the
    float range (docs/deploy.md): there ±inf is ±FLT_MAX from the first such op on, and a
    value computed from an infinite input or an overflow is whatever the composite makes of
    ±FLT_MAX at that point. So in a built-in run ±FLT_MAX reads as ±inf (no finite value
    here is ±FLT_MAX itself: the largest input is 3.4e38), and where the fused model's
    value is infinite or depends on an infinite input (it differs with the inputs clamped
    to the float range), the run must have its sign and NaN-ness and then counts as the
    fused value (`_from_infinities`); everywhere else it is held to the tolerances as the
    others.
    """
    result = results[job["name"]]
    assert "error" not in result, f"{job['name']}: {result['error']}"
    runs = result.get("runs", [job["name"]])
    assert "runs" not in result or len(runs) == 4, result
    expected = np.asarray(model(x))
    for name in runs:
        run = results[name]
        assert "error" not in run, f"{name}: {run['error']}"
        ops = run["ops"]
        assert not [o for o in ops if "TfOps" in o or o.startswith("Flex") or o == "CUSTOM"], ops
        assert run.get("logistic_max_abs_input", -1.0) <= LOGISTIC_INPUT_LIMIT, (
            f"{name}: a LOGISTIC op's input reached {run['logistic_max_abs_input']:.3g}")
        got = np.load(run["output"])
        if name.endswith("/builtin"):  # the docstring's second paragraph
            got = _infinities(got)
            _from_infinities(name, got, expected, np.asarray(model(_float_range(x))))
        yield name, got, expected


def _from_infinities(name: str, got: np.ndarray, expected: np.ndarray,
                          at_float_range: np.ndarray) -> None:
    """Where `expected` is infinite or differs from the fused model's value at inputs
    clamped to the float range, `got` must be NaN with it and otherwise of its sign; those
    entries are then set to `expected`."""
    e, c = _infinities(expected), _infinities(at_float_range)
    moved = np.isinf(e) | np.isinf(c) | ~((e == c) | (np.isnan(e) & np.isnan(c)))
    assert np.array_equal(np.isnan(got[moved]), np.isnan(e[moved])), (name, got[moved], e[moved])
    signed = moved & ~np.isnan(e)
    assert np.array_equal(np.sign(got[signed]), np.sign(e[signed])), (name, got[signed], e[signed])
    got[moved] = e[moved]


def _float_range(x: np.ndarray) -> np.ndarray:
    """x with ±inf clamped to ±FLT_MAX (NaN stays)."""
    largest = np.finfo(np.float32).max
    return np.clip(x, -largest, largest)


def _infinities(values: np.ndarray) -> np.ndarray:
    """values with ±FLT_MAX read as ±inf."""
    values = np.array(values, dtype=np.float32)
    values[np.abs(values) == np.finfo(np.float32).max] *= np.inf
    return values


def assert_portable_export_runs(model, x: np.ndarray, tmp_path: Path, tol: float) -> None:
    """Exports `model` under `tf_ops.portable()` and runs it, in a process without tf_ops,
    as a SavedModel, converted to TFLite builtins (TensorFlow's and LiteRT's interpreters,
    with XNNPACK and with the built-in kernels alone) and to ONNX (onnxruntime): no TfOps>
    op in any artifact, every run within `tol` (relative and absolute) of the model's
    output on `x`."""
    with tf_ops.portable():
        model.export(str(tmp_path / "export"), verbose=False)
    np.save(tmp_path / "x.npy", x)
    jobs = [{"name": k, "kind": k, "path": str(tmp_path / "export"), "input": str(tmp_path / "x.npy")}
            for k in ("savedmodel", "tflite_convert", "onnx")]
    results = run_jobs(tmp_path, jobs)
    for job in jobs:
        for run, got, expected in export_runs(results, job, model, x):
            np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=run)
