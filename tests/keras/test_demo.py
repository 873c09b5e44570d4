"""examples/demo.py (`make demo`) runs end to end on a keras.applications model and prints
its six lines and nothing else: what it trains, the interleaved time ratio of the stock
and the patched train steps, the first steps' losses side by side, where both loss
curves are drawn (the file is written), both test accuracies, and the TFLite export of
the patched model (builtin ops only, run by LiteRT's interpreter) agreeing with Keras."""

from __future__ import annotations

import math
import re

import pytest

from subprocesses import REPO_ROOT, run_python

DEMO = REPO_ROOT / "examples" / "demo.py"


@pytest.mark.slow
def test_demo_prints_the_ratio_and_the_export_and_nothing_else(tmp_path):
    # Small images, 320 of them, two epochs (the first traces): what `make demo` does, quicker.
    plot = tmp_path / "losses.png"
    result = run_python(DEMO, "--epochs", "2", "--side", "32", "--train-images", "320",
                        "--plot", str(plot), timeout=900,
                        TF_CPP_MIN_LOG_LEVEL="0")  # the demo silences TensorFlow itself
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 6, result.stdout + result.stderr
    assert re.fullmatch(r"keras\.applications\.MobileNetV3Small on scikit-learn's digits at "
                        r"32x32 \(320 training images\), batch 32, 2 epochs: stock Keras, and "
                        r"the same inside `with tf_ops\.patch_keras\(\):`", lines[0]), lines[0]
    ratio = re.fullmatch(r"train step, stock time / patched time, (\d+) interleaved rounds "
                         r"\(first epoch excluded\): median ([\d.]+)x, interquartile range "
                         r"([\d.]+)-([\d.]+)", lines[1])
    assert ratio, lines[1]
    rounds, median, low, high = int(ratio[1]), *map(float, ratio.groups()[1:])
    assert rounds == 320 // 32 and 0 < low <= median <= high
    first = re.fullmatch(r"loss at the first 5 steps, stock\|patched: ((?:[\d.]+\|[\d.]+  ){4}"
                         r"[\d.]+\|[\d.]+)", lines[2])
    assert first, lines[2]
    pairs = [tuple(map(float, p.split("|"))) for p in first[1].split("  ")]
    # The first step starts from the same weights on the same batch: its loss agrees to
    # the last digit printed; the next ones drift by float32 rounding that Adam and the
    # batch norms amplify step by step (seen: 2.2587 and 2.2491 at the fifth).
    assert abs(pairs[0][0] - pairs[0][1]) <= 1e-4, pairs
    assert all(abs(a - b) <= 0.02 * a for a, b in pairs), pairs
    assert lines[3] == f"both loss curves, all 20 steps: {plot}", lines[3]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    accuracy = re.fullmatch(r"test accuracy \(450 held-out images\): stock ([\d.]+), patched "
                            r"([\d.]+)", lines[4])
    assert accuracy, lines[4]
    stock, patched = map(float, accuracy.groups())
    # Agree within a few dozen images of 450 (the patched training is the stock one to
    # rounding: tests/keras/test_patch_models.py's check). Not that either learned: after this
    # run's 20 steps the batch norms' moving statistics (momentum 0.99) are still near
    # their start, and inference can be at chance (0.1) for both.
    assert 0.0 <= min(stock, patched) and abs(stock - patched) <= 0.1, (stock, patched)
    tflite = re.fullmatch(r"the patched model exported to TFLite \(builtin ops only, [\d,]+ "
                          r"bytes\) and run by LiteRT: the class Keras predicts for (\d+) of "
                          r"450 test images, probabilities within (\S+)", lines[5])
    assert tflite, lines[5]
    assert int(tflite[1]) >= 448 and float(tflite[2]) < 1e-4
