"""examples/demo.py runs end to end (three interleaved epochs of each variant), prints its
comparison and writes its PNG; and its verdict on the time ratios is honest: a consistent
difference is called one, a mixed or short series is called noise."""

from __future__ import annotations

import doctest
import importlib.util
import re
import sys

import pytest

from subprocesses import REPO_ROOT, run_python

DEMO = REPO_ROOT / "examples" / "demo.py"


def _demo_module():
    if "tf_ops_demo" not in sys.modules:  # its dataclasses look their module up there
        spec = importlib.util.spec_from_file_location("tf_ops_demo", DEMO)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["tf_ops_demo"]


def test_demo_runs_and_writes_the_plot(tmp_path):
    out = tmp_path / "plots" / "demo.png"  # the demo makes missing directories
    result = run_python(DEMO, "--epochs", "3", "--out", out, timeout=300)
    text = result.stdout
    for label in ("Keras built-in", "tf_ops layers"):
        row = re.search(rf"^{label}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", text, re.M)
        assert row, f"no result row for {label!r} in:\n{text}"
        train_acc, test_acc, first_s, epoch_s = map(float, row.groups())
        # Three epochs of Adam on the digits reach well above chance (0.1).
        assert 0.5 < train_acc <= 1 and 0.5 < test_acc <= 1, row.group(0)
        assert first_s > 0 and epoch_s > 0
    # One line per epoch with both variants.
    assert len(re.findall(r"^epoch \d/3: Keras built-in .* s, .*tf_ops layers", text, re.M)) == 3, text
    assert re.search(r"largest difference in test loss between the two runs: \S+", text)
    ratio = re.search(r"^time per epoch, tf_ops / Keras, interleaved: median ([\d.]+), "
                      r"interquartile range ([\d.]+)-([\d.]+) over 2 rounds", text, re.M)
    assert ratio, text
    median, low, high = map(float, ratio.groups())
    assert 0 < low <= median <= high
    # Two rounds can never show a difference: the demo must say so.
    assert re.search(r"^within noise: tf_ops was faster in \d of 2 rounds", text, re.M), text
    # The tf_ops model, exported under tf_ops.portable() and run by TFLite's interpreter,
    # agrees with the fused model (within float32 rounding) and so scores like it.
    tflite = re.search(r"^exported under tf_ops.portable\(\) to TFLite \(builtin ops only, [\d,]+ bytes\): "
                       r"test accuracy ([\d.]+) \(Keras built-in [\d.]+, tf_ops layers ([\d.]+)\); "
                       r"largest logit difference from the fused model (\S+)$", text, re.M)
    assert tflite, text
    tflite_acc, fused_acc, gap = map(float, tflite.groups())
    assert gap < 1e-3 and abs(tflite_acc - fused_acc) <= 2 / 450, tflite.group(0)
    assert f"training curves: {out}" in text
    # Nothing but the demo's own lines: no converter listing, no deprecation notice.
    everything = result.stdout + result.stderr
    for noise in ("Saved artifact at", "tf.lite.Interpreter is deprecated", "XNNPACK delegate"):
        assert noise not in everything, everything
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_quiet_prints_no_epoch_lines(tmp_path):
    result = run_python(DEMO, "--epochs", "1", "--out", tmp_path / "d.png", "--quiet", timeout=300)
    assert "epoch 1/1" not in result.stdout
    assert "no timed rounds" in result.stdout


@pytest.mark.parametrize(
    "ratios, verdict",
    [
        ([0.9] * 12, r"tf_ops is 10% faster per epoch \(12 of 12 rounds, sign test p = 0.00049\)"),
        ([1.25, 1.3, 1.2, 1.22, 1.27, 1.24, 1.26, 1.23, 1.28, 0.99],
         r"tf_ops is 2\d% slower per epoch \(1 of 10 rounds, sign test p = 0.021\)"),
        # The case: one slow moment makes a mean or a single run look like 1.26.
        ([0.92, 1.26, 0.95, 1.04, 0.9, 1.08, 0.97, 1.02], r"^within noise: tf_ops was faster in 4 of 8 rounds"),
        ([0.8, 0.85, 0.9, 0.9, 0.95], r"^within noise: tf_ops was faster in 5 of 5 rounds, sign test p = 0.06"),
        ([], r"^no timed rounds"),
    ],
)
def test_verdict_calls_only_consistent_differences_real(ratios, verdict):
    comparison = _demo_module().compare(ratios)
    assert re.search(verdict, comparison.verdict()), comparison.verdict()
    if ratios:
        assert comparison.low <= comparison.median <= comparison.high


def test_docstring_examples():
    module = _demo_module()
    failures, tried = doctest.testmod(module, verbose=False)
    assert tried >= 2 and failures == 0
