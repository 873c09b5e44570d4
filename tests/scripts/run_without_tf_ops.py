"""Runs exported models the way a deployment does: in a process that never imports
tf_ops. Used by tests/test_export.py.

    run_without_tf_ops.py JOBS.json RESULTS.json

JOBS.json is a list of jobs, each {"name", "kind", "path", "input"} with kind:
  savedmodel       tf.saved_model.load(path), call its serving signature on `input`
  tflite_convert   convert the SavedModel at `path` with TFLITE_BUILTINS only, run it
  tflite           run the .tflite file at `path`
  onnx             tf2onnx (its command line, opset 18) on the SavedModel, then onnxruntime
  fail_savedmodel  tf.saved_model.load(path) must fail; record the message
  fail_tflite      converting the SavedModel at `path` must fail; record the message
`input` is a .npy file. RESULTS.json maps each name to {"output": .npy path (float32), "ops": the
op types in the artifact run} or {"error": message}. The process asserts, before and
after, that tf_ops is not among its modules.
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


def _tflite_run(content: bytes, x: np.ndarray) -> tuple[np.ndarray, list[str]]:
    interpreter = tf.lite.Interpreter(model_content=content)
    (inp,) = interpreter.get_input_details()
    interpreter.resize_tensor_input(inp["index"], x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    (out,) = interpreter.get_output_details()
    ops = sorted({op["op_name"] for op in interpreter._get_ops_details()})  # noqa: SLF001
    return interpreter.get_tensor(out["index"]), ops


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
            elif kind == "tflite_convert":
                output, ops = _tflite_run(_tflite_convert(path), x)
            elif kind == "tflite":
                with open(path, "rb") as f:
                    output, ops = _tflite_run(f.read(), x)
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
        out_path = os.path.join(os.path.dirname(results_path), job["name"] + ".out.npy")
        np.save(out_path, np.asarray(output).astype(np.float32))  # bfloat16 has no .npy type
        results[job["name"]] = {"output": out_path, "ops": ops}
    assert "tf_ops" not in sys.modules
    results["_modules_checked"] = True
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
