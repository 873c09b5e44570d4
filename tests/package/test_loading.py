"""Loading, in fresh processes (the op registry, kernel registry and gradient
registry are process-global): the library loaded from two threads at once, the
package imported from two threads at once, then imported again from scratch
(every tf_ops module dropped from sys.modules) and the library loaded again;
nothing raises, every gradient stays registered once (the first registration,
never replaced) and still runs the fused grad op. Without the built library,
importing the package fails with an ImportError that says how to build it.
(Same-process reloads are in test_registry.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import tf_ops
from op_specs import SPECS
from subprocesses import REPO_ROOT

# Fresh processes: make test only, not test-quick.
pytestmark = pytest.mark.heavy

ROOT = str(REPO_ROOT)
TIMEOUT_S = 300

_CHILD = textwrap.dedent(
    r"""
    import json, sys, threading

    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework import ops

    library_path, specs = sys.argv[1], json.loads(sys.argv[2])

    def together(fn, n=2):
        # Runs fn in n threads released at the same moment; returns their results.
        barrier, results, errors = threading.Barrier(n), [None] * n, []
        def run(i):
            try:
                barrier.wait()
                results[i] = fn()
            except BaseException as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert not errors, errors
        return results

    # 1. The library, from two threads at once, before tf_ops is imported.
    libs = together(lambda: tf.load_op_library(library_path))
    assert all(hasattr(lib, "tf_ops_leaky_relu") for lib in libs)

    # 2. The package, from two threads at once.
    def import_tf_ops():
        import tf_ops
        return tf_ops
    first, second = together(import_tf_ops)
    assert first is second
    import tf_ops
    assert tf_ops.load_library() is tf_ops.load_library()

    registered = {}
    for fwd, grad, takes_outputs, op_type, grad_op_type in specs:
        for t in (op_type, grad_op_type):
            fn = ops.gradient_registry.lookup(t)
            assert fn.__module__ == "tf_ops.python.activation.gradients", (t, fn.__module__)
            registered[t] = fn

    def check_gradients(module):
        # The tape gradient is exactly the fused grad op's result.
        x = tf.constant([-1.5, -0.25, 0.0, 0.5, 2.0])
        for fwd, grad, takes_outputs, op_type, grad_op_type in specs:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = getattr(module, fwd)(x)
            dx = tape.gradient(y, x)
            direct = getattr(module, grad)(tf.ones_like(x), y if takes_outputs else x)
            assert np.array_equal(dx.numpy(), direct.numpy()), (fwd, dx, direct)

    check_gradients(tf_ops)

    # 3. The package again, from scratch: new module objects, same registrations.
    for name in [m for m in sys.modules if m == "tf_ops" or m.startswith("tf_ops.")]:
        del sys.modules[name]
    import tf_ops as fresh
    assert fresh is not first
    assert fresh.load_library() is tf.load_op_library(library_path)
    for t, fn in registered.items():
        assert ops.gradient_registry.lookup(t) is fn, t  # registered once, not replaced
    check_gradients(fresh)
    check_gradients(first)  # the first import's functions still work
    print("LOADING OK")
    """
)


def _run(args, cwd: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", *args], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd, env=env
    )


def _env(pythonpath: str) -> dict:
    env = dict(os.environ, PYTHONPATH=pythonpath, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONSTARTUP", None)
    return env


def test_concurrent_and_repeated_loading_in_a_fresh_process():
    specs = [
        (s.forward.__name__, s.grad_op.__name__, s.grad_takes_outputs, s.op_type, s.grad_op_type) for s in SPECS
    ]
    result = _run([_CHILD, tf_ops.library_path(), json.dumps(specs)], cwd=ROOT, env=_env(ROOT))
    assert result.returncode == 0 and "LOADING OK" in result.stdout, result.stdout + result.stderr[-5000:]


def test_missing_library_raises_import_error_with_build_hint(tmp_path):
    """A source tree without the built .so: a clear ImportError, not a crash."""
    shutil.copytree(
        os.path.join(ROOT, "tf_ops"), tmp_path / "tf_ops", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    child = textwrap.dedent(
        """
        try:
            import tf_ops
        except ImportError as e:
            print("IMPORT ERROR:", e)
        else:
            raise SystemExit("tf_ops imported without its library")
        """
    )
    result = _run([child], cwd=str(tmp_path), env=_env(str(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert "IMPORT ERROR:" in result.stdout and "make build" in result.stdout, result.stdout
