"""examples/demo.py runs end to end (one epoch per variant) and writes its PNG."""

from __future__ import annotations

import re

from subprocesses import REPO_ROOT, run_python

DEMO = REPO_ROOT / "examples" / "demo.py"


def test_demo_runs_and_writes_the_plot(tmp_path):
    out = tmp_path / "plots" / "demo.png"  # the demo makes missing directories
    result = run_python(DEMO, "--epochs", "2", "--out", out, "--quiet", timeout=300)
    text = result.stdout
    for label in ("Keras built-in", "tf_ops layers"):
        row = re.search(rf"^{label}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", text, re.M)
        assert row, f"no result row for {label!r} in:\n{text}"
        train_acc, test_acc, first_s, epoch_s = map(float, row.groups())
        # Two epochs of Adam on the digits reach well above chance (0.1).
        assert 0.5 < train_acc <= 1 and 0.5 < test_acc <= 1, row.group(0)
        assert first_s > 0 and epoch_s > 0
    assert "Epoch 1/2" not in text  # --quiet: no progress display
    assert re.search(r"largest difference in test loss between the two runs: \S+", text)
    assert f"training curves: {out}" in text
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000

