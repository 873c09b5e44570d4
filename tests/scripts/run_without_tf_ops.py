"""Runs exported models the way a deployment does: in a process that never imports
tf_ops. Used by tests/keras/test_export.py.

    run_without_tf_ops.py JOBS.json RESULTS.json

JOBS.json is a list of jobs, each {"name", "kind", "path", "input"} with kind:
  savedmodel       tf.saved_model.load(path), call its serving signature on `input`
  tflite_convert   convert the SavedModel at `path` with TFLITE_BUILTINS only, run it
  tflite           run the .tflite file at `path`
  onnx             tf2onnx (its command line, opset 18) on the SavedModel, then onnxruntime
  fail_savedmodel  tf.saved_model.load(path) must fail; record the message
  fail_tflite      converting the SavedModel at `path` must fail; record the message
`input` is a .npy file. RESULTS.json maps each name to {"output": .npy path (float32), "ops": the
op types in the artifact run} or {"error": message}. A TFLite job runs its model in four
ways (`_tflite_run`) and maps its name to {"runs": names}, each name "JOB@INTERPRETER/KERNELS"
with a result of its own that also has "logistic_max_abs_input". The process asserts, before
and after, that tf_ops is not among its modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

assert "tf_ops" not in sys.modules


def _serving(path: str):
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    return loaded, fn


def run_savedmodel(path: str, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    _, fn = _serving(path)
    (output,) = fn(tf.constant(x)).values()
    return output.numpy(), []


# Every TFLite model runs in each interpreter and kernel set a deployment may use: the
# interpreter of TensorFlow and that of LiteRT (ai-edge-litert), each with its default
# XNNPACK delegate and with the built-in kernels alone. They differ at extreme inputs
# (docs/deploy.md): XNNPACK's LOGISTIC is NaN for |z| ~ 1e28..1e35 on AVX-512 CPUs.
def _interpreters():
    from ai_edge_litert import interpreter as litert

    return {
        "tf.lite": (tf.lite.Interpreter, tf.lite.experimental.OpResolverType),
        "litert": (litert.Interpreter, litert.OpResolverType),
    }


def _tflite_run(content: bytes, x: np.ndarray) -> dict[str, tuple[np.ndarray, list[str], float]]:
    """{"tf.lite/xnnpack", "tf.lite/builtin", "litert/xnnpack", "litert/builtin"} -> (output,
    op types, the largest |input| of a LOGISTIC op, NaN ignored; measured in the builtin
    runs, which keep every tensor, and -1 where the model has none or in XNNPACK runs)."""
    runs = {}
    for name, (interpreter_type, resolvers) in _interpreters().items():
        for kernels, kwargs in (
            ("xnnpack", {}),
            ("builtin", {"experimental_op_resolver_type": resolvers.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                         "experimental_preserve_all_tensors": True}),
        ):
            interpreter = interpreter_type(model_content=content, **kwargs)
            (inp,) = interpreter.get_input_details()
            interpreter.resize_tensor_input(inp["index"], x.shape)
            interpreter.allocate_tensors()
            interpreter.set_tensor(inp["index"], x)
            interpreter.invoke()
            (out,) = interpreter.get_output_details()
            details = interpreter._get_ops_details()  # noqa: SLF001
            logistic_in = -1.0
            if kernels == "builtin":
                for op in details:
                    if op["op_name"] == "LOGISTIC":
                        z = np.abs(interpreter.get_tensor(op["inputs"][0]).astype(np.float64))
                        logistic_in = max(logistic_in, float(np.nanmax(z, initial=0.0)))
            ops = sorted({op["op_name"] for op in details})
            runs[f"{name}/{kernels}"] = (interpreter.get_tensor(out["index"]), ops, logistic_in)
    return runs


def _tflite_convert(path: str) -> bytes:
    converter = tf.lite.TFLiteConverter.from_saved_model(path)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no flex, no custom
    return converter.convert()


def run_onnx(path: str, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    import onnx
    import onnxruntime

    target = os.path.join(tempfile.mkdtemp(), "model.onnx")
    done = subprocess.run(
        [sys.executable, "-m", "tf2onnx.convert", "--saved-model", path, "--output", target,
         "--opset", "18"],
        capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tf2onnx failed:\n{done.stderr[-3000:]}")
    model = onnx.load(target)
    ops = sorted({node.op_type for node in model.graph.node}
                 | {node.op_type for f in model.functions for node in f.node})
    # tf2onnx exits 0 even when what it wrote does not load: onnxruntime decides.
    session = onnxruntime.InferenceSession(target, providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {session.get_inputs()[0].name: x})
    return output, ops


def _output_path(results_path: str, name: str) -> str:
    return os.path.join(os.path.dirname(results_path), name.replace("/", "-") + ".out.npy")


def _save(results_path: str, name: str, output) -> None:
    np.save(_output_path(results_path, name), np.asarray(output).astype(np.float32))  # bfloat16 has no .npy type


def main(jobs_path: str, results_path: str) -> None:
    with open(jobs_path, encoding="utf-8") as f:
        jobs = json.load(f)
    results = {}
    for job in jobs:
        x = np.load(job["input"]) if job.get("input") else None
        kind, path = job["kind"], job["path"]
        try:
            if kind == "savedmodel":
                output, ops = run_savedmodel(path, x)
            elif kind in ("tflite_convert", "tflite"):
                if kind == "tflite":
                    with open(path, "rb") as f:
                        content = f.read()
                else:
                    content = _tflite_convert(path)
                runs = _tflite_run(content, x)
                for run, (output, ops, logistic_in) in runs.items():
                    name = f"{job['name']}@{run}"
                    _save(results_path, name, output)
                    results[name] = {"output": _output_path(results_path, name), "ops": ops,
                                     "logistic_max_abs_input": logistic_in}
                results[job["name"]] = {"runs": [f"{job['name']}@{run}" for run in runs]}
                continue
            elif kind == "onnx":
                output, ops = run_onnx(path, x)
            elif kind == "fail_savedmodel":
                _serving(path)
                results[job["name"]] = {"error": None}
                continue
            elif kind == "fail_tflite":
                _tflite_convert(path)
                results[job["name"]] = {"error": None}
                continue
            else:
                raise ValueError(f"unknown job kind {kind}")
        except Exception as err:  # noqa: BLE001  (reported to the test, which decides)
            results[job["name"]] = {"error": f"{type(err).__name__}: {err}"}
            continue
        _save(results_path, job["name"], output)
        results[job["name"]] = {"output": _output_path(results_path, job["name"]), "ops": ops}
    assert "tf_ops" not in sys.modules
    results["_modules_checked"] = True
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
