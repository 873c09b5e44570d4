"""Keras's own test file for each public drop-in (a tf_ops layer or loss that stands for
a Keras class of the same name), run with that name meaning tf_ops's class: a user who
swaps the class expects every argument and behaviour Keras tests to hold, so a gap
(an argument tf_ops's class does not take) fails here. The number of tests each file
runs is pinned, so that an upstream change is seen, not skipped (the tests Keras marks
for other backends are left out, as pytest leaves them out of Keras's own run).

keras-hub's ``RotaryEmbedding`` test file runs against ``tf_ops.layers.RotaryEmbedding``
in tests/rotary/test_rotary_layer.py.
"""

from __future__ import annotations

import importlib
import types
import unittest

import pytest

import tf_ops

L = tf_ops.layers


# (Keras's test module, the name it reaches the class through, the class, tf_ops's
# class, the TestCase, how many of its tests run on the TensorFlow backend)
UPSTREAM = [
    ("keras.src.layers.core.dense_test", "layers", "Dense", L.Dense, "DenseTest", 72),
    ("keras.src.layers.normalization.batch_normalization_test", "layers",
     "BatchNormalization", L.BatchNormalization, "BatchNormalizationTest", 33),
    ("keras.src.layers.normalization.layer_normalization_test", "layers",
     "LayerNormalization", L.LayerNormalization, "LayerNormalizationTest", 7),
    ("keras.src.layers.normalization.rms_normalization_test", "layers",
     "RMSNormalization", L.RMSNormalization, "RMSNormalizationTest", 4),
    ("keras.src.layers.activations.softmax_test", "softmax", "Softmax", L.Softmax,
     "SoftmaxTest", 9),
    ("keras.src.layers.activations.elu_test", "elu", "ELU", L.ELU, "ELUTest", 3),
    ("keras.src.layers.activations.leaky_relu_test", "leaky_relu", "LeakyReLU",
     L.LeakyReLU, "LeakyReLUTest", 3),
    ("keras.src.losses.losses_test", "losses", "SparseCategoricalCrossentropy",
     tf_ops.losses.SparseCategoricalCrossentropy, "SparseCategoricalCrossentropyTest", 12),
]

def _skipped_by_pytest(test: unittest.TestCase) -> bool:
    """Whether pytest would skip `test` (its ``skip`` or true ``skipif`` marks: Keras
    marks tests for other backends so, which unittest does not read)."""
    method = getattr(test, test._testMethodName)
    for mark in getattr(method, "pytestmark", []):
        if mark.name == "skip" or (mark.name == "skipif" and mark.args and bool(mark.args[0])):
            return True
    return False


@pytest.mark.heavy  # runs Keras's own test files
@pytest.mark.heavy  # runs Keras's own test files
@pytest.mark.parametrize("module_name, namespace, name, ours, case, expected",
                         [pytest.param(*u, id=u[2]) for u in UPSTREAM])
def test_keras_upstream_tests_hold(module_name, namespace, name, ours, case, expected,
                                   monkeypatch):
    module = importlib.import_module(module_name)
    replaced = types.SimpleNamespace(**vars(getattr(module, namespace)))
    setattr(replaced, name, ours)
    monkeypatch.setattr(module, namespace, replaced)
    loaded = unittest.defaultTestLoader.loadTestsFromTestCase(getattr(module, case))
    suite = unittest.TestSuite(t for t in loaded if not _skipped_by_pytest(t))
    result = unittest.TestResult()
    suite.run(result)
    problems = [f"{test.id()}: {trace}" for test, trace in result.failures + result.errors]
    assert not problems, "\n".join(problems)
    assert result.testsRun == expected and not result.skipped, (result.testsRun,
                                                                 result.skipped)
