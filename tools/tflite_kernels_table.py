"""What TFLite's interpreters and kernels give at extreme inputs: the table in
docs/deploy.md ("TFLite's interpreters and kernels at extreme inputs").

    .venv/bin/python tools/tflite_kernels_table.py

Converts a few one-op forms of f(z) with TFLITE_BUILTINS and runs each in TensorFlow's
`tf.lite.Interpreter` and LiteRT's (ai-edge-litert), with the default XNNPACK delegate and
with the built-in kernels alone; prints one Markdown row per form and run. TF-only: it
does not import tf_ops. XNNPACK's results depend on the CPU (its AVX-512 LOGISTIC is NaN
for |z| ~ 1e28..1e35): say which CPU ran it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

FORMS = {
    "1/(1+exp(-z))": lambda z: 1.0 / (1.0 + tf.exp(-z)),
    "z clamped to ±104": lambda z: 1.0 / (1.0 + tf.exp(-tf.clip_by_value(z, -104.0, 104.0))),
    "max(z, -104)": lambda z: tf.maximum(z, -104.0),
}
INPUTS = np.array([1e25, 1e28, 1e30, 1e32, 1e35, 3e38, np.inf,
                   -1e25, -1e28, -1e30, -1e35, -3e38, -np.inf, np.nan], np.float32)


def _interpreters():
    from ai_edge_litert import interpreter as litert

    for name, (interpreter, resolvers) in {
        "tf.lite": (tf.lite.Interpreter, tf.lite.experimental.OpResolverType),
        "LiteRT": (litert.Interpreter, litert.OpResolverType),
    }.items():
        yield f"{name}, XNNPACK", interpreter, {}
        yield f"{name}, built-in", interpreter, {
            "experimental_op_resolver_type": resolvers.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


def _tflite(form) -> bytes:
    fn = tf.function(form, input_signature=[tf.TensorSpec([None], tf.float32)])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


def main() -> None:
    print("| form | interpreter, kernels | " + " | ".join(f"{v:g}" for v in INPUTS) + " |")
    print("|---|---|" + "---|" * INPUTS.size)
    for label, form in FORMS.items():
        content = _tflite(form)
        for run, interpreter_type, kwargs in _interpreters():
            interpreter = interpreter_type(model_content=content, **kwargs)
            (inp,) = interpreter.get_input_details()
            interpreter.resize_tensor_input(inp["index"], INPUTS.shape)
            interpreter.allocate_tensors()
            interpreter.set_tensor(inp["index"], INPUTS)
            interpreter.invoke()
            out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
            print(f"| `{label}` | {run} | " + " | ".join(f"{v:g}" for v in out) + " |")


if __name__ == "__main__":
    main()
