"""Checks one op library file on its own: every op and grad op on CPU.

    python tests/check_op_library.py LIBRARY [--cpu-only]

Makes the tf_ops package load LIBRARY instead of tf_ops/_tf_ops.so, then runs
every op and grad op of `op_specs.SPECS`, for every attr variant and dtype,
eagerly and in a tf.function, against the float64 references; the tape gradient
(the registered gradient calling the grad op); the kernel registry (CPU kernels
for every dtype, and with --cpu-only no GPU kernels); and two bad inputs that
must raise, not crash. Prints a summary and exits 1 on any failure.

Run it in a process of its own: a process must never load two copies of the
same kernels (TF then fails every call with "Multiple OpKernel registrations
match"). tests/package/test_bazel_build.py runs it on the Bazel-built library.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import traceback

LIBRARY_MODULE = "tf_ops._tf_ops"


class _LibraryFinder(importlib.abc.MetaPathFinder):
    """Resolves tf_ops._tf_ops, which tf_ops.python.core.library looks up with
    importlib.util.find_spec, to the given file."""

    def __init__(self, path: str):
        self._path = path

    def find_spec(self, fullname, path=None, target=None):
        if fullname != LIBRARY_MODULE:
            return None
        return importlib.util.spec_from_file_location(fullname, self._path)


def _loaded_op_libraries() -> set[str]:
    """Files named *_tf_ops.so mapped into this process (Linux)."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if line.rstrip().endswith("_tf_ops.so")}


def main(argv: list[str]) -> int:
    library = os.path.realpath(argv[1])
    cpu_only = "--cpu-only" in argv[2:]
    if not os.path.isfile(library):
        print(f"no such library: {library}")
        return 1
    sys.meta_path.insert(0, _LibraryFinder(library))
    # This checkout's tf_ops package (as pytest.ini's pythonpath = .).
    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework import kernels

    import tf_ops
    from checks import assert_close, assert_library_still_works
    from op_specs import DTYPE_IDS, DTYPES, SPECS, as_f64, round_attrs, sample, to_dtype

    failures: list[str] = []
    checked = 0

    def check(what: str, fn) -> None:
        nonlocal checked
        checked += 1
        try:
            fn()
        except Exception:  # noqa: BLE001  every failure is reported, then exit 1
            failures.append(f"{what}:\n{traceback.format_exc()}")

    # The library under test, and no other copy of the kernels, is loaded.
    def check_loaded():
        assert os.path.realpath(tf_ops.library_path()) == library, tf_ops.library_path()
        assert _loaded_op_libraries() == {library}, _loaded_op_libraries()

    check("library loaded", check_loaded)

    dtype_enums = {dt.as_datatype_enum for dt in DTYPES}

    def check_kernels(op_type: str):
        found: dict[str, set] = {}
        for k in kernels.get_registered_kernels_for_op(op_type).kernel:
            (constraint,) = [c for c in k.constraint if c.name == "T"]
            found.setdefault(k.device_type, set()).update(constraint.allowed_values.list.type)
        assert found.get("CPU") == dtype_enums, found
        if cpu_only:
            assert set(found) == {"CPU"}, f"expected CPU kernels only: {sorted(found)}"

    for spec in SPECS:
        for op_type in (spec.op_type, spec.grad_op_type):
            check(f"{op_type} kernels", lambda t=op_type: check_kernels(t))

    def check_values(spec, attrs, dtype, mode):
        ra = round_attrs(attrs)
        x = to_dtype(sample((1001,), 5, lo=-3, hi=1), dtype)
        g = to_dtype(sample((1001,), 6, lo=-1, hi=0.5), dtype)
        v = to_dtype(spec.grad_input(as_f64(x), attrs), dtype)
        fwd = lambda x: spec.forward(x, **attrs)  # noqa: E731
        grad = lambda g, v: spec.grad_op(g, v, **attrs)  # noqa: E731

        def tape_grad(x, g):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = spec.forward(x, **attrs)
            return tape.gradient(y, x, output_gradients=g)

        if mode == "function":
            fwd, grad, tape_grad = tf.function(fwd), tf.function(grad), tf.function(tape_grad)
        y = fwd(tf.constant(x))
        assert y.dtype == dtype and y.shape == x.shape
        assert_close(y, spec.ref(as_f64(x), **ra), spec.tolerance(dtype), "forward")
        expected_dx = spec.ref_grad(as_f64(g), as_f64(v), **ra)
        dx = grad(tf.constant(g), tf.constant(v))
        assert dx.dtype == dtype and dx.shape == x.shape
        assert_close(dx, expected_dx, spec.grad_tolerance(dtype, g), "grad op")
        # Through the registered gradient, which hands the grad op the features
        # or (Elu) the op's own outputs y.
        v_tape = as_f64(y) if spec.grad_takes_outputs else as_f64(x)
        assert_close(tape_grad(tf.constant(x), tf.constant(g)), spec.ref_grad(as_f64(g), v_tape, **ra),
                     spec.grad_tolerance(dtype, g), "tape gradient")

    for spec in SPECS:
        for attrs in spec.attr_variants:
            for dtype in DTYPES:
                for mode in ("eager", "function"):
                    what = f"{spec.op_type}{dict(attrs)} {DTYPE_IDS[dtype]} {mode}"
                    check(what, lambda s=spec, a=dict(attrs), d=dtype, m=mode: check_values(s, a, d, m))

    def check_errors(spec):
        try:
            spec.grad_op(tf.ones([3]), tf.ones([4]))
            raise AssertionError("mismatched shapes did not raise")
        except tf.errors.InvalidArgumentError as err:
            assert "[3]" in str(err) and "[4]" in str(err), str(err)
        for attrs, pattern in spec.invalid_attrs[:1]:
            try:
                spec.forward(tf.ones([2]), **attrs)
                raise AssertionError(f"{attrs} did not raise")
            except (ValueError, tf.errors.InvalidArgumentError):
                pass
        assert_library_still_works()

    for spec in SPECS:
        check(f"{spec.op_type} errors", lambda s=spec: check_errors(s))

    for failure in failures:
        print("FAILED", failure)
    print(f"{library}: {checked - len(failures)} passed, {len(failures)} failed "
          f"(TF {tf.__version__}, {np.__name__} {np.__version__})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
