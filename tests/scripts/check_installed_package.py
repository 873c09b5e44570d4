"""Checks an installed tf_ops package from outside the source tree.

    python -I check_installed_package.py SOURCE_TREE WORK_DIR

Run it with `-I` from a folder outside the source tree, so that neither the source tree nor
PYTHONPATH is on sys.path. It imports tf_ops, which must come from this interpreter's
site-packages with its library; checks that the package requires exactly the TensorFlow
installed here and that the library was built against it; runs every op and grad op of
tests/op_specs.py (SOURCE_TREE/tests holds no package, only the references), every attribute
variant and dtype, eagerly, against the float64 references, and the tape gradient; fits a Keras
model with every tf_ops layer, saves it to WORK_DIR as `.keras`, reloads it and checks it
predicts the same; and, when the library has XLA lowerings, runs every op in float32 under jit_compile.
Prints "INSTALLED PACKAGE OK" at the end, or fails with a traceback.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path


def _load_tool(source: Path, name: str):
    """A module of SOURCE_TREE/tools, loaded by path (tools/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, source / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(source: Path, work: Path) -> None:
    assert not any(Path(p).resolve() == source for p in sys.path if p), sys.path
    import numpy as np
    import tensorflow as tf
    import keras

    import tf_ops

    tf.get_logger().setLevel("ERROR")  # one tf.function per op and attribute: retracing is meant
    # The installed package, with its library, from this environment.
    site = {Path(sysconfig.get_path(k)).resolve() for k in ("purelib", "platlib")}
    package = Path(tf_ops.__file__).resolve().parent
    assert package.parent in site, f"tf_ops imported from {package}, not from {site}"
    library = Path(tf_ops.library_path()).resolve()
    assert library.parent == package, library
    info = tf_ops.build_info()
    assert info is not None and info.tensorflow_version == tf.__version__, (info, tf.__version__)
    pinned = _load_tool(source, "tensorflow_requirement").requirement()
    requires = importlib.metadata.requires("tf_ops")
    assert pinned in requires, f"tf_ops requires {requires}; installed here: {pinned}"
    print(f"tf_ops {importlib.metadata.version('tf_ops')} from {package}, requires {requires}, "
          f"library built against TensorFlow {info.tensorflow_version} "
          f"(CUDA {info.cuda}, XLA {info.xla})")

    # Every op and its gradient, against the references (source/tests: no package in it).
    sys.path.append(str(source / "tests"))
    from op_specs import DTYPES, SPECS, as_f64, round_attrs, sample, to_dtype

    def close(actual, expected, tol, what):
        a, e = as_f64(actual), np.asarray(expected, np.float64)
        ok = np.isclose(a, e, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        assert ok.all(), f"{what}: {(~ok).sum()} elements off, e.g. {a[~ok][:3]} vs {e[~ok][:3]}"

    checked = 0
    for spec in SPECS:
        for attrs in map(dict, spec.attr_variants):
            ra = round_attrs(attrs)
            for dtype in DTYPES:
                what = f"{spec.name}{attrs} {dtype.name}"
                x = to_dtype(sample((1001,), 5, lo=-3, hi=1), dtype)
                g = to_dtype(sample((1001,), 6, lo=-1, hi=0.5), dtype)
                with tf.GradientTape() as tape:
                    xt = tf.constant(x)
                    tape.watch(xt)
                    y = spec.forward(xt, **attrs)
                dx = tape.gradient(y, xt, output_gradients=tf.constant(g))
                close(y, spec.ref(as_f64(x), **ra), spec.tolerance(dtype), what)
                v = as_f64(y) if spec.grad_takes_outputs else as_f64(x)
                close(dx, spec.ref_grad(as_f64(g), v, **ra), spec.grad_tolerance(dtype, g), what + " gradient")
                v = to_dtype(spec.grad_input(as_f64(x), attrs), dtype)
                direct = spec.grad_op(tf.constant(g), tf.constant(v), **attrs)
                close(direct, spec.ref_grad(as_f64(g), as_f64(v), **ra), spec.grad_tolerance(dtype, g),
                      what + " grad op")
                checked += 1
                if info.xla and dtype == tf.float32:
                    jitted = tf.function(lambda t: spec.forward(t, **attrs), jit_compile=True)  # noqa: B023
                    close(jitted(tf.constant(x)), spec.ref(as_f64(x), **ra), spec.tolerance(dtype), what + " jit")
    print(f"{checked} op, gradient and grad op checks passed"
          + (" (float32 also under jit_compile)" if info.xla else ""))

    # Keras: every layer in one model; fit, save as .keras, reload, same predictions.
    layer_classes = [tf_ops.layers.LAYERS[name] for name in sorted(tf_ops.layers.LAYERS)]
    keras.utils.set_random_seed(0)
    layers = [keras.Input((8,))]
    for cls in layer_classes:
        layers += [keras.layers.Dense(8), cls()]
    # The Dense layers with the bias and activation (or the gate) fused.
    layers += [tf_ops.layers.Dense(8, activation=tf_ops.gelu),
               tf_ops.layers.GatedDense(8, activation="swish")]
    layer_classes += [tf_ops.layers.Dense, tf_ops.layers.GatedDense]
    model = keras.Sequential([*layers, keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    data = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    history = model.fit(data, data[:, :1], epochs=2, batch_size=16, verbose=0)
    assert all(np.isfinite(history.history["loss"])), history.history
    path = work / "model.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert [type(l) for l in reloaded.layers] == [type(l) for l in model.layers]
    np.testing.assert_array_equal(reloaded.predict(data, verbose=0), model.predict(data, verbose=0))
    print(f"Keras: {len(layer_classes)} tf_ops layers fit, saved to {path.name} and reloaded")
    print("INSTALLED PACKAGE OK")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())
