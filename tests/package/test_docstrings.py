"""The examples in the public docstrings run and print what they say: every function in
`tf_ops`, every layer in `tf_ops.layers`, and the modules' own docstrings."""

from __future__ import annotations

import doctest
import inspect
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_ops
from tf_ops.python.core import portable_math


def _public_objects():
    yield "tf_ops", tf_ops
    yield "tf_ops.layers", tf_ops.layers
    for name in tf_ops.__all__:
        obj = getattr(tf_ops, name)
        if inspect.isfunction(obj) or obj is tf_ops.portable:
            yield f"tf_ops.{name}", obj
    for name in tf_ops.layers.__all__:
        yield f"tf_ops.layers.{name}", getattr(tf_ops.layers, name)
    for name in ("vanishing_product", "keep_nan", "logistic", "erfc", "expm1_nonpositive"):
        yield f"portable_math.{name}", getattr(portable_math, name)


@pytest.mark.parametrize("name,obj", [pytest.param(n, o, id=n) for n, o in _public_objects()])
def test_docstring_examples_run(name, obj):
    assert obj.__doc__ and "Example" in obj.__doc__, f"{name} has no example in its docstring"
    globs = {"tf": tf, "np": np, "keras": keras, "tf_ops": tf_ops, "export_dir": tempfile.mkdtemp(),
             **vars(portable_math)}
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(obj, name, globs=globs)
    assert tests and any(t.examples for t in tests), f"{name}: no runnable example"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
